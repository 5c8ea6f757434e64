"""Actor worker: an environment ring that feeds the inference and sample streams. Never imports torch.

The ring's environments are cut into `inference_splits` groups. Each group has one inference request in
flight at a time; while group k waits for its actions, the actor steps the groups whose actions have
arrived. Every step records the policy version that chose its action, and each group cuts its
trajectories into fixed-length segments (all envs of a group step together, so their segments align and
travel as one message of shape (envs, T, ...)).
"""
from __future__ import annotations

import time

import numpy as np
import zmq

from srl_hpc.api.env import make_env_group
from srl_hpc.streams import endpoints, wire
from srl_hpc.streams.inference import InferenceClient, ShmInferenceClient, shm_name
from srl_hpc.system.worker import POLL_MS, Worker

SEGMENT_KEYS = ("obs", "actions", "logp", "values", "next_values", "rewards", "dones", "valid", "versions")


def segment_frames(segment: dict, frames_per_step: int) -> int:
    """Env frames in segments: their valid steps (an auto-reset step is not a transition) x frame skip."""
    return int(segment["valid"].sum()) * frames_per_step


class RingGroup:
    """Envs that share one inference request (one vectorised env), and the segment they are filling.

    `advance(reply)` applies one reply: it completes the previous step with the values it brings (the
    bootstrap value of every step is the value of the state after it), steps the group with its actions,
    and returns the observations of the next request. The envs auto-reset on the step after an episode
    ends, so a truncated episode's final observation is in the next request like any other, and the
    reset step itself is recorded with valid=False (the trainer skips it).
    """

    def __init__(self, envs, segment_length: int, seed: int):
        self.envs = envs
        self.n = envs.num_envs
        self.T = segment_length
        self.obs = np.array(envs.reset(seed=seed)[0])
        self.segment = self._new_segment()
        self.t = 0
        self._pending = False  # the step at t-1 still waits for its next values
        self._terminated = np.zeros(self.n, bool)
        self._resetting = np.zeros(self.n, bool)  # the next step of these envs is their auto-reset
        self.valid_steps = 0
        self.episode_return = np.zeros(self.n)
        self.episode_length = np.zeros(self.n, np.int64)
        self.finished_episodes: list[tuple[float, int]] = []

    def _new_segment(self) -> dict[str, np.ndarray]:
        n, T = self.n, self.T
        return {"obs": np.empty((n, T, *self.obs.shape[1:]), self.obs.dtype), "actions": np.empty((n, T), np.int64),
                "logp": np.empty((n, T), np.float32), "values": np.empty((n, T), np.float32),
                "next_values": np.empty((n, T), np.float32), "rewards": np.empty((n, T), np.float32),
                "dones": np.empty((n, T), bool), "valid": np.empty((n, T), bool), "versions": np.empty((n, T), np.int64)}

    def request_obs(self) -> np.ndarray:
        return self.obs

    def advance(self, actions, logp, values, version: int) -> tuple[np.ndarray, dict | None]:
        """Apply one reply. Returns (next request's observations, a finished segment or None)."""
        finished = None
        if self._pending:
            self.segment["next_values"][:, self.t - 1] = np.where(self._terminated, 0.0, values)
            if self.t == self.T:
                finished, self.segment, self.t = self.segment, self._new_segment(), 0
        t, seg = self.t, self.segment
        valid = ~self._resetting
        seg["obs"][:, t] = self.obs
        seg["actions"][:, t] = actions
        seg["logp"][:, t] = logp
        seg["values"][:, t] = values
        seg["versions"][:, t] = version
        seg["valid"][:, t] = valid
        obs, rewards, terminated, truncated, _ = self.envs.step(np.asarray(actions))
        done = np.logical_or(terminated, truncated)
        seg["rewards"][:, t] = rewards
        seg["dones"][:, t] = done
        self.valid_steps += int(valid.sum())
        self.episode_return += rewards
        self.episode_length += valid
        for i in np.flatnonzero(done):
            self.finished_episodes.append((float(self.episode_return[i]), int(self.episode_length[i])))
        self.episode_return[done], self.episode_length[done] = 0.0, 0
        self._terminated, self._resetting = np.asarray(terminated, bool), done
        self.obs = np.array(obs)  # (a backend may step into the same buffer again; requests and segments keep this)
        self.t += 1
        self._pending = True
        return self.obs, finished


