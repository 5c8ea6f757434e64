"""Flow control on the sample stream: a trainer lets at most `window` segments be filled for it or be on
their way to it, from all its actors together, whatever their number.

Without it, every actor's connection queues a few segments (ZMQ's high-water marks, the kernel's
buffers), so the stale data waiting at a trainer grows with the number of actors: 32 CartPole actors
gave a policy lag of ~45 versions and a third of the frames dropped unconsumed at the stop. With it, an
actor about to fill a segment asks every trainer of its stream for leave ("want"); a trainer grants
("credit") to the askers in turn while fewer than `window` of its grants are unused, and each segment
it receives uses up its sender's oldest grant. The actor's envs wait until leave comes (its trace shows
the time as waiting for leave), so with too many actors they slow down instead of queueing stale data.

The window starts at a queue's worth (`base`: the trainer's queue_batches) and follows the trainer:
after an update it waited for, the window grows by half a queue's worth; after one it did not wait for,
it shrinks as much, never below `base`. So it settles where the trainer waits for every other update. Where
envs are slow and a segment takes seconds to fill, a fixed window idled every actor beyond it (64 actors of
100 ms steps sent what 16 did); where the trainer is the bound, the window stays a queue's worth and the data
stays fresh.

The grants of an actor that was replaced are taken back when its replacement first asks (a new connection under
the same name). An actor whose trainer was replaced (its connection to the credits port dropped) forgets that
trainer's grants and asks its replacement again. Any other grant not used within GRANT_TIMEOUT seconds (an actor
that died and is not replaced, a grant lost with a dead connection, a segment that took that long to fill) is
taken back too, so a lost actor cannot shrink the window for good; at worst one more segment is then in flight.
The grants of an actor the controller declares lost (`lost`, from its pings) are taken back at once.
"""

from __future__ import annotations

import collections
import time

import zmq

from srl_hpc.streams import endpoints, wire
from srl_hpc.streams.samples import SampleProducer
from srl_hpc.streams.waiting import waiting

GRANT_TIMEOUT = 30.0  # at least; and at least 4 times a segment's fill time
STARVED = 0.25  # a trainer that waited for a batch more than this share of the update's time wants more


class GatedProducer:
    """An actor's side: segments to trainers, each with the leave of the trainer it goes to. One PUSH to each
    trainer's samples port (so that a segment reaches the trainer that gave leave) and one DEALER to its
    credits port. The same interface as SampleProducer (reserve, try_send), which always has leave."""

    def __init__(self, ctx: zmq.Context, name: str, trainers: list[tuple[str, str]]) -> None:
        """trainers: (samples address, credits address) of each trainer."""
        self.want = wire.pack("want", {"actor": name}, {})
        self.producers = [SampleProducer(ctx, [samples]) for samples, _ in trainers]
        self.sockets = []
        self.monitors = []  # each trainer's connection dropping: it was replaced, with the grants it knew of
        self.poller = zmq.Poller()
        for _, credits in trainers:
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(credits)
            self.sockets.append(sock)
            self.monitors.append(sock.get_monitor_socket(zmq.EVENT_DISCONNECTED))
            self.poller.register(sock, zmq.POLLIN)
        self.credits = [0] * len(trainers)  # leaves received, not yet reserved
        self.asked = [False] * len(trainers)
        self.reserved: dict = {}  # key -> the trainer whose leave it holds

    def reserve(self, key, timeout_ms: int) -> bool:
        """Whether `key` (an actor's ring group) holds leave for its next segment, asking the trainers and waiting
        at most timeout_ms if not. The actor fills a segment only once it holds leave to send it: a segment
        waits before it is filled, not after, so that its data is fresh when it arrives."""
        if key in self.reserved:
            return True
        self._receive()
        if not any(self.credits):
            self._ask()
            if timeout_ms and self.poller.poll(timeout_ms):
                self._receive()
        for i, n in enumerate(self.credits):
            if n:
                self.credits[i] -= 1
                self.reserved[key] = i
                return True
        return False

    def try_send(self, frames: list, timeout_ms: int, key=None) -> bool:
        """Send the segment of `key` to the trainer that gave it leave, if that trainer takes it within
        timeout_ms; the leave is then used up."""
        if not self.reserve(key, timeout_ms):
            return False
        if not self.producers[self.reserved[key]].try_send(frames, timeout_ms):
            return False
        del self.reserved[key]
        return True

    def _ask(self) -> None:
        for i, sock in enumerate(self.sockets):
            if not self.asked[i]:
                sock.send_multipart(self.want, copy=False)
                self.asked[i] = True

    def _receive(self) -> None:
        for i, sock in enumerate(self.sockets):
            if list(waiting(self.monitors[i])):  # a new trainer: ask it (ZMQ holds the ask until it is there)
                self.credits[i], self.asked[i] = 0, False
            for frames in waiting(sock):
                try:
                    kind = wire.unpack(frames).kind
                except wire.WireError:
                    continue  # only the trainer reaches this socket (it connects out); nothing else is expected
                if kind == "credit":
                    self.credits[i] += 1
                    self.asked[i] = False


