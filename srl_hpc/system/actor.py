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

from srl_hpc.api.env import make_env
from srl_hpc.streams import endpoints, wire
from srl_hpc.streams.inference import InferenceClient, ShmInferenceClient, shm_name
from srl_hpc.system.worker import POLL_MS, Worker

SEGMENT_KEYS = ("obs", "actions", "logp", "values", "next_values", "rewards", "dones", "versions")


class RingGroup:
    """Envs that share one inference request, and the segment they are filling.

    `advance(reply)` applies one reply: it completes the previous step with the values it brings (the
    bootstrap value of every step is the value of the state after it), steps every env with its action,
    and returns the observations of the next request. Truncated episodes put their final observation in
    that request too, so the trainer can bootstrap from it.
    """

    def __init__(self, envs, segment_length: int, seed: int):
        self.envs = envs
        self.T = segment_length
        self.obs = np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(envs)])
        self.segment = self._new_segment()
        self.t = 0
        self._pending = False  # the step at t-1 still waits for its next values
        self._terminated = np.zeros(len(envs), bool)
        self._truncated_envs: list[int] = []
        self.episode_return = np.zeros(len(envs))
        self.episode_length = np.zeros(len(envs), np.int64)
        self.finished_episodes: list[tuple[float, int]] = []

    def _new_segment(self) -> dict[str, np.ndarray]:
        n, T = len(self.envs), self.T
        return {"obs": np.empty((n, T, *self.obs.shape[1:]), self.obs.dtype), "actions": np.empty((n, T), np.int64),
                "logp": np.empty((n, T), np.float32), "values": np.empty((n, T), np.float32),
                "next_values": np.empty((n, T), np.float32), "rewards": np.empty((n, T), np.float32),
                "dones": np.empty((n, T), bool), "versions": np.empty((n, T), np.int64)}

    def request_obs(self) -> np.ndarray:
        return self.obs

    def advance(self, actions, logp, values, version: int) -> tuple[np.ndarray, dict | None]:
        """Apply one reply. Returns (next request's observations, a finished segment or None)."""
        n = len(self.envs)
        finished = None
        if self._pending:
            next_values = values[:n].astype(np.float32)
            next_values[self._truncated_envs] = values[n:]
            next_values[self._terminated] = 0.0
            self.segment["next_values"][:, self.t - 1] = next_values
            if self.t == self.T:
                finished, self.segment, self.t = self.segment, self._new_segment(), 0
        t, seg = self.t, self.segment
        seg["obs"][:, t] = self.obs
        seg["actions"][:, t] = actions[:n]
        seg["logp"][:, t] = logp[:n]
        seg["values"][:, t] = values[:n]
        seg["versions"][:, t] = version
        next_obs, truncated_obs = [], []
        self._truncated_envs = []
        for i, env in enumerate(self.envs):
            obs, reward, terminated, truncated, _ = env.step(int(actions[i]))
            seg["rewards"][i, t] = reward
            seg["dones"][i, t] = terminated or truncated
            self._terminated[i] = terminated
            self.episode_return[i] += reward
            self.episode_length[i] += 1
            if terminated or truncated:
                self.finished_episodes.append((float(self.episode_return[i]), int(self.episode_length[i])))
                self.episode_return[i], self.episode_length[i] = 0.0, 0
                if truncated and not terminated:
                    self._truncated_envs.append(i)
                    truncated_obs.append(obs)
                obs, _ = env.reset()
            next_obs.append(obs)
        self.obs = np.stack(next_obs)
        self.t += 1
        self._pending = True
        request = np.concatenate([self.obs, np.stack(truncated_obs)]) if truncated_obs else self.obs
        return request, finished


class ActorWorker(Worker):
    kind = "actor"

    def __init__(self, exp, index, run_dir, local_rank=0):
        super().__init__(exp, index, run_dir, local_rank)
        a = exp.workers.actor
        seed = exp.seed * 1_000_003 + index * a.ring_size
        per_group = a.ring_size // a.inference_splits
        self.groups = []
        for g in range(a.inference_splits):
            envs = [make_env(exp.env, seed + g * per_group + i) for i in range(per_group)]
            self.groups.append(RingGroup(envs, a.segment_length, seed + g * per_group))
        self.next_group = 0
        self.frames_per_step = exp.env.frames_per_step  # Atari: agent steps x frame skip
        self.env_frames = 0
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
        # a request holds each env's observation plus, at most, each env's truncated final observation
        return ShmInferenceClient(sock, len(self.groups), 2 * len(self.groups[0].envs), obs.shape[1:], obs.dtype,
                                  name=shm_name(self.run_dir, self.name))

    def close(self):
        if isinstance(getattr(self, "inference", None), ShmInferenceClient):
            self.inference.close()
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
        engine = InferenceEngine(model, resolve_device(cfg.device, self.local_rank), self.exp.seed + 7919 * self.index)
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
        self.trace.record("env_step", group=g, envs=len(group.envs), step_seconds=t2 - t1,
                          wait_seconds=t1 - t0, inference_latency=t1 - self._sent_at[g])
        self._sent_at[g] = t2
        self.env_frames += len(group.envs) * self.frames_per_step
        for ret, length in group.finished_episodes:
            self.trace.record("episode", episode_return=ret, length=length)
        self._returns += group.finished_episodes
        self.episodes += len(group.finished_episodes)
        group.finished_episodes = []
        if segment is not None:
            self._push(segment)
        self.next_group = (g + 1) % len(self.groups)

    def _push(self, segment: dict) -> None:
        frames = segment["rewards"].size * self.frames_per_step
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

    def stats(self) -> dict:
        returns, self._returns = self._returns, []
        return {"env_frames": self.env_frames, "frames_sent": self.frames_sent,
                "frames_discarded": self.frames_discarded, "episodes": self.episodes, "returns": returns}
