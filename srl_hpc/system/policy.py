"""Policy worker: batched inference for many actors, with the newest weights the trainer published.

Each step takes every pending request up to `max_batch` observations (dynamic batching: no timer),
runs the model once, samples actions, and answers each actor with its slice plus the policy version.
New weights are picked up between batches without waiting for them.
"""
from __future__ import annotations

import time

import numpy as np
import torch
import zmq

from srl_hpc.api.env import spaces
from srl_hpc.api.policy import build_policy, load_arrays
from srl_hpc.services.parameters import ParameterSubscriber
from srl_hpc.streams import endpoints
from srl_hpc.streams.inference import InferenceServer
from srl_hpc.system.worker import POLL_MS, Worker


def resolve_device(device: str, local_rank: int) -> torch.device:
    """'cuda' means this node's GPU for this task's node-local rank."""
    if device == "cuda":
        return torch.device("cuda", local_rank % max(1, torch.cuda.device_count()))
    return torch.device(device)


class PolicyWorker(Worker):
    kind = "policy"

    def __init__(self, exp, index, run_dir, local_rank=0):
        super().__init__(exp, index, run_dir, local_rank)
        cfg = exp.workers.policy
        torch.set_num_threads(cfg.torch_threads)
        self.device = resolve_device(cfg.device, local_rank)
        obs_space, action_space = spaces(exp.env)
        self.model = build_policy(exp.policy, obs_space, action_space, exp.seed).to(self.device).eval()
        self.max_batch = cfg.max_batch
        self.version = 0  # the seed-identical initial weights are version 0 everywhere
        self.requests = self.batches = self.rows = 0
        self.compute_seconds = 0.0
        self._generator = torch.Generator(device=self.device).manual_seed(exp.seed + 7919 * index)

    def bind(self):
        sock = self.ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        port = sock.bind_to_random_port("tcp://*")
        self.server = InferenceServer(sock)
        return {endpoints.INFERENCE: port}

    def connect(self, table):
        super().connect(table)
        sock = self.ctx.socket(zmq.SUB)
        sock.setsockopt(zmq.SUBSCRIBE, b"")
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(endpoints.address(table, "trainer/0", endpoints.PARAMETERS))
        self.parameters = ParameterSubscriber(sock)

    def step(self):
        t0 = time.perf_counter()
        newest = self.parameters.poll_newest()
        if newest is not None and newest.meta["version"] > self.version:
            load_arrays(self.model, newest.arrays)
            self.trace.record("param_pull", version=newest.meta["version"], seconds=time.perf_counter() - t0,
                              lag=newest.meta["version"] - self.version)
            self.version = newest.meta["version"]
        batch = self.server.poll_batch(self.max_batch, POLL_MS)
        if not batch:
            return
        now = time.monotonic()
        queue_wait = now - min(r.received_at for r in batch)
        t0 = time.perf_counter()
        obs = np.concatenate([r.obs for r in batch])
        with torch.no_grad():
            logits, values = self.model(torch.from_numpy(obs).to(self.device))
            dist = torch.distributions.Categorical(logits=logits)
            actions = torch.multinomial(dist.probs, 1, generator=self._generator).squeeze(-1)
            logp = dist.log_prob(actions)
        actions, logp, values = (t.cpu().numpy() for t in (actions, logp, values))
        t1 = time.perf_counter()
        start = 0
        for req in batch:
            end = start + len(req.obs)
            self.server.reply(req, {"version": self.version},
                              {"actions": actions[start:end], "logp": logp[start:end], "values": values[start:end]})
            start = end
        t2 = time.perf_counter()
        self.trace.record("inference", requests=len(batch), batch_size=len(obs), queue_wait=queue_wait,
                          compute_seconds=t1 - t0, reply_seconds=t2 - t1, version=self.version)
        self.compute_seconds += t2 - t0
        self.requests += len(batch)
        self.batches += 1
        self.rows += len(obs)

    def queue_depths(self):
        return {"held_requests": self.server.held()}

    def stats(self):
        return {"requests": self.requests, "batches": self.batches, "rows": self.rows,
                "version": self.version, "compute_seconds": round(self.compute_seconds, 3)}
