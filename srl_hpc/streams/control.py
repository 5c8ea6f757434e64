"""The control channel between the controller and every worker: events up, commands down.

Workers PUSH events (heartbeats with their counters, "failed", "final") to the controller's PULL; the
controller PUBlishes commands ("ping", "stop", "finish") that every worker SUBscribes to.
"""
from __future__ import annotations

import zmq

from srl_hpc.streams import endpoints, wire


class ControlServer:
    """The controller's side."""

    def __init__(self, ctx: zmq.Context):
        self.events = ctx.socket(zmq.PULL)
        self.events.setsockopt(zmq.LINGER, 0)
        self.commands = ctx.socket(zmq.PUB)
        self.commands.setsockopt(zmq.LINGER, 1000)

    def bind(self) -> dict[str, int]:
        return {endpoints.EVENTS: self.events.bind_to_random_port("tcp://*"),
                endpoints.COMMANDS: self.commands.bind_to_random_port("tcp://*")}

    def broadcast(self, command: str) -> None:
        self.commands.send_multipart(wire.pack(command))

    def next_event(self, timeout_ms: int) -> wire.Message | None:
        if not self.events.poll(timeout_ms, zmq.POLLIN):
            return None
        try:
            return wire.unpack(self.events.recv_multipart(zmq.NOBLOCK))
        except zmq.Again:
            return None


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
