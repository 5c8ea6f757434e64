"""Inference stream: actors (clients) send observations, a policy handler (the server) replies.

The server side does dynamic batching: it takes every request already waiting, up to a cap on
observations, and never waits on a timer to fill a batch. Replies go back to the client that asked,
tagged with the client's own request metadata (the actor's ring group).

Three transports behind one client interface (`send(group, obs, meta)`, `wait(group, timeout_ms)`):
  zmq     DEALER -> ROUTER, arrays inside the messages (any two hosts);
  shm     arrays in the actor's shared memory, a small header each way over a Unix socket
          (actor and server on one node: srl_hpc.streams.unix says why not ZMQ);
  inline  the policy handler hosted in the actor's own worker answers at once (no socket).
What a reply holds is the algorithm's spec's `reply` (srl_hpc/algorithm_spec.py). With a recurrent model a
request also carries each observation's recurrent state ("hidden") and the reply the next one: the policy side
keeps no state, so any policy worker can answer any request.
"""

from __future__ import annotations

import collections
import contextlib
import secrets
import socket
import time
from dataclasses import dataclass
from multiprocessing import resource_tracker, shared_memory
from typing import Any, cast

import numpy as np
import zmq
from zmq.utils.monitor import parse_monitor_message

from srl_hpc.algorithm_spec import HIDDEN
from srl_hpc.streams import endpoints, unix, wire
from srl_hpc.streams.layout import integer, number
from srl_hpc.streams.shm import SHM_PREFIX
from srl_hpc.streams.waiting import waiting

RECONNECT_INTERVAL = 0.05  # seconds between a same-node client's tries to reach its server's replacement


@dataclass
class Request:
    client: bytes | socket.socket  # a ZMQ identity, or the same-node connection it came on
    meta: dict
    obs: np.ndarray
    received_at: float
    shm: shared_memory.SharedMemory | None = None  # set when the arrays live in the client's shared memory
    slots: dict[str, np.ndarray] | None = None  # then: where each reply field goes in it
    hidden: np.ndarray | None = None  # the recurrent state per observation, with a recurrent model