class ActorWorker(Worker):
    kind = "actor"

    def __init__(self, exp, index, run_dir, local_rank=0):
        super().__init__(exp, index, run_dir, local_rank)
        a = exp.workers.actor
        seed = exp.seed * 1_000_003 + index * a.ring_size
        per_group = a.ring_size // a.inference_splits
        self.groups = []
        for g in range(a.inference_splits):
            envs = make_env_group(exp.env, per_group, seed + g * per_group)
            self.groups.append(RingGroup(envs, a.segment_length, seed + g * per_group))
        self.next_group = 0
        self.frames_per_step = exp.env.frames_per_step  # Atari: agent steps x frame skip
        self.frames_sent = 0
        self.frames_discarded = 0  # filled segments that could not be sent before stop
        self.episodes = 0
        self._returns: list[tuple[float, int]] = []

    def connect(self, table):
        super().connect(table)
        if self.exp.workers.placement == "impala":
            self.inference = self._local_inference(table)
        else:
            sock = self.ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            server = endpoints.inference_server_for(self.index, self.exp.workers)
            sock.connect(endpoints.address(table, server, endpoints.INFERENCE))
            self.inference = self._inference_client(sock, same_node=table[server]["node"] == table[self.name]["node"])
        self.samples = self.ctx.socket(zmq.PUSH)
        self.samples.setsockopt(zmq.LINGER, 5000)  # segments already sent must reach the trainer
        self.samples.setsockopt(zmq.SNDHWM, 2)  # a busy trainer slows actors down instead of queueing stale data
        for trainer in endpoints.workers_of(table, "trainer"):
            self.samples.connect(endpoints.address(table, trainer, endpoints.SAMPLES))

    def _inference_client(self, sock: zmq.Socket, same_node: bool) -> InferenceClient:
        transport = self.exp.workers.actor.inference_transport
        if transport == "shm" and not same_node:
            raise RuntimeError("inference_transport 'shm' needs the inference server on this node; it is not")
        if transport == "zmq" or not same_node:
            return InferenceClient(sock)
        obs = self.groups[0].obs
        return ShmInferenceClient(sock, len(self.groups), len(obs), obs.shape[1:], obs.dtype,
                                  name=shm_name(self.run_dir, self.name))

    def close(self):
        if isinstance(getattr(self, "inference", None), ShmInferenceClient):
            self.inference.close()
        for group in self.groups:
            group.envs.close()
        super().close()

    def _local_inference(self, table):
        """IMPALA-style placement: this actor runs the policy itself (the one case an actor imports torch)."""
        import torch

        from srl_hpc.api.env import spaces
        from srl_hpc.api.policy import build_policy
        from srl_hpc.system.inference import InferenceEngine, LocalInference
        from srl_hpc.system.policy import resolve_device, subscribe_parameters

        cfg = self.exp.workers.policy
        torch.set_num_threads(cfg.torch_threads)
        model = build_policy(self.exp.policy, *spaces(self.exp.env), self.exp.seed)
        engine = InferenceEngine(model, resolve_device(cfg.device, self.local_rank), self.exp.seed + 7919 * self.index,
                                 bf16=cfg.precision == "bf16")
        return LocalInference(engine, subscribe_parameters(self.ctx, table), self.trace)

    def start(self):
        self._sent_at = [time.perf_counter()] * len(self.groups)
        self._waiting_since: float | None = None  # when the ring started waiting for the current group
        for g, group in enumerate(self.groups):
            self.inference.send(g, group.request_obs())

    def step(self):
        g = self.next_group
        if self._waiting_since is None:
            self._waiting_since = time.perf_counter()
        reply = self.inference.wait(g, POLL_MS)
        if reply is None:
            return  # the policy worker is busy or gone; the loop checks commands and heartbeats
        t0, self._waiting_since = self._waiting_since, None
        t1 = time.perf_counter()
        group = self.groups[g]
        r = reply.arrays
        request, segment = group.advance(r["actions"], r["logp"], r["values"], reply.meta["version"])
        self.inference.send(g, request)
        t2 = time.perf_counter()
        self.trace.record("env_step", group=g, envs=group.n, step_seconds=t2 - t1,
                          wait_seconds=t1 - t0, inference_latency=t1 - self._sent_at[g])
        self._sent_at[g] = t2
        for ret, length in group.finished_episodes:
            self.trace.record("episode", episode_return=ret, length=length)
        self._returns += group.finished_episodes
        self.episodes += len(group.finished_episodes)
        group.finished_episodes = []
        if segment is not None:
            self._push(segment)
        self.next_group = (g + 1) % len(self.groups)

    def _push(self, segment: dict) -> None:
        frames = segment_frames(segment, self.frames_per_step)
        msg = wire.pack("segment", {"actor": self.name, "frames": frames}, segment)
        t0 = time.perf_counter()
        while not self.stop_requested:  # back-pressure from a busy trainer: wait, but keep obeying commands
            if self.samples.poll(POLL_MS, zmq.POLLOUT):
                self.samples.send_multipart(msg, copy=False)
                self.frames_sent += frames
                self.trace.record("segment", frames=frames, send_wait=time.perf_counter() - t0)
                return
            self.poll_commands()
            self.maybe_heartbeat()
        self.frames_discarded += frames

    @property
    def env_frames(self) -> int:
        return sum(group.valid_steps for group in self.groups) * self.frames_per_step

    def stats(self) -> dict:
        returns, self._returns = self._returns, []
        return {"env_frames": self.env_frames, "frames_sent": self.frames_sent,
                "frames_discarded": self.frames_discarded, "episodes": self.episodes, "returns": returns}
