"""Recurrent policies: the state actors keep and send with their requests is the state the trainer unrolls
their segments from, through episode ends; the inference stream carries it both ways."""

import numpy as np
import pytest
import torch
import zmq

from conftest import ROOT, contract_of
from srl_hpc import config
from srl_hpc.algorithm_spec import HIDDEN
from srl_hpc.algorithms.dqn import DQN
from srl_hpc.algorithms.ppo import PPO
from srl_hpc.algorithms.replay import nstep_transitions
from srl_hpc.envs.backends import make_env_group, spaces
from srl_hpc.handlers.buffer import sequences
from srl_hpc.handlers.policy import InferenceEngine
from srl_hpc.handlers.ring import RingGroup
from srl_hpc.models.building import build_model
from srl_hpc.streams import unix
from srl_hpc.streams.inference import InferenceClient, InferenceServer, ShmInferenceClient

EXPERIMENT = ROOT / "experiments" / "cartpole_novelocity_gru_ppo.yaml"
DQN_EXPERIMENT = ROOT / "experiments" / "cartpole_novelocity_gru_dqn.yaml"


def experiment(rnn: str):
    return config.with_overrides(config.load(EXPERIMENT), [f"model.rnn={rnn}"])


def play(exp, engine, envs: int, segment_length: int, steps: int, explore=None) -> list[dict]:
    """An actor's ring group driven by a policy engine, as a policy worker would answer it; its segments."""
    state_size = exp.model.state_size
    vector = make_env_group(exp.env, envs, seed=3)
    group = RingGroup(vector, segment_length, 3, contract_of(vector, exp.algorithm.name, state_size))
    segments, obs = [], group.request_obs()
    for _ in range(steps):
        reply = engine.infer(obs, explore or {}, group.hidden)
        obs, segment = group.advance(reply, engine.version)
        if segment is not None:
            segments.append(segment)
    return segments


@pytest.mark.parametrize("rnn", ["gru", "lstm"])
@pytest.mark.slow
def test_unrolling_a_segment_replays_the_states_its_actions_were_chosen_with(rnn):
    exp = experiment(rnn)
    model = build_model(exp, *spaces(exp.env))
    engine = InferenceEngine(model, PPO.act, torch.device("cpu"), seed=0)
    segments = play(exp, engine, envs=4, segment_length=40, steps=161)  # random CartPole episodes: ~20 steps
    assert len(segments) == 4 and all(s[HIDDEN].shape == (4, exp.model.state_size) for s in segments)
    assert not segments[0][HIDDEN].any() and segments[1][HIDDEN].any()  # a fresh start; then carried over
    batch = PPO(model, exp.algorithm, torch.device("cpu")).prepare(
        {k: np.concatenate([s[k] for s in segments]) for k in segments[0]}
    )
    assert batch["resets"].sum() > 10  # episodes ended inside segments
    valid = batch["valid"]
    with torch.no_grad():
        logits, values, _ = model(batch["obs"], batch[HIDDEN], batch["resets"])
        logp = logits.log_softmax(-1).gather(-1, batch["actions"].unsqueeze(-1)).squeeze(-1)
        assert torch.allclose(logp[valid], batch["logp"][valid], atol=1e-5)
        assert torch.allclose(values[valid], batch["values"][valid], atol=1e-5)
        # what the resets are for: carried across episode ends, the states (and so the policy) differ
        _, carried, _ = model(batch["obs"], batch[HIDDEN], torch.zeros_like(batch["resets"]))
        assert not torch.allclose(carried[valid], values[valid], atol=1e-3)