class InferenceServer:
    """Requests carry observations of `obs_shape`, a number for each `meta` key the policy reads and, through
    shared memory, reply slots for the `reply` fields ((name, dtype, shape per observation), as
    Contract.reply_fields gives them); with a "hidden" reply field, each request carries the
    recurrent state of that shape too. Anything else that reaches the port (a foreign client, a damaged
    frame) is dropped and counted in `malformed`. Requests come over the ZMQ socket (arrays inside) and,
    with a `local` listener, over same-node connections (arrays in shared memory)."""

    def __init__(
        self,
        sock: zmq.Socket,
        obs_shape: tuple[int, ...] | None = None,
        meta: tuple[str, ...] = (),
        reply: tuple[tuple[str, str, tuple], ...] | None = None,
        local: unix.Listener | None = None,
    ) -> None:
        self.socket, self.local = sock, local
        self.obs_shape, self.meta = obs_shape, meta
        self.reply_fields = None if reply is None else {name: (dtype, tuple(shape)) for name, dtype, shape in reply}
        self.state_shape = self.reply_fields[HIDDEN][1] if self.reply_fields and HIDDEN in self.reply_fields else None
        self.malformed = 0
        self._held: collections.deque[Request] = collections.deque()  # taken off the socket, not yet batched
        self._attached: dict[str, shared_memory.SharedMemory] = {}
        # An actor's header for a ring group is the same bytes every time: parsed and checked once
        self._parsed: dict[
            bytes, tuple[dict, np.ndarray, np.ndarray | None, shared_memory.SharedMemory, dict[str, np.ndarray]]
        ] = {}
        self._reply_headers: dict[tuple, bytes] = {}
        self._poller = zmq.Poller()
        self._poller.register(sock, zmq.POLLIN)
        if local is not None:
            self._poller.register(local.fileno(), zmq.POLLIN)

    @classmethod
    def bind(
        cls,
        ctx: zmq.Context,
        obs_shape: tuple[int, ...] | None = None,
        meta: tuple[str, ...] = (),
        reply: tuple[tuple[str, str, tuple], ...] | None = None,
        local_path: str | None = None,
        port: int | None = None,
    ) -> tuple[InferenceServer, int]:
        """A ROUTER on `port` (a replaced server's) or a free port of every interface (and a listener at
        `local_path` for same-node actors); returns (server, port)."""
        sock = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        local = unix.Listener(local_path) if local_path else None
        return cls(sock, obs_shape, meta, reply, local), endpoints.bind(sock, port)

    def poll_batch(self, max_rows: int, timeout_ms: int) -> list[Request]:
        """Every pending request up to `max_rows` observations (at least one request if any is pending).

        Waits up to `timeout_ms` only when nothing at all is pending.
        """
        if not self._held and not self._poller.poll(timeout_ms):
            return []
        batch: list[Request] = []
        rows = 0
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
        if request.shm is None:
            self.socket.send_multipart(
                [cast(bytes, request.client), *wire.pack("reply", {**request.meta, **meta}, arrays)], copy=False
            )
            return
        assert request.slots is not None and self.local is not None  # (a request through shared memory)
        for name, slot in request.slots.items():
            slot[:] = arrays[name]
        key = (request.meta["group"], *meta.items())
        header = self._reply_headers.get(key)
        if header is None:
            if len(self._reply_headers) > 4096:  # (a new version makes new keys)
                self._reply_headers.clear()
            header = self._reply_headers[key] = wire.pack("reply", {"group": request.meta["group"], **meta})[0]
        self.local.reply(cast(socket.socket, request.client), header)

    def close(self) -> None:
        self._held.clear()  # their observation views point into the segments
        self._parsed.clear()
        for shm in self._attached.values():
            shm.close()
        self._attached.clear()
        if self.local is not None:
            self.local.close()

    def _recv_nowait(self) -> Request | None:
        while True:
            if self.local is not None and (got := self.local.recv_nowait()) is not None:
                try:
                    return self._local_request(*got)
                except (wire.WireError, KeyError, TypeError, ValueError, OSError):
                    self.malformed += 1
                    continue
            frames = next(waiting(self.socket), None)
            if frames is None:
                return None
            try:
                return self._request(frames)
            except (wire.WireError, KeyError, TypeError, ValueError, OSError):
                self.malformed += 1

    def _request(self, frames) -> Request:
        msg = wire.unpack(frames[1:])
        self._check_meta(msg)
        if msg.arrays.keys() != ({"obs", HIDDEN} if self.state_shape else {"obs"}):
            raise wire.WireError(
                f"an inference request carries obs{' and hidden' if self.state_shape else ''}, not {sorted(msg.arrays)}"
            )
        obs = self._checked(msg.arrays["obs"])
        _check_opponents(msg.meta, len(obs))
        hidden = self._checked_state(msg.arrays[HIDDEN], len(obs)) if self.state_shape else None
        return Request(frames[0].bytes, msg.meta, obs, time.monotonic(), hidden=hidden)

    def _local_request(self, conn: socket.socket, data: bytes) -> Request:
        parsed = self._parsed.get(data)
        if parsed is None:
            msg = wire.unpack([data])
            self._check_meta(msg)
            meta = msg.meta
            if msg.arrays or not str(meta.get("shm")).startswith(SHM_PREFIX) or not integer(1)(meta.get("rows")):
                raise wire.WireError("not a request through one of srl-hpc's shared-memory segments")
            _check_opponents(meta, meta["rows"])
            shm = self._attach(meta["shm"])
            offset, dtype, shape = meta["obs"]
            obs = np.ndarray((meta["rows"], *shape), dtype, buffer=shm.buf, offset=offset)
            hidden = None
            if self.state_shape:
                offset, dtype, shape = meta[HIDDEN]
                hidden = np.ndarray((meta["rows"], *shape), dtype, buffer=shm.buf, offset=offset)
            parsed = meta, obs, hidden, shm, self._reply_slots(meta["reply"], meta["rows"], shm)
            if len(self._parsed) > 4096:  # (actors replaced many times over)
                self._parsed.clear()
            self._parsed[data] = parsed
        meta, obs, hidden, shm, slots = parsed
        obs = self._checked(obs)
        hidden = None if hidden is None else self._checked_state(hidden, len(obs))
        return Request(conn, meta, obs, time.monotonic(), shm, slots, hidden)

    def _check_meta(self, msg: wire.Message) -> None:
        meta = msg.meta
        if msg.kind != "infer" or not integer()(meta.get("group")) or not all(number(meta.get(k)) for k in self.meta):
            raise wire.WireError(f"not an inference request: {msg.kind!r}")

    def _checked(self, obs: np.ndarray) -> np.ndarray:
        if (
            obs.ndim < 1
            or obs.dtype.kind not in "biuf"
            or (self.obs_shape is not None and obs.shape[1:] != self.obs_shape)
        ):
            raise wire.WireError(
                f"observations of shape {obs.shape[1:]} and dtype {obs.dtype}, expected {self.obs_shape}"
            )
        if obs.dtype.kind == "f" and not np.isfinite(obs).all():
            raise wire.WireError("observations that are not finite")
        return obs

    def _checked_state(self, hidden: np.ndarray, rows: int) -> np.ndarray:
        assert self.state_shape is not None  # (called with a recurrent model only)
        if hidden.dtype != np.float32 or hidden.shape != (rows, *self.state_shape) or not np.isfinite(hidden).all():
            raise wire.WireError(
                f"recurrent state of shape {hidden.shape} and dtype {hidden.dtype}, expected "
                f"finite float32 of {(rows, *self.state_shape)}"
            )
        return hidden

    def _reply_slots(self, reply, rows: int, shm) -> dict[str, np.ndarray]:
        """Where each reply field goes in the client's segment: the fields this policy answers, at offsets inside it."""
        if not isinstance(reply, dict):
            raise wire.WireError("no reply slots")
        fields = self.reply_fields
        if fields is None:
            fields = {k: (v[1], tuple(v[2])) for k, v in reply.items()}
        if reply.keys() != fields.keys() or any(
            [reply[k][1], tuple(reply[k][2])] != [dt, shape] for k, (dt, shape) in fields.items()
        ):
            raise wire.WireError("reply slots for other fields than this policy answers")
        return {
            k: np.ndarray((rows, *shape), dt, buffer=shm.buf, offset=reply[k][0]) for k, (dt, shape) in fields.items()
        }

    def _attach(self, name: str) -> shared_memory.SharedMemory:
        if name not in self._attached:
            shm = shared_memory.SharedMemory(name=name)
            # The actor owns the segment; without this, Python's resource tracker would unlink it when
            # this process exits (and warn about a "leak").
            resource_tracker.unregister(shm._name, "shared_memory")  # type: ignore[attr-defined]  # noqa: SLF001
            self._attached[name] = shm
        return self._attached[name]


