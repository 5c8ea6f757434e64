"""The message contract (srl_hpc/streams/contract.py): every supported space travels through the wire and
through shared memory unchanged, receivers accept exactly what senders make, and the model reads a packed
Dict observation back key by key."""

import gymnasium
import numpy as np
import pytest
import torch
import zmq
from gymnasium import spaces

from srl_hpc.algorithm_spec import SPECS
from srl_hpc.models.torsos import ObsDecoder
from srl_hpc.streams import unix, wire
from srl_hpc.streams.contract import ActionContract, Contract, ObsContract, SpaceError
from srl_hpc.streams.inference import InferenceServer, ShmInferenceClient

OBSERVATIONS = {
    "box": spaces.Box(-1, 1, (3,), np.float64),
    "image": spaces.Box(0, 255, (2, 6, 6), np.uint8),
    "dict": spaces.Dict(
        {
            "image": spaces.Box(0, 255, (2, 6, 6), np.uint8),
            "vector": spaces.Box(-5, 5, (3,), np.float32),
            "count": spaces.Discrete(7),
            "action_mask": spaces.Box(0, 1, (4,), np.int8),
        }
    ),
}
ACTIONS = {
    "discrete": spaces.Discrete(4),
    "multi_discrete": spaces.MultiDiscrete([3, 2, 4]),
    "box": spaces.Box(-2.0, 2.0, (2,), np.float32),
}


def batch_of(space: gymnasium.Space, n: int, seed: int = 0):
    space.seed(seed)
    samples = [space.sample() for _ in range(n)]
    if isinstance(space, spaces.Dict):
        return {k: np.stack([s[k] for s in samples]) for k in space.spaces}
    return np.stack(samples)


def contract(obs: str, action: str, state_size: int = 0, scale_rewards: bool = False) -> Contract:
    return Contract(
        ObsContract(OBSERVATIONS[obs]), ActionContract(ACTIONS[action]), SPECS["ppo"], state_size, scale_rewards
    )


@pytest.mark.parametrize("obs", OBSERVATIONS)
@pytest.mark.parametrize("action", ACTIONS)
def test_a_segment_of_every_space_travels_the_wire_unchanged_and_is_accepted(obs, action):
    c = contract(obs, action, state_size=3, scale_rewards=True)
    rng = np.random.default_rng(0)
    seg = c.segment_arrays(rows=2, length=5)
    packed = [c.obs.pack(batch_of(OBSERVATIONS[obs], 2, seed=t)) for t in range(5)]
    seg["obs"][:] = np.stack(packed, 1)
    seg["actions"][:] = np.stack([batch_of(ACTIONS[action], 2, seed=t) for t in range(5)], 1)
    for name, array in seg.items():
        if name not in ("obs", "actions"):
            array[:] = rng.integers(0, 2, array.shape).astype(array.dtype)
    msg = wire.unpack(
        wire.pack("segment", {"actor": "actor/0", "incarnation": 0, "group": 0, "frames": 10, "fill_seconds": 0.1}, seg)
    )
    assert c.segment_layout(5, ["actor/0"]).accepts(msg)
    for name in seg:
        assert np.array_equal(msg.arrays[name], seg[name]), name
    if obs == "dict":  # the keys come back, each with its dtype and shape
        back = c.obs.unpack(msg.arrays["obs"][:, 0])
        for key, value in batch_of(OBSERVATIONS[obs], 2, seed=0).items():
            assert back[key].dtype == value.dtype and np.array_equal(back[key], value), key