@pytest.mark.parametrize("burn_in", [True, False])
@pytest.mark.slow
def test_recurrent_dqn_replays_sequences_from_the_states_actors_acted_with(burn_in):
    """Sequences as a buffer makes them: the burn-in (the segment before, unrolled from its stored state)
    ends in exactly the state the actors stored at the trained segment's start, through episode ends; the
    n-step targets' parts are those of the feed-forward path's transitions; an update trains."""
    exp = config.with_overrides(config.load(DQN_EXPERIMENT), [f"algorithm.burn_in={str(burn_in).lower()}"])
    model = build_model(exp, *spaces(exp.env))
    engine = InferenceEngine(model, DQN.act, torch.device("cpu"), seed=0)
    epsilon = {"epsilon": np.full(4, 0.5, np.float32)}
    segments = play(exp, engine, envs=4, segment_length=16, steps=4 * 16 + 4, explore=epsilon)
    dqn = DQN(model, exp.algorithm, torch.device("cpu"))
    n, T = exp.algorithm.n_step, 16
    for previous, last, following in [(None, segments[0], segments[1]), (segments[1], segments[2], segments[3])]:
        items = sequences(previous, last, following, n, burn_in)
        assert items["obs"].shape[:2] == (4, (2 * T if burn_in else T) + n)
        batch = dqn.prepare({**items, "weights": np.ones(4, np.float32)})
        if burn_in:
            with torch.no_grad():
                _, state = model(batch["obs"][:, :T], batch[HIDDEN], batch["resets"][:, :T])
            assert batch["resets"][:, T].all() == (previous is None)  # before a stream's first segment: zeroed
            expected = torch.from_numpy(last[HIDDEN]) * ~batch["resets"][:, T : T + 1]
            assert torch.allclose(state * ~batch["resets"][:, T : T + 1], expected, atol=1e-5)
        transitions = nstep_transitions(
            {k: np.concatenate([last[k], following[k][:, :n]], 1) for k in last}, n, exp.algorithm.gamma
        )
        valid = batch["valid"].numpy()
        assert valid.sum() == last["valid"].sum() == len(transitions["returns"])
        assert np.allclose(batch["returns"].numpy()[valid], transitions["returns"])
        assert np.allclose(batch["discounts"].numpy()[valid], transitions["discounts"])
    before = {k: v.clone() for k, v in model.state_dict().items()}
    stats, feedback = dqn.update(batch, frames_done=0)
    assert all(np.isfinite(v) for v in stats.values()) and feedback["priorities"].shape == (4,)
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.slow
def test_a_recurrent_ppo_update_trains_on_valid_steps_only():
    exp = experiment("gru")
    model = build_model(exp, *spaces(exp.env))
    engine = InferenceEngine(model, PPO.act, torch.device("cpu"), seed=0)
    segments = play(exp, engine, envs=4, segment_length=16, steps=33)
    ppo = PPO(model, exp.algorithm, torch.device("cpu"))
    batch = ppo.prepare({k: np.concatenate([s[k] for s in segments]) for k in segments[0]})
    before = {k: v.clone() for k, v in model.state_dict().items()}
    stats, _ = ppo.update(batch, frames_done=0)
    assert all(np.isfinite(v) for v in stats.values())
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    # a step marked invalid carries no gradient: changing what it holds changes nothing of the update
    torch.manual_seed(0)
    model.load_state_dict(before)
    ppo = PPO(model, exp.algorithm, torch.device("cpu"))
    first, _ = ppo.update(batch, frames_done=0)
    altered = dict(batch, advantages=torch.where(batch["valid"], batch["advantages"], 1e6))
    torch.manual_seed(0)
    model.load_state_dict(before)
    ppo = PPO(model, exp.algorithm, torch.device("cpu"))
    second, _ = ppo.update(altered, frames_done=0)
    assert first == pytest.approx(second)


def test_ppo_and_dqn_train_recurrent_models_and_others_are_told_where():
    with pytest.raises(config.ConfigError, match=r"model\.rnn.*vdn does not train recurrent models"):
        config.loads("model: {rnn: gru}\nalgorithm: {name: vdn}\nworkers: {buffer: {count: 1}}\nstop: {wall_time: 1}\n")
    config.loads("model: {rnn: gru}\nalgorithm: {name: dqn}\nworkers: {buffer: {count: 1}}\nstop: {wall_time: 1}\n")
    with pytest.raises(config.ConfigError, match=r"model\.separate_critic"):
        config.loads("model: {rnn: lstm, separate_critic: true}\n")
    assert config.loads("model: {rnn: lstm, rnn_size: 32}\nstop: {wall_time: 1}\n").model.state_size == 64


@pytest.fixture
def zmq_ctx():
    ctx = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)


def test_the_recurrent_state_travels_with_requests_and_replies_over_both_transports(zmq_ctx, tmp_path):
    fields = contract_of(make_env_group(experiment("gru").env, 1), "ppo", state_size=6).reply_fields()
    server, port = InferenceServer.bind(zmq_ctx, (2,), (), fields, local_path=unix.socket_path(tmp_path, "policy/0"))
    dealer = zmq_ctx.socket(zmq.DEALER)
    dealer.connect(f"tcp://127.0.0.1:{port}")
    clients = [
        InferenceClient(dealer),
        ShmInferenceClient(unix.socket_path(tmp_path, "policy/0"), 1, 3, (2,), np.float32, fields),
    ]
    try:
        for i, client in enumerate(clients):
            hidden = np.full((3, 6), i + 0.5, np.float32)
            client.send(0, np.zeros((3, 2), np.float32), {}, hidden)
            (req,) = next(batch for _ in range(20) if (batch := server.poll_batch(10, 2000)))
            assert np.array_equal(req.hidden, hidden)
            server.reply(
                req,
                {"version": 1},
                {
                    "actions": np.zeros(3, np.int64),
                    "logp": np.zeros(3, np.float32),
                    "values": np.zeros(3, np.float32),
                    HIDDEN: req.hidden * 2,
                },
            )
            assert np.array_equal(client.wait(0, 2000).arrays[HIDDEN], hidden * 2)
        # a request without the state (or a state that is not finite) is dropped and counted
        clients[0].send(0, np.zeros((3, 2), np.float32), {})
        clients[0].send(0, np.zeros((3, 2), np.float32), {}, np.full((3, 6), np.nan, np.float32))
        assert all(server.poll_batch(10, 100) == [] for _ in range(5)) and server.malformed == 2
    finally:
        clients[1].close()
        server.close()
