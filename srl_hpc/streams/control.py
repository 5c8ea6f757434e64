"""The control channel between the controller and every worker: events up, commands down.

Workers PUSH events (heartbeats with their counters, "failed", "final") to the controller's PULL; the
controller PUBlishes commands ("ping", "stop", "finish") that every worker SUBscribes to. Each ping names the
workers the run goes on without (lost for good: their host died or was cut off), so that their peers stop
waiting for them. A worker's
supervisor (srl_hpc.worker.supervisor) or the local launcher speaks for a worker that cannot: "restarting" (it
died or hung and is being replaced) and "failed" (it died and will not be).
"""

from __future__ import annotations

import zmq

from srl_hpc.rundir import RunDir
from srl_hpc.streams import endpoints, wire
from srl_hpc.streams.layout import number
from srl_hpc.streams.security import secure_context
from srl_hpc.streams.waiting import waiting

EVENT_KINDS = ("heartbeat", "failed", "final", "restarting")
MAX_REPORTS_PER_S = 1000  # heartbeats the controller takes in per second, whatever the run's size


def report_interval(n_workers: int) -> float:
    """Seconds between a worker's heartbeats to the controller: 1, or longer in a run of more than
    MAX_REPORTS_PER_S workers, so that the controller's load stays bounded as the run grows."""
    return max(1.0, n_workers / MAX_REPORTS_PER_S)


WITH_ERROR = ("failed", "restarting")  # these name what happened in meta["error"]; the others are reports
# lists of episodes: (return, length), with several policies (policy index, return, length), (version, return, length)
EPISODE_FIELDS = {"returns": 2, "policy_returns": 3, "eval_episodes": 3}


def is_event(kind: str, meta: dict, workers) -> bool:
    """An event a worker of this run sends: its name, then for "failed"/"restarting" an error text, and
    texts or numbers besides (a traceback, a restart count); for reports (heartbeat, final) finite numbers
    only, besides lists of episodes (EPISODE_FIELDS), the named losses, the named queue depths and the frames
    received by sender. The controller sums what reports carry: nothing else may get in."""
    worker = meta.get("worker")
    if kind not in EVENT_KINDS or not isinstance(worker, str) or worker not in workers:
        return False
    if kind in WITH_ERROR:
        return isinstance(meta.get("error"), str) and all(isinstance(v, str) or number(v) for v in meta.values())
    for key, value in meta.items():
        if key in EPISODE_FIELDS:
            ok = isinstance(value, list) and all(
                isinstance(p, list) and len(p) == EPISODE_FIELDS[key] and all(map(number, p)) for p in value
            )
        elif key == "losses":  # (shown, never summed: a diverged loss is reported as it is)
            ok = isinstance(value, dict) and all(isinstance(v, (int, float)) for v in value.values())
        elif key == "queues":  # items waiting in a worker's queues, by name
            ok = isinstance(value, dict) and all(number(v) and v >= 0 for v in value.values())
        elif key == "received_from":  # frames that arrived, by sender (srl_hpc.streams.samples.sender_key)
            ok = isinstance(value, dict) and all(isinstance(v, int) and v >= 0 for v in value.values())
        else:
            ok = key == "worker" or number(value)
        if not ok:
            return False
    return True


class ControlServer:
    """The controller's side: events from the run's `workers` (names)."""

    def __init__(self, ctx: zmq.Context, workers: list[str]) -> None:
        self.workers = set(workers)
        self.malformed = 0
        self.received = 0  # events taken in, well-formed or not: the controller's load grows with it
        self.events = ctx.socket(zmq.PULL)
        self.events.setsockopt(zmq.LINGER, 0)
        self.commands = ctx.socket(zmq.PUB)
        self.commands.setsockopt(zmq.LINGER, 1000)

    def bind(self, ports: dict[str, int]) -> dict[str, int]:
        """Bind both sockets, on `ports` where given (a replaced controller's: every worker knows those)."""
        return {
            endpoints.EVENTS: endpoints.bind(self.events, ports.get(endpoints.EVENTS)),
            endpoints.COMMANDS: endpoints.bind(self.commands, ports.get(endpoints.COMMANDS)),
        }

    def broadcast(self, command: str, meta: dict | None = None) -> None:
        self.commands.send_multipart(wire.pack(command, meta))

    def next_event(self, timeout_ms: int) -> wire.Message | None:
        """The next event from a worker of this run. Anything else (a foreign client, a damaged frame) is
        dropped and counted in `malformed`."""
        if not self.events.poll(timeout_ms, zmq.POLLIN):
            return None
        for frames in waiting(self.events, copy=True):
            self.received += 1
            try:
                msg = wire.unpack(frames)
            except wire.WireError:
                self.malformed += 1
                continue
            if is_event(msg.kind, msg.meta, self.workers):
                return msg
            self.malformed += 1
        return None


class ControlClient:
    """A worker's side."""

    def __init__(self, ctx: zmq.Context, table: dict, controller: str) -> None:
        self.events = ctx.socket(zmq.PUSH)
        self.events.setsockopt(zmq.LINGER, 5000)  # the final report must arrive
        self.events.connect(endpoints.address(table, controller, endpoints.EVENTS))
        self.commands = ctx.socket(zmq.SUB)
        # a SUB has only its subscription to send, which an ended controller no longer takes: a linger would
        # hold every worker's exit for its full length
        self.commands.setsockopt(zmq.LINGER, 0)
        self.commands.setsockopt(zmq.SUBSCRIBE, b"")
        self.commands.connect(endpoints.address(table, controller, endpoints.COMMANDS))

    def send(self, kind: str, meta: dict) -> None:
        self.events.send_multipart(wire.pack(kind, meta))

    def pending_commands(self) -> list[wire.Message]:
        return [wire.unpack(frames) for frames in waiting(self.commands, copy=True)]


def send_once(run: RunDir, curve: bool, address: str, kind: str, meta: dict) -> None:
    """One event to the controller at `address` from outside a worker (a supervisor, the local launcher)."""
    ctx = zmq.Context()
    if curve:  # the controller's port takes only the run's own keys
        secure_context(ctx, run)
    try:
        sock = ctx.socket(zmq.PUSH)
        sock.setsockopt(zmq.LINGER, 2000)
        sock.connect(address)
        sock.send_multipart(wire.pack(kind, meta))
    finally:
        ctx.destroy(linger=2000)
