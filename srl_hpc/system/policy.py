"""Policy worker (SRL placement): batched inference for many actors, with the newest published weights.

Each step takes every pending request up to `max_batch` observations (dynamic batching: no timer),
runs the model once, samples actions, and answers each actor with its slice plus the policy version.
New weights are picked up between batches without waiting for them.
"""
from __future__ import annotations

import torch
import zmq

from srl_hpc.api.env import spaces
from srl_hpc.api.policy import build_policy
from srl_hpc.services.parameters import ParameterSubscriber
from srl_hpc.streams import endpoints
from srl_hpc.streams.inference import InferenceServer
from srl_hpc.system.inference import InferenceEngine, serve_batch
from srl_hpc.system.worker import POLL_MS, Worker


def resolve_device(device: str, local_rank: int) -> torch.device:
    """'cuda' means this node's GPU for this task's node-local rank."""
    if device == "cuda":
        return torch.device("cuda", local_rank % max(1, torch.cuda.device_count()))
    return torch.device(device)


def subscribe_parameters(ctx: zmq.Context, table: dict) -> ParameterSubscriber:
    sock = ctx.socket(zmq.SUB)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoints.address(table, "trainer/0", endpoints.PARAMETERS))
    return ParameterSubscriber(sock)


class PolicyWorker(Worker):
    kind = "policy"

    def __init__(self, exp, index, run_dir, local_rank=0):
        super().__init__(exp, index, run_dir, local_rank)
        cfg = exp.workers.policy
        torch.set_num_threads(cfg.torch_threads)
        obs_space, action_space = spaces(exp.env)
        model = build_policy(exp.policy, obs_space, action_space, exp.seed)
        self.engine = InferenceEngine(model, resolve_device(cfg.device, local_rank), exp.seed + 7919 * index,
                                      bf16=cfg.precision == "bf16")
        self.max_batch = cfg.max_batch
        self.rows = 0

    def bind(self):
        sock = self.ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        port = sock.bind_to_random_port("tcp://*")
        self.server = InferenceServer(sock)
        return {endpoints.INFERENCE: port}

    def connect(self, table):
        super().connect(table)
        self.parameters = subscribe_parameters(self.ctx, table)

    def step(self):
        self.engine.pull(self.parameters, self.trace)
        self.rows += serve_batch(self.server, self.engine, self.max_batch, POLL_MS, self.trace)

    def close(self):
        self.server.close()
        super().close()

    def queue_depths(self):
        return {"held_requests": self.server.held()}

    def stats(self):
        return {"rows": self.rows, "version": self.engine.version}
