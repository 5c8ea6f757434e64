"""The environment ring: groups are served round-robin, each stepped while the others wait for actions,
and segments carry the right bootstrap values across termination and truncation."""

import gymnasium
import numpy as np
import pytest
import zmq
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from conftest import contract_of
from srl_hpc import config, graph
from srl_hpc.handlers.actor import RingGroup
from srl_hpc.rundir import RunDir
from srl_hpc.streams import wire
from srl_hpc.streams.inference import InferenceClient, InferenceServer
from srl_hpc.streams.samples import SampleProducer
from srl_hpc.streams.security import write_run_keys
from srl_hpc.worker.process import Worker


class Counter(gymnasium.Env):
    """obs = [steps so far in the episode]; terminates after `terminate_at` steps (if set)."""

    observation_space = gymnasium.spaces.Box(0, 1000, (1,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def __init__(self, terminate_at=None):
        self.terminate_at = terminate_at
        self.n = 0

    def reset(self, seed=None, options=None):
        self.n = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.n += 1
        terminated = self.terminate_at is not None and self.n >= self.terminate_at
        return np.array([float(self.n)], np.float32), 1.0, terminated, False, {}


def value_of(obs):
    return (obs[:, 0] * 10 + 1).astype(np.float32)


def run_group(group, steps):
    """Drive a RingGroup with a deterministic 'policy' (value = 10*obs+1); return emitted segments."""
    segments, obs = [], group.request_obs()
    for version in range(steps):
        n = len(obs)
        reply = {"actions": np.zeros(n, np.int64), "logp": np.zeros(n, np.float32), "values": value_of(obs)}
        request, seg = group.advance(reply, version)
        if seg is not None:
            segments.append(seg)
        obs = request
    return segments


def counter_group(*envs):
    return SyncVectorEnv([lambda env=env: env for env in envs], autoreset_mode=AutoresetMode.NEXT_STEP)


def test_segments_bootstrap_across_termination_and_truncation():
    envs = counter_group(Counter(terminate_at=3), gymnasium.wrappers.TimeLimit(Counter(), max_episode_steps=2))
    group = RingGroup(envs, segment_length=4, seed=0, contract=contract_of(envs))
    segments = run_group(group, steps=9)  # 2 full segments need 8 steps + 1 reply for the last next values
    assert len(segments) == 2
    seg = segments[0]
    # env 0: obs 0,1,2 | terminates | its final obs 3 comes back once (the auto-reset step, invalid) | 0 ...
    assert seg["obs"][0, :, 0].tolist() == [0, 1, 2, 3]
    assert seg["values"][0].tolist() == [1, 11, 21, 31]
    assert seg["next_values"][0].tolist() == [11, 21, 0, 1]  # terminated: no bootstrap
    assert seg["dones"][0].tolist() == [False, False, True, False]
    assert seg["valid"][0].tolist() == [True, True, True, False]
    # env 1: truncated every 2 steps: the final obs (2) is bootstrapped -> value 21, then its reset step is invalid
    assert seg["obs"][1, :, 0].tolist() == [0, 1, 2, 0]
    assert seg["next_values"][1].tolist() == [11, 21, 1, 11]
    assert seg["dones"][1].tolist() == [False, True, False, False]
    assert seg["valid"][1].tolist() == [True, True, False, True]
    assert segments[1]["valid"][1].tolist() == [True, False, True, True]
    assert seg["versions"][0].tolist() == [0, 1, 2, 3] and segments[1]["versions"][0].tolist() == [4, 5, 6, 7]
    assert sorted(group.finished_episodes) == [(2.0, 2)] * 3 + [(3.0, 3)] * 2  # 9 steps of each env
    assert group.valid_steps == 2 * 9 - 2 - 3  # the 2 + 3 auto-reset steps are not transitions


@pytest.fixture
def actor(tmp_path):
    exp = config.loads(
        "name: ring\nstop: {wall_time: 1}\nmonitor: {trace: false}\n"
        "workers: {actor: {count: 1, ring_size: 6, inference_splits: 3, segment_length: 4}}\n"
    )
    write_run_keys(RunDir(tmp_path))
    worker = Worker(exp, graph.build(exp), "actor/0", tmp_path)
    actor = worker.handlers["actor"]
    router = worker.ctx.socket(zmq.ROUTER)
    router.bind("inproc://inference")
    dealer = worker.ctx.socket(zmq.DEALER)
    dealer.connect("inproc://inference")
    (link,) = actor.links  # one policy: its inference and sample streams, on test sockets
    link.inference = InferenceClient(dealer)
    pull = worker.ctx.socket(zmq.PULL)
    pull.bind("inproc://samples")
    link.samples = SampleProducer(worker.ctx, ["inproc://samples"])
    yield actor, InferenceServer(router), pull
    worker.close()


def answer(server, req, version=0):
    n = len(req.obs)
    server.reply(
        req,
        {"version": version},
        {"actions": np.zeros(n, np.int64), "logp": np.zeros(n, np.float32), "values": np.zeros(n, np.float32)},
    )


def test_ring_is_served_round_robin_while_other_groups_wait(actor):
    actor, server, _ = actor
    actor.start()
    pending = {r.meta["group"]: r for r in server.poll_batch(100, 1000)}
    assert sorted(pending) == [0, 1, 2]  # every group has a request in flight
    answer(server, pending.pop(2))  # group 2's actions arrive first ...
    actor.poll(100)
    assert actor.env_frames == 0 and actor.next_group == 0  # ... but the ring waits for group 0
    answer(server, pending.pop(0))
    actor.poll(100)
    assert actor.env_frames == 2 and actor.next_group == 1  # group 0 stepped while 1 still waits
    pending.update({r.meta["group"]: r for r in server.poll_batch(100, 1000)})
    assert sorted(pending) == [0, 1]  # group 0 asked again right away
    answer(server, pending.pop(1))
    actor.poll(100)
    actor.poll(100)  # group 2's buffered reply
    assert actor.env_frames == 6 and actor.next_group == 0


def test_segments_reach_the_sample_stream(actor):
    actor, server, pull = actor
    actor.start()
    for version in range(5 * 3):  # 5 steps of each of the 3 groups -> one 4-step segment per group
        for req in server.poll_batch(100, 1000):
            answer(server, req, version)
        actor.poll(100)
    got = []
    while pull.poll(200, zmq.POLLIN):
        got.append(wire.unpack(pull.recv_multipart()))
    assert len(got) == 3
    assert all(m.arrays["obs"].shape == (2, 4, 4) for m in got)
    assert actor.frames_sent == 3 * 2 * 4
