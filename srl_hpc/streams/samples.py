"""Sample stream: producers (actors) push trajectory segments, consumers (trainers) pull them.

ZMQ PUSH/PULL, many-to-many: a producer connects to every consumer of its stream and ZMQ spreads its
messages over them. High-water marks are small on both sides, so a consumer that falls behind slows its
producers down (back-pressure) instead of letting stale segments queue up. The kernel's TCP buffers are
kept small too: ZMQ's marks count messages, but Linux grows each connection's buffers to megabytes, which
held about a hundred CartPole-sized messages per actor on top of the marks (a policy lag of ~100
versions at the trainer, on Acrobot; with these buffers about 10). Toward trainers, what is in flight is
bounded in total, whatever the number of actors, by flow control (srl_hpc/streams/credits.py).
"""

from __future__ import annotations

import zmq

from srl_hpc.streams import endpoints, wire
from srl_hpc.streams.layout import Layout
from srl_hpc.streams.waiting import waiting

KERNEL_BUFFER_BYTES = 64 * 1024  # per connection and side (Linux doubles it); larger messages stream through


def sender_key(actor: str, incarnation: int) -> str:
    """One incarnation of one producer ("actor/3#1"): consumers count what arrived from each, so that what a
    producer that ended without a final report had sent is known (the controller's frame accounting)."""
    return f"{actor}#{incarnation}"


class SampleProducer:
    def __init__(self, ctx: zmq.Context, addresses: list[str]) -> None:
        self.socket = ctx.socket(zmq.PUSH)
        self.socket.setsockopt(zmq.LINGER, 5000)  # segments already sent must reach their consumer
        self.socket.setsockopt(zmq.SNDHWM, 2)
        self.socket.setsockopt(zmq.SNDBUF, KERNEL_BUFFER_BYTES)
        for address in addresses:
            self.socket.connect(address)

    def reserve(self, key, timeout_ms: int) -> bool:
        """Always: here the high-water marks alone push back (GatedProducer: the trainers' flow control)."""
        return True

    def try_send(self, frames: list, timeout_ms: int, key=None) -> bool:
        """Send one packed message if a consumer takes it within timeout_ms; False if none did (back-pressure)."""
        if not self.socket.poll(timeout_ms, zmq.POLLOUT):
            return False
        self.socket.send_multipart(frames, copy=False)
        return True


class SampleConsumer:
    """Receives the messages of one `layout`. Anything else that reaches the port (a foreign client, a
    damaged frame, a message of the right kind with the wrong shapes) is dropped and counted in `malformed`."""

    def __init__(self, ctx: zmq.Context, layout: Layout, high_water_mark: int = 4) -> None:
        self.socket = ctx.socket(zmq.PULL)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.RCVHWM, high_water_mark)  # per producer
        self.socket.setsockopt(zmq.RCVBUF, KERNEL_BUFFER_BYTES)
        self.layout = layout
        self.malformed = 0

    def bind(self, port: int | None = None) -> int:
        return endpoints.bind(self.socket, port)

    def wait(self, timeout_ms: int) -> bool:
        return bool(self.socket.poll(timeout_ms, zmq.POLLIN))

    def receive(self) -> wire.Message | None:
        """One pending message, or None; never blocks."""
        for frames in waiting(self.socket):
            try:
                msg = wire.unpack(frames)
            except wire.WireError:
                self.malformed += 1
                continue
            if self.layout.accepts(msg):
                return msg
            self.malformed += 1
        return None
