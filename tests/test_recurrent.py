"""Recurrent policies: the state actors keep and send with their requests is the state the trainer unrolls
their segments from, through episode ends; the inference stream carries it both ways."""
import numpy as np
import pytest
import torch
import zmq

from conftest import ROOT
from srl_hpc import config
from srl_hpc.algorithms import HIDDEN, SPECS, reply_fields
from srl_hpc.algorithms.ppo import PPO
from srl_hpc.envs.backends import make_env_group, spaces
from srl_hpc.handlers.actor import RingGroup, segment_fields
from srl_hpc.handlers.policy import InferenceEngine
from srl_hpc.models import build_model
from srl_hpc.streams import unix
from srl_hpc.streams.inference import InferenceClient, InferenceServer, ShmInferenceClient

EXPERIMENT = ROOT / "experiments" / "cartpole_novelocity_gru_ppo.yaml"


def experiment(rnn: str):
    return config.with_overrides(config.load(EXPERIMENT), [f"model.rnn={rnn}"])


def play(exp, engine, envs: int, segment_length: int, steps: int) -> list[dict]:
    """An actor's ring group driven by a policy engine, as a policy worker would answer it; its segments."""
    state_size = exp.model.state_size
    group = RingGroup(make_env_group(exp.env, envs, seed=3), segment_length, 3, segment_fields(SPECS["ppo"], state_size),
                      dict(SPECS["ppo"].reply), state_size)
    segments, obs = [], group.request_obs()
    for _ in range(steps):
        reply = engine.infer(obs, {}, group.hidden)
        obs, segment = group.advance(reply, engine.version)
        if segment is not None:
            segments.append(segment)
    return segments


@pytest.mark.parametrize("rnn", ["gru", "lstm"])
def test_unrolling_a_segment_replays_the_states_its_actions_were_chosen_with(rnn):
    exp = experiment(rnn)
    model = build_model(exp, *spaces(exp.env))
    engine = InferenceEngine(model, PPO.act, torch.device("cpu"), seed=0)
    segments = play(exp, engine, envs=4, segment_length=40, steps=161)  # random CartPole episodes: ~20 steps
    assert len(segments) == 4 and all(s[HIDDEN].shape == (4, exp.model.state_size) for s in segments)
    assert not segments[0][HIDDEN].any() and segments[1][HIDDEN].any()  # a fresh start; then carried over
    batch = PPO(model, exp.algorithm, torch.device("cpu")).prepare(
        {k: np.concatenate([s[k] for s in segments]) for k in segments[0]})
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


def test_only_ppo_trains_recurrent_models_and_the_user_is_told_where():
    with pytest.raises(config.ConfigError, match=r"model\.rnn.*dqn does not train recurrent models"):
        config.loads("model: {rnn: gru}\nalgorithm: {name: dqn}\nworkers: {buffer: {count: 1}}\n")
    with pytest.raises(config.ConfigError, match=r"model\.separate_critic"):
        config.loads("model: {rnn: lstm, separate_critic: true}\n")
    assert config.loads("model: {rnn: lstm, rnn_size: 32}\nstop: {wall_time: 1}\n").model.state_size == 64


@pytest.fixture
def zmq_ctx():
    ctx = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)


def test_the_recurrent_state_travels_with_requests_and_replies_over_both_transports(zmq_ctx, tmp_path):
    fields = reply_fields(SPECS["ppo"], state_size=6)
    server, port = InferenceServer.bind(zmq_ctx, (2,), (), fields, local_path=unix.socket_path(tmp_path, "policy/0"))
    dealer = zmq_ctx.socket(zmq.DEALER)
    dealer.connect(f"tcp://127.0.0.1:{port}")
    clients = [InferenceClient(dealer), ShmInferenceClient(unix.socket_path(tmp_path, "policy/0"), 1, 3, (2,),
                                                           np.float32, fields)]
    try:
        for i, client in enumerate(clients):
            hidden = np.full((3, 6), i + 0.5, np.float32)
            client.send(0, np.zeros((3, 2), np.float32), {}, hidden)
            (req,) = next(batch for _ in range(20) if (batch := server.poll_batch(10, 2000)))
            assert np.array_equal(req.hidden, hidden)
            server.reply(req, {"version": 1}, {"actions": np.zeros(3, np.int64), "logp": np.zeros(3, np.float32),
                                               "values": np.zeros(3, np.float32), HIDDEN: req.hidden * 2})
            assert np.array_equal(client.wait(0, 2000).arrays[HIDDEN], hidden * 2)
        # a request without the state (or a state that is not finite) is dropped and counted
        clients[0].send(0, np.zeros((3, 2), np.float32), {})
        clients[0].send(0, np.zeros((3, 2), np.float32), {}, np.full((3, 6), np.nan, np.float32))
        assert all(server.poll_batch(10, 100) == [] for _ in range(5)) and server.malformed == 2
    finally:
        clients[1].close()
        server.close()
