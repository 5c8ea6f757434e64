"""Inference stream over ZMQ: actors (DEALER) send observations, a policy worker (ROUTER) replies.

The server side does dynamic batching: it takes every request already waiting, up to a cap on
observations, and never waits on a timer to fill a batch. Replies go back to the client that asked,
tagged with the client's own request metadata (the actor's ring group).
"""
from __future__ import annotations

import collections
import time
from dataclasses import dataclass

import numpy as np
import zmq

from srl_hpc.streams import wire


@dataclass
class Request:
    client: bytes
    meta: dict
    obs: np.ndarray
    received_at: float


class InferenceServer:
    def __init__(self, socket: zmq.Socket):
        self.socket = socket
        self._held: collections.deque[Request] = collections.deque()  # taken off the socket, not yet batched

    def poll_batch(self, max_rows: int, timeout_ms: int) -> list[Request]:
        """Every pending request up to `max_rows` observations (at least one request if any is pending).

        Waits up to `timeout_ms` only when nothing at all is pending.
        """
        if not self._held and not self.socket.poll(timeout_ms, zmq.POLLIN):
            return []
        batch, rows = [], 0
        while True:
            req = self._held.popleft() if self._held else self._recv_nowait()
            if req is None:
                break
            if batch and rows + len(req.obs) > max_rows:
                self._held.appendleft(req)  # first in the next batch
                break
            batch.append(req)
            rows += len(req.obs)
            if rows >= max_rows:
                break
        return batch

    def held(self) -> int:
        return len(self._held)

    def reply(self, request: Request, meta: dict, arrays: dict[str, np.ndarray]) -> None:
        self.socket.send_multipart([request.client, *wire.pack("reply", {**request.meta, **meta}, arrays)], copy=False)

    def _recv_nowait(self) -> Request | None:
        try:
            frames = self.socket.recv_multipart(zmq.NOBLOCK, copy=False)
        except zmq.Again:
            return None
        msg = wire.unpack(frames[1:])
        return Request(frames[0].bytes, msg.meta, msg.arrays["obs"], time.monotonic())


class InferenceClient:
    """One actor's side. Requests are keyed by `group`; a reply for another group waits in a buffer."""

    def __init__(self, socket: zmq.Socket):
        self.socket = socket
        self._replies: dict[int, wire.Message] = {}

    def send(self, group: int, obs: np.ndarray, meta: dict | None = None) -> None:
        self.socket.send_multipart(wire.pack("infer", {"group": group, **(meta or {})}, {"obs": obs}), copy=False)

    def wait(self, group: int, timeout_ms: int) -> wire.Message | None:
        deadline = time.monotonic() + timeout_ms / 1000
        while group not in self._replies:
            left = int((deadline - time.monotonic()) * 1000)
            if left <= 0 or not self.socket.poll(left, zmq.POLLIN):
                return None
            msg = wire.unpack(self.socket.recv_multipart(copy=False))
            self._replies[msg.meta["group"]] = msg
        return self._replies.pop(group)
