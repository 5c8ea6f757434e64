"""Parameter service: the trainer publishes versioned weights, policy workers take the newest.

PUB/SUB: the subscriber drains everything pending without blocking and keeps only the newest version,
so inference never waits for weights. The publisher repeats the current version now and then so that a
policy worker that connected late still gets it.
"""
from __future__ import annotations

import time

import numpy as np
import zmq

from srl_hpc.streams import wire

REPUBLISH_INTERVAL = 2.0


class ParameterPublisher:
    def __init__(self, socket: zmq.Socket):
        self.socket = socket
        self.version = -1
        self._last = None
        self._last_sent = 0.0

    def publish(self, version: int, arrays: dict[str, np.ndarray]) -> None:
        self.version = version
        self._last = wire.pack("params", {"version": version}, arrays)
        self._send()

    def maybe_republish(self) -> None:
        if self._last is not None and time.monotonic() - self._last_sent > REPUBLISH_INTERVAL:
            self._send()

    def _send(self):
        self.socket.send_multipart(self._last, copy=False)
        self._last_sent = time.monotonic()


class ParameterSubscriber:
    def __init__(self, socket: zmq.Socket):
        self.socket = socket
        self.version = -1

    def poll_newest(self) -> wire.Message | None:
        """The newest weights newer than what we hold, or None; never blocks."""
        newest = None
        while True:
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            msg = wire.unpack(frames)
            if msg.meta["version"] > self.version and (newest is None or msg.meta["version"] > newest.meta["version"]):
                newest = msg
        if newest is not None:
            self.version = newest.meta["version"]
        return newest