class CreditLedger:
    """A trainer's side: a ROUTER where actors ask for leave; at most `window` grants outstanding, at least
    `base` (a queue's worth), more while the trainer waits for data."""

    def __init__(self, ctx: zmq.Context, base: int, actors: list[str]) -> None:
        if base < 1:
            raise ValueError(f"a credit window must be at least 1, got {base}")
        self.socket = ctx.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.base = self.window = base
        self.fill_seconds: float | None = None  # a segment's fill time, a moving average over those received
        self.actors = set(actors)
        self.waiting: collections.deque[tuple[bytes, str]] = collections.deque()  # (routing id, actor) in order
        self.granted: dict[str, collections.deque[float]] = collections.defaultdict(collections.deque)
        self.identity: dict[str, bytes] = {}  # actor -> the routing id of its live incarnation
        self.lost: frozenset[str] = frozenset()  # actors the run goes on without: their grants are taken back
        self.malformed = 0

    def bind(self, port: int | None = None) -> int:
        return endpoints.bind(self.socket, port)

    @property
    def outstanding(self) -> int:
        return sum(len(q) for q in self.granted.values())

    def used(self, actor: str, fill_seconds: float = 0.0) -> None:
        """A segment from `actor` arrived, `fill_seconds` after it began: its oldest grant is used up."""
        grants = self.granted.get(actor)
        if grants:
            grants.popleft()
        previous = fill_seconds if self.fill_seconds is None else self.fill_seconds
        self.fill_seconds = previous + 0.05 * (fill_seconds - previous)

    def trained(self, waited: float, computed: float) -> None:
        """After each update: the trainer waited `waited` seconds for its batch and computed for `computed`."""
        step = max(1, self.base // 2)
        self.window = self.window + step if waited > STARVED * computed else max(self.base, self.window - step)

    def serve(self) -> None:
        """Read the asks that came in, take back grants unused for too long, grant in turn while the window allows."""
        for frames in waiting(self.socket):
            try:
                msg = wire.unpack(frames[1:])
                actor = msg.meta.get("actor")
            except (wire.WireError, AttributeError):
                self.malformed += 1
                continue
            if msg.kind != "want" or not isinstance(actor, str) or actor not in self.actors or msg.arrays:
                self.malformed += 1
                continue
            ident = frames[0].bytes
            if self.identity.get(actor, ident) != ident:  # a new incarnation of the actor: the old one is gone,
                self.granted.pop(actor, None)  # and so are the grants it held
                self.waiting = collections.deque(w for w in self.waiting if w[1] != actor)
            self.identity[actor] = ident
            if all(ident != w for w, _ in self.waiting):
                self.waiting.append((ident, actor))
        for actor in self.lost & self.granted.keys():
            del self.granted[actor]
        if self.lost:
            self.waiting = collections.deque(w for w in self.waiting if w[1] not in self.lost)
        now = time.monotonic()
        expiry = max(GRANT_TIMEOUT, 4 * (self.fill_seconds or 0.0))
        for grants in self.granted.values():
            while grants and now - grants[0] > expiry:
                grants.popleft()
        while self.waiting and self.outstanding < self.window:
            ident, actor = self.waiting.popleft()
            self.socket.send_multipart([ident, *wire.pack("credit", {}, {})], copy=False)
            self.granted[actor].append(now)