class ReplyBuffer:
    """An actor's waiting for replies: they are keyed by `group`; a reply for another group waits here."""

    def __init__(self) -> None:
        self._replies: dict[int, wire.Message] = {}

    def wait(self, group: int, timeout_ms: int) -> wire.Message | None:
        deadline = time.monotonic() + timeout_ms / 1000
        while group not in self._replies:
            msg = self._receive(max(0, int((deadline - time.monotonic()) * 1000)))
            if msg is None:
                return None
            self._replies[msg.meta["group"]] = msg
        return self._replies.pop(group)

    def _receive(self, timeout_ms: int) -> wire.Message | None:
        """The next reply, or None after `timeout_ms` without one."""
        raise NotImplementedError


class InferenceClient(ReplyBuffer):
    """One actor's side over ZMQ, the arrays inside the messages.

    A server that goes away (killed, or hung and then killed by its supervisor) takes the requests it held
    with it; its replacement binds the same port and the DEALER connects again by itself. The client follows
    its connection through the socket's monitor (`lost` while it is down) and, once connected again, sends
    every unanswered request again, numbered (`seq`), so that a late reply to a first copy is dropped."""

    def __init__(self, socket: zmq.Socket) -> None:
        super().__init__()
        self.socket = socket
        self.monitor = socket.get_monitor_socket(zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECTED)
        self.resent = 0  # requests sent again after their server went away
        self._lost = False
        self._seq = 0
        self._unanswered: dict[int, tuple[int, np.ndarray, dict, np.ndarray | None]] = {}  # group -> its request

    def is_lost(self) -> bool:
        """Whether the connection to the server is down now (it went away, and no replacement is there yet).
        Follows the connection: once connected to a replacement, sends it again what the lost server held."""
        for frames in waiting(self.monitor, copy=True):
            if parse_monitor_message(frames)["event"] == zmq.EVENT_DISCONNECTED:
                self._lost = True
            elif self._lost:  # connected to the replacement: what the lost one held goes again
                self._lost = False
                for group in self._unanswered:
                    self._send(group)
                    self.resent += 1
        return self._lost

    def take_unanswered(self) -> dict[int, tuple[np.ndarray, dict, np.ndarray | None]]:
        """The requests not answered yet, (obs, meta, hidden) by group, forgotten here (another client sends them)."""
        taken = {group: request[1:] for group, request in self._unanswered.items()}
        self._unanswered.clear()
        return taken

    def send(self, group: int, obs: np.ndarray, meta: dict | None = None, hidden: np.ndarray | None = None) -> None:
        self._seq += 1
        self._unanswered[group] = (self._seq, obs, meta or {}, hidden)  # (the ring keeps obs until the reply)
        self._send(group)

    def _send(self, group: int) -> None:
        seq, obs, meta, hidden = self._unanswered[group]
        arrays = {"obs": obs} if hidden is None else {"obs": obs, HIDDEN: hidden}
        self.socket.send_multipart(wire.pack("infer", {"group": group, "seq": seq, **meta}, arrays), copy=False)

    def _receive(self, timeout_ms: int) -> wire.Message | None:
        deadline = time.monotonic() + timeout_ms / 1000
        while self.socket.poll(max(0, int((deadline - time.monotonic()) * 1000)), zmq.POLLIN):
            msg = wire.unpack(self.socket.recv_multipart(copy=False))
            group, seq = msg.meta.get("group"), msg.meta.pop("seq", None)
            if group in self._unanswered and self._unanswered[group][0] == seq:
                del self._unanswered[group]
                return msg
        self.is_lost()  # (a replacement gets what its predecessor held)
        return None


