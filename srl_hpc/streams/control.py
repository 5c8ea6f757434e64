"""The control channel between the controller and every worker: events up, commands down.

Workers PUSH events (heartbeats with their counters, "failed", "final") to the controller's PULL; the
controller PUBlishes commands ("ping", "stop", "finish") that every worker SUBscribes to.
"""
from __future__ import annotations

import zmq

from srl_hpc.streams import endpoints, wire


EVENT_KINDS = ("heartbeat", "failed", "final")


class ControlServer:
    """The controller's side: events from the run's `workers` (names)."""

    def __init__(self, ctx: zmq.Context, workers: list[str]):
        self.workers = set(workers)
        self.malformed = 0
        self.events = ctx.socket(zmq.PULL)
        self.events.setsockopt(zmq.LINGER, 0)
        self.commands = ctx.socket(zmq.PUB)
        self.commands.setsockopt(zmq.LINGER, 1000)

    def bind(self) -> dict[str, int]:
        return {endpoints.EVENTS: endpoints.bind(self.events), endpoints.COMMANDS: endpoints.bind(self.commands)}

    def broadcast(self, command: str) -> None:
        self.commands.send_multipart(wire.pack(command))

    def next_event(self, timeout_ms: int) -> wire.Message | None:
        """The next event from a worker of this run. Anything else (a foreign client, a damaged frame) is
        dropped and counted in `malformed`."""
        if not self.events.poll(timeout_ms, zmq.POLLIN):
            return None
        while True:
            try:
                msg = wire.unpack(self.events.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                return None
            except wire.WireError:
                self.malformed += 1
                continue
            if msg.kind in EVENT_KINDS and msg.meta.get("worker") in self.workers and \
                    (msg.kind != "failed" or isinstance(msg.meta.get("error"), str)):
                return msg
            self.malformed += 1


class ControlClient:
    """A worker's side."""

    def __init__(self, ctx: zmq.Context, table: dict, controller: str):
        self.events = ctx.socket(zmq.PUSH)
        self.events.setsockopt(zmq.LINGER, 5000)  # the final report must arrive
        self.events.connect(endpoints.address(table, controller, endpoints.EVENTS))
        self.commands = ctx.socket(zmq.SUB)
        self.commands.setsockopt(zmq.SUBSCRIBE, b"")
        self.commands.connect(endpoints.address(table, controller, endpoints.COMMANDS))

    def send(self, kind: str, meta: dict) -> None:
        self.events.send_multipart(wire.pack(kind, meta))

    def pending_commands(self) -> list[str]:
        commands = []
        while True:
            try:
                commands.append(wire.unpack(self.commands.recv_multipart(zmq.NOBLOCK)).kind)
            except zmq.Again:
                return commands
