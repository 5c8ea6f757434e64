"""What every worker shares: control sockets to the controller, heartbeats, the poll loop, stop handling.

A worker binds its own sockets (free ports), rendezvous tells everyone's addresses, then it connects
and runs `step()` in a loop until the controller says stop (or SIGTERM arrives). `finish()` is the
kind-specific wind-down (the trainer drains and checkpoints); the last event is a "final" report.
"""
from __future__ import annotations

import os
import time
import traceback
from pathlib import Path

import zmq

from srl_hpc.streams import endpoints, wire
from srl_hpc.trace.writer import TraceWriter

HEARTBEAT_INTERVAL = 1.0
POLL_MS = 100  # longest a step blocks, so commands and heartbeats are never late by more


def rss_mb() -> float:
    """Resident memory of this process now."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def process_age() -> float:
    """Seconds since this process started (interpreter start-up and imports included)."""
    with open("/proc/self/stat") as f:
        started_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return uptime - started_ticks / os.sysconf("SC_CLK_TCK")


def trace_path(run_dir: Path, worker: str) -> Path:
    return Path(run_dir) / "traces" / (worker.replace("/", "-") + ".h5")


class Worker:
    kind = ""

    def __init__(self, exp, index: int, run_dir: Path, local_rank: int = 0):
        self.exp = exp
        self.index = index
        self.name = endpoints.worker_name(self.kind, index)
        self.run_dir = Path(run_dir)
        self.local_rank = local_rank
        self.ctx = zmq.Context()
        self.stop_requested = False
        self.finish_requested = False
        self._events = None
        self._commands = None
        self._last_heartbeat = 0.0
        self._controller_heard = time.monotonic()
        self.trace = TraceWriter(trace_path(self.run_dir, self.name), self.name, enabled=exp.monitor.trace)

    # -- lifecycle, called by srl_hpc.worker in this order
    def bind(self) -> dict[str, int]:
        return {}

    def record_startup(self) -> None:
        """Start-up cost up to 'ready to rendezvous' (imports, envs, models, sockets) and memory then."""
        self.trace.record("startup", seconds=process_age(), rss_mb=rss_mb())

    def connect(self, table: dict) -> None:
        self._events = self.ctx.socket(zmq.PUSH)
        self._events.setsockopt(zmq.LINGER, 5000)  # the final report must arrive
        self._events.connect(endpoints.address(table, endpoints.CONTROLLER, endpoints.EVENTS))
        self._commands = self.ctx.socket(zmq.SUB)
        self._commands.setsockopt(zmq.SUBSCRIBE, b"")
        self._commands.connect(endpoints.address(table, endpoints.CONTROLLER, endpoints.COMMANDS))
        self._controller_heard = time.monotonic()

    def run(self) -> None:
        self.start()
        while self.keep_running():
            self.poll_commands()
            self.step()
            self.maybe_heartbeat()
        self.finish()
        self.send_event("final", self.stats())

    def close(self) -> None:
        self.trace.close()
        self.ctx.destroy(linger=5000)

    # -- for subclasses
    def start(self) -> None:
        pass

    def keep_running(self) -> bool:
        return not self.stop_requested

    def step(self) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        pass

    def stats(self) -> dict:
        return {}

    def queue_depths(self) -> dict[str, int]:
        """Items waiting inside this worker, recorded with every heartbeat."""
        return {}

    # -- shared machinery
    def request_stop(self) -> None:
        self.stop_requested = True

    def poll_commands(self) -> None:
        """Obey the controller's broadcasts; if it has gone silent, the run is over (its process died)."""
        while True:
            try:
                msg = wire.unpack(self._commands.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                break
            self._controller_heard = time.monotonic()
            if msg.kind == "stop":
                self.stop_requested = True
            elif msg.kind == "finish":
                self.stop_requested = self.finish_requested = True
        silence = time.monotonic() - self._controller_heard
        if silence > self.exp.monitor.heartbeat_timeout:
            raise RuntimeError(f"no word from the controller for {silence:.0f}s; stopping")

    def maybe_heartbeat(self, interval: float = HEARTBEAT_INTERVAL) -> None:
        now = time.monotonic()
        if now - self._last_heartbeat >= interval:
            self._last_heartbeat = now
            self.trace.record("heartbeat", rss_mb=rss_mb(), **self.queue_depths())
            self.send_event("heartbeat", self.stats())

    def send_event(self, kind: str, meta: dict) -> None:
        if self._events is not None:
            self._events.send_multipart(wire.pack(kind, {"worker": self.name, **meta}))

    def report_failure(self, exc: BaseException) -> None:
        """Tell the controller which worker failed and why (best effort: it may be the controller that is gone)."""
        error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        self.send_event("failed", {"error": error, "traceback": traceback.format_exc()[-4000:]})