class ShmInferenceClient(ReplyBuffer):
    """The client when the server shares this node: each ring group owns an observation slot (and, with
    a recurrent model, a state slot) and reply slots in one shared memory segment; a Unix socket connection
    to the server (`path`) carries only headers. A slot is rewritten only after its reply arrived, so
    neither side reads a half-written array. `reply_fields` as Contract.reply_fields gives them.

    A server that goes away closes the connection; the client connects again once a replacement listens
    at `path` and sends it each unanswered request's header again (the arrays are still in their slots)."""

    def __init__(
        self,
        path: str,
        n_groups: int,
        max_rows: int,
        obs_shape: tuple,
        obs_dtype,
        reply_fields: tuple[tuple[str, str, tuple], ...],
        name: str | None = None,
        server_may_be_away: bool = False,
    ) -> None:
        super().__init__()
        self.path = path
        self.conn = unix.Connection(path, server_may_be_away)
        self.resent = 0  # requests sent again after their server went away
        self._unanswered: dict[int, tuple[bytes, dict]] = {}  # group -> its request's header and meta
        self._tried_at = float("-inf")  # the last try to connect to a replacement
        self._headers: dict[tuple, bytes] = {}  # a group's header is the same bytes every time
        self._views: dict[tuple[int, int], dict[str, np.ndarray]] = {}
        self.max_rows = max_rows
        self.obs_shape, self.obs_dtype = tuple(obs_shape), np.dtype(obs_dtype)
        # per group: [offset, dtype, shape per row] of the request's arrays and of the reply's
        inputs = [("obs", self.obs_dtype.str, self.obs_shape)]
        inputs += [(HIDDEN, dt, shape) for field, dt, shape in reply_fields if field == HIDDEN]  # the state sent
        offset, self._layouts = 0, []
        for _ in range(n_groups):
            request: dict[str, list[Any]] = {}
            reply: dict[str, list[Any]] = {}
            for slots, fields in ((request, inputs), (reply, reply_fields)):
                for field, dt, shape in fields:
                    slots[field] = [offset, np.dtype(dt).str, list(shape)]
                    offset += _aligned(max_rows * int(np.prod(shape)) * np.dtype(dt).itemsize)
            self._layouts.append((request, reply))
        self.shm = shared_memory.SharedMemory(
            name=name or f"{SHM_PREFIX}{secrets.token_hex(8)}", create=True, size=offset
        )
        self._rows: dict[int, int] = {}  # rows of each group's request in flight

    def send(self, group: int, obs: np.ndarray, meta: dict | None = None, hidden: np.ndarray | None = None) -> None:
        rows = len(obs)
        if rows > self.max_rows or obs.shape[1:] != self.obs_shape:
            raise ValueError(f"request of shape {obs.shape} does not fit the slot ({self.max_rows}, *{self.obs_shape})")
        request, reply = self._layouts[group]
        for name, array in (("obs", obs), (HIDDEN, hidden)):
            if array is not None:
                offset, dt, _ = request[name]
                np.ndarray(array.shape, dt, buffer=self.shm.buf, offset=offset)[:] = array
        key = (group, rows, *(meta or {}).items())
        header = self._headers.get(key)
        if header is None:
            if len(self._headers) > 4096:  # (self-play: each new set of opponents makes a new header)
                self._headers.clear()
            header = self._headers[key] = wire.pack(
                "infer", {"group": group, "shm": self.shm.name, "rows": rows, **request, "reply": reply, **(meta or {})}
            )[0]
        self.conn.send(header)
        self._rows[group] = rows
        self._unanswered[group] = (header, meta or {})

    def is_lost(self) -> bool:
        """Whether the server is away now (its connection closed, and no replacement listens yet); connects to a
        replacement that listens."""
        return self.conn.server_gone and not self._reconnect()

    def take_unanswered(self) -> dict[int, tuple[np.ndarray, dict, np.ndarray | None]]:
        """The requests not answered yet, (obs, meta, hidden) by group, copied out of their slots and forgotten
        here (another client sends them)."""
        taken = {}
        for group, (_, meta) in self._unanswered.items():
            request, _ = self._layouts[group]
            rows = self._rows[group]
            arrays = {
                name: np.ndarray((rows, *shape), dt, buffer=self.shm.buf, offset=offset).copy()
                for name, (offset, dt, shape) in request.items()
            }
            taken[group] = (arrays["obs"], meta, arrays.get(HIDDEN))
        self._unanswered.clear()
        return taken

    def _receive(self, timeout_ms: int) -> wire.Message | None:
        if self.is_lost():
            time.sleep(timeout_ms / 1000)  # nothing will come: wait as long as a live server's silence would
            return None
        data = self.conn.recv(timeout_ms)
        if data is None:
            return None
        msg = wire.unpack([data])
        self._unanswered.pop(msg.meta["group"], None)
        return msg

    def _reconnect(self) -> bool:
        """Connect to the server's replacement, if one listens yet (looked for every RECONNECT_INTERVAL), and
        send it every unanswered request."""
        if time.monotonic() - self._tried_at < RECONNECT_INTERVAL:
            return False
        self._tried_at = time.monotonic()
        try:
            conn = unix.Connection(self.path)
        except ConnectionError:
            return False
        self.conn.close()
        self.conn = conn
        for header, _ in self._unanswered.values():
            conn.send(header)
            self.resent += 1
        return True

    def wait(self, group: int, timeout_ms: int) -> wire.Message | None:
        msg = super().wait(group, timeout_ms)
        if msg is None:
            return None
        rows = self._rows[group]
        views = self._views.get((group, rows))
        if views is None:
            _, reply = self._layouts[group]
            views = self._views[(group, rows)] = {
                name: np.ndarray((rows, *shape), dt, buffer=self.shm.buf, offset=offset)
                for name, (offset, dt, shape) in reply.items()
            }
        msg.arrays = views
        return msg

    def close(self) -> None:
        self.conn.close()
        self._views.clear()  # views on the segment would keep its buffer exported
        self.shm.close()
        with contextlib.suppress(FileNotFoundError):  # removed already (remove_run_segments, or by hand)
            self.shm.unlink()


