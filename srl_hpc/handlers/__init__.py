"""Task handlers: the roles a worker hosts (actor, policy, trainer, buffer, eval, relay, controller).

A handler is built by the generic worker (srl_hpc.worker) from the graph, and uses the worker's
plumbing: its ZMQ context, its trace, its rendezvous table, the handlers hosted beside it. The worker
calls, in order: bind() (ports of the streams this handler serves), connect(table), start(), then
poll() until the run stops, finish(), close(). The first handler a worker hosts runs on the worker's
main loop; other active ones get a thread each; passive ones (active = False) are only called by the
handlers beside them (a policy handler inside an actor answers its inference requests inline).
"""

from __future__ import annotations

import importlib

POLL_MS = 100  # longest a handler's poll blocks, so commands and heartbeats are never late by more

HANDLERS = {  # kind -> module:class, imported on demand (actors never import torch)
    "controller": "srl_hpc.handlers.controller:ControllerHandler",
    "actor": "srl_hpc.handlers.actor:ActorHandler",
    "policy": "srl_hpc.handlers.policy:PolicyHandler",
    "trainer": "srl_hpc.handlers.trainer:TrainerHandler",
    "buffer": "srl_hpc.handlers.buffer:BufferHandler",
    "eval": "srl_hpc.handlers.evaluation:EvalHandler",
    "rating": "srl_hpc.handlers.rating:RatingHandler",
    "population": "srl_hpc.handlers.population:PopulationHandler",
    "relay": "srl_hpc.handlers.relay:RelayHandler",
}


def handler_class(kind: str) -> type[Handler]:
    module, _, name = HANDLERS[kind].partition(":")
    return getattr(importlib.import_module(module), name)


class Handler:
    kind = ""
    active = True  # polled by a loop of its own worker

    def __init__(self, worker) -> None:
        self.worker = worker
        self.exp = worker.exp
        self.graph = worker.graph
        self.name = worker.name
        self.trace = worker.trace

    def bind(self) -> dict[str, int]:
        return {}

    def connect(self, table: dict) -> None:
        pass

    def start(self) -> None:
        pass

    def poll(self, timeout_ms: int) -> None:
        """One unit of work, blocking at most timeout_ms when there is nothing to do."""

    def keep_running(self, stop_requested: bool) -> bool:
        return not stop_requested

    def finish(self) -> None:
        """The wind-down after a stop (a trainer checkpoints; a sample consumer drains until told to finish)."""

    def peers_lost(self, workers: frozenset[str]) -> None:
        """The run goes on without `workers` (lost for good, as the controller's pings say; empty again if they
        came back): stop waiting for them."""

    def stats(self) -> dict:
        """Cumulative counters for the controller (summed across workers by name)."""
        return {}

    def queue_depths(self) -> dict[str, int]:
        """Items waiting inside this handler, recorded with every heartbeat."""
        return {}

    def close(self) -> None:
        pass
