"""Parameter service: a trainer publishes versioned weights under tags; subscribers take the newest.

Every publish carries the tag "latest"; a trainer may also publish under other names (e.g. "best"), and a
subscriber follows one tag, so an evaluation or opponent handler can ask for a version other than the
newest. Over ZMQ it is PUB/SUB with the tag as the first frame (SUB filters on it); the subscriber drains
everything pending without blocking and keeps only the newest version, so inference never waits for
weights. The publisher repeats each tag's current version now and then, for subscribers that connected
late. A subscriber in the publisher's own worker reads the publisher's last message in-process (inline).
The publisher counts the bytes it sends: it sends each message once per subscriber of its tag, so the
cost of a version grows with the number of subscribers (what benchmarks/scale.py measures). Its socket is an
XPUB that passes every subscribe and unsubscribe up (XPUB_VERBOSER), which is how it knows how many there are.
"""

from __future__ import annotations

import hashlib
import time

import numpy as np
import zmq

from srl_hpc.streams import endpoints, wire
from srl_hpc.streams.waiting import waiting

LATEST = "latest"
REPUBLISH_INTERVAL = 2.0


def arrays_checksum(arrays: dict[str, np.ndarray]) -> int:
    """A 63-bit digest of published weights (every array's name and bytes): equal for two models only if they
    hold bit-identical parameters (srl_hpc.models.weights.parameter_checksum)."""
    digest = hashlib.blake2b(digest_size=8)
    for name, value in sorted(arrays.items()):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(value).tobytes())
    return int.from_bytes(digest.digest(), "little") >> 1


class ParameterPublisher:
    def __init__(self, socket: zmq.Socket) -> None:
        self.socket = socket
        self._last: dict[str, wire.Message] = {}
        self._frames: dict[str, list] = {}
        self._last_sent = 0.0
        self.subscribers: dict[bytes, int] = {}  # tag -> subscribers now
        self.bytes_sent = 0  # by publish(): versions x their size x subscribers connected then
        self.versions_sent = 0

    @classmethod
    def bind(cls, ctx: zmq.Context, port: int | None = None) -> tuple[ParameterPublisher, int]:
        """An XPUB on `port` (a replaced relay's) or a free port of every interface; returns (publisher, port)."""
        sock = ctx.socket(zmq.XPUB)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.XPUB_VERBOSER, 1)  # every subscribe and unsubscribe, so each subscriber counts
        return cls(sock), endpoints.bind(sock, port)

    def publish(self, version: int, arrays: dict[str, np.ndarray], tags: tuple[str, ...] = (LATEST,)) -> None:
        for tag in tags:
            self._last[tag] = wire.Message("params", {"version": version, "tag": tag}, arrays)
            self._frames[tag] = [tag.encode(), *wire.pack("params", {"version": version, "tag": tag}, arrays)]
            self.socket.send_multipart(self._frames[tag], copy=False)
            self.bytes_sent += self.subscribers_of(tag) * sum(len(f) for f in self._frames[tag])
        self.versions_sent += 1
        self._last_sent = time.monotonic()

    def subscribers_of(self, tag: str) -> int:
        """Subscribers of `tag`, after taking in the (un)subscriptions that came since the last call."""
        while True:
            try:
                change = self.socket.recv(zmq.NOBLOCK)
            except zmq.Again:  # a subscription is a prefix: b"" (a relay's) takes every tag
                return sum(n for topic, n in self.subscribers.items() if tag.encode().startswith(topic))
            if change[:1] in (b"\x00", b"\x01"):  # anything else is not a subscription: ignored
                topic = change[1:]
                self.subscribers[topic] = self.subscribers.get(topic, 0) + (1 if change[:1] == b"\x01" else -1)

    def maybe_republish(self) -> None:
        if self._frames and time.monotonic() - self._last_sent > REPUBLISH_INTERVAL:
            for frames in self._frames.values():
                self.socket.send_multipart(frames, copy=False)
            self._last_sent = time.monotonic()

    def last(self, tag: str) -> wire.Message | None:
        return self._last.get(tag)


class ParameterSubscriber:
    """Over ZMQ: a SUB socket subscribed to one tag."""

    def __init__(self, socket: zmq.Socket, tag: str = LATEST) -> None:
        self.socket = socket
        self.socket.setsockopt(zmq.SUBSCRIBE, tag.encode())
        self.version = -1

    @classmethod
    def connect(cls, ctx: zmq.Context, address: str, tag: str = LATEST) -> ParameterSubscriber:
        sock = ctx.socket(zmq.SUB)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(address)
        return cls(sock, tag)

    def poll_newest(self) -> wire.Message | None:
        """The newest weights newer than what we hold, or None; never blocks."""
        newest = None
        for frames in waiting(self.socket):
            msg = wire.unpack(frames[1:])
            if msg.meta["version"] > self.version and (newest is None or msg.meta["version"] > newest.meta["version"]):
                newest = msg
        if newest is not None:
            self.version = newest.meta["version"]
        return newest

    def wait_newest(self, timeout_ms: int) -> wire.Message | None:
        """The newest weights newer than what we hold, waiting up to `timeout_ms` for some."""
        return self.poll_newest() if self.socket.poll(timeout_ms, zmq.POLLIN) else None


class InlineSubscriber:
    """In the publisher's own worker: its last message for the tag, without a socket."""

    def __init__(self, publisher: ParameterPublisher, tag: str = LATEST) -> None:
        self.publisher = publisher
        self.tag = tag
        self.version = -1

    def poll_newest(self) -> wire.Message | None:
        msg = self.publisher.last(self.tag)
        if msg is None or msg.meta["version"] <= self.version:
            return None
        self.version = msg.meta["version"]
        return msg

    def wait_newest(self, timeout_ms: int) -> wire.Message | None:
        """The newest weights newer than what we hold, waiting up to `timeout_ms` for the publisher beside us
        (a relay's thread, or the trainer's) to have some."""
        deadline = time.monotonic() + timeout_ms / 1000
        while (msg := self.poll_newest()) is None and time.monotonic() < deadline:
            time.sleep(0.005)
        return msg