class InlineInferenceClient:
    """The policy handler of this very worker answers at once (IMPALA-style placement)."""

    resent = 0  # (no server to lose)

    def __init__(self, serve_inline) -> None:
        self.serve_inline = serve_inline  # (obs, meta, hidden) -> reply arrays, with the handler's newest weights
        self._replies: dict[int, wire.Message] = {}

    def send(self, group: int, obs: np.ndarray, meta: dict | None = None, hidden: np.ndarray | None = None) -> None:
        arrays, version = self.serve_inline(obs, meta or {}, hidden)
        self._replies[group] = wire.Message("reply", {"group": group, "version": version}, arrays)

    def wait(self, group: int, timeout_ms: int) -> wire.Message | None:
        return self._replies.pop(group, None)


def _check_opponents(meta: dict, rows: int) -> None:
    """Self-play requests name, per row, the version to act with (-1: the newest; srl_hpc/population/opponents.py)."""
    versions = meta.get("opponents")
    if versions is not None and (
        not isinstance(versions, (list, tuple)) or len(versions) != rows or not all(integer(-1)(v) for v in versions)
    ):
        raise wire.WireError(f"'opponents' must be one version (an integer >= -1) per row, for {rows} rows")


def connect(ctx: zmq.Context, address: str) -> zmq.Socket:
    """The client's DEALER socket to a server's address (wrapped by InferenceClient or ShmInferenceClient)."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address)
    return sock


def _aligned(n: int, to: int = 64) -> int:
    return (n + to - 1) // to * to