@pytest.mark.parametrize("action", ACTIONS)
def test_a_segment_with_an_impossible_action_or_another_actions_shape_is_refused(action):
    c = contract("box", action)
    seg = {k: np.zeros_like(v) for k, v in c.segment_arrays(2, 4).items()}
    layout = c.segment_layout(4, ["actor/0"])
    meta = {"actor": "actor/0", "incarnation": 0, "group": 0, "frames": 8, "fill_seconds": 0.1}
    assert layout.accepts(wire.Message("segment", meta, seg))
    if action == "box":
        bad = np.full_like(seg["actions"], np.nan)
    elif action == "multi_discrete":
        bad = seg["actions"].copy()
        bad[0, 0, 1] = 2  # the second head has 2 choices
    else:
        bad = np.full_like(seg["actions"], 4)
    assert not layout.accepts(wire.Message("segment", meta, {**seg, "actions": bad}))
    assert not layout.accepts(wire.Message("segment", meta, {**seg, "actions": seg["actions"][..., None]}))


@pytest.mark.parametrize("obs", OBSERVATIONS)
@pytest.mark.parametrize("action", ACTIONS)
def test_requests_and_replies_of_every_space_travel_through_shared_memory(tmp_path, obs, action):
    c = contract(obs, action)
    ctx = zmq.Context()
    path = unix.socket_path(tmp_path, "policy/0")
    server, _ = InferenceServer.bind(ctx, c.obs.shape, (), c.reply_fields(), local_path=path)
    client = ShmInferenceClient(path, 1, 3, c.obs.shape, c.obs.dtype, c.reply_fields())
    try:
        sent = c.obs.pack(batch_of(OBSERVATIONS[obs], 3))
        client.send(0, sent)
        batch = []
        for _ in range(100):
            batch = server.poll_batch(16, 50)
            if batch:
                break
        (request,) = batch
        assert request.obs.dtype == c.obs.dtype and np.array_equal(request.obs, sent)
        reply = {
            "actions": batch_of(ACTIONS[action], 3).astype(c.action.dtype),
            "logp": np.ones(3, np.float32),
            "values": np.full(3, 2.0, np.float32),
        }
        server.reply(request, {"version": 1}, reply)
        got = client.wait(0, 5000)
        assert got is not None
        for name, value in reply.items():
            assert got.arrays[name].dtype == value.dtype and np.array_equal(got.arrays[name], value), name
    finally:
        client.close()
        server.close()
        ctx.destroy(linger=0)


@pytest.mark.parametrize("rows", [1, 4])  # (one row: a slice of it shares the row's storage, at any byte offset)
def test_the_model_decodes_a_packed_dict_observation_key_by_key(rows):
    space = OBSERVATIONS["dict"]
    values = batch_of(space, rows)
    decoded = ObsDecoder(space)(torch.from_numpy(ObsContract(space).pack(values)))
    for key, value in values.items():
        expected = torch.from_numpy(value)
        assert decoded[key].dtype == expected.dtype and torch.equal(decoded[key], expected)
    mask = ObsDecoder(space).mask(torch.from_numpy(ObsContract(space).pack(values)))
    assert torch.equal(mask, torch.from_numpy(values["action_mask"]))


def test_box_actions_reach_the_env_inside_its_bounds_clipped_or_squashed():
    space = ACTIONS["box"]
    raw = np.array([[-10.0, 0.0], [0.5, 10.0]], np.float32)
    assert np.array_equal(ActionContract(space, "clip").to_env(raw), [[-2.0, 0.0], [0.5, 2.0]])
    squashed = ActionContract(space, "tanh").to_env(raw)
    assert np.allclose(squashed, 2.0 * np.tanh(raw)) and (np.abs(squashed) <= 2.0).all()
    shifted = ActionContract(spaces.Discrete(3, start=-1)).to_env(np.array([0, 2]))
    assert shifted.tolist() == [-1, 1]


def test_spaces_the_contract_cannot_carry_are_named():
    with pytest.raises(SpaceError, match="Tuple or Dict"):
        ActionContract(spaces.Tuple([spaces.Discrete(2), spaces.Discrete(3)]))
    with pytest.raises(SpaceError, match="Box or a Dict"):
        ObsContract(spaces.Discrete(5))
    with pytest.raises(SpaceError, match="key 'inner'"):
        ObsContract(spaces.Dict({"inner": spaces.Dict({"x": spaces.Discrete(2)})}))
