"""Controller: watches a run, prints progress, decides when it stops, and stops it cleanly.

Every worker pushes heartbeats (cumulative counters), a "failed" event if it crashes, and a "final"
report when it ends. The controller stops the run on a stop condition, a failed or silent worker, or
SIGTERM. Stopping is two phases: "stop" (actors and policy workers end, the trainer checkpoints and keeps
draining the sample stream) and, once the trainer has received every frame the actors sent, "finish".
The outcome goes to RUN/summary.json; progress rows to RUN/metrics.csv.
"""
from __future__ import annotations

import collections
import csv
import json
import sys
import time
from pathlib import Path

import zmq

from srl_hpc.streams import endpoints, wire
from srl_hpc.system.worker import trace_path
from srl_hpc.trace.writer import TraceWriter

STOP_TIMEOUT = 30.0  # longest the two-phase stop may take before the controller gives up waiting
PING_INTERVAL = 1.0
REBROADCAST = 0.5  # PUB drops messages to peers that are still connecting: repeat commands until obeyed

METRICS_COLUMNS = ("wall_time", "env_frames", "frames_consumed", "sample_fps", "train_fps", "episodes",
                   "mean_return", "policy_version", "policy_lag", "frames_dropped")


class Controller:
    kind = "controller"

    def __init__(self, exp, index, run_dir, local_rank=0, out=None):
        self.exp = exp
        self.run_dir = Path(run_dir)
        self.name = endpoints.CONTROLLER
        self.out = out or sys.stdout
        self.ctx = zmq.Context()
        self.workers = [w for w in endpoints.all_workers(exp) if w != self.name]
        self.latest: dict[str, dict] = {}  # worker -> last heartbeat/final meta
        self.last_seen: dict[str, float] = {}
        self.finals: set[str] = set()
        self.failed: dict[str, str] = {}  # worker -> error
        self.returns = collections.deque(maxlen=exp.stop.return_window)
        self.episodes = 0
        self.lag_sum = self.lag_count = 0
        self.stop_requested = False
        self.trace = TraceWriter(trace_path(self.run_dir, self.name), self.name, enabled=exp.monitor.trace)
        self.t0 = time.monotonic()
        self._last_status = (self.t0, 0, 0)  # (time, env_frames, frames_consumed) at the last status line

    def bind(self):
        self.events = self.ctx.socket(zmq.PULL)
        self.events.setsockopt(zmq.LINGER, 0)
        self.commands = self.ctx.socket(zmq.PUB)
        self.commands.setsockopt(zmq.LINGER, 1000)
        return {endpoints.EVENTS: self.events.bind_to_random_port("tcp://*"),
                endpoints.COMMANDS: self.commands.bind_to_random_port("tcp://*")}

    def connect(self, table):
        self.table = table

    def request_stop(self):
        self.stop_requested = True

    def close(self):
        self.trace.close()
        self.ctx.destroy(linger=1000)

    # ------------------------------------------------------------------------------------------- running
    def run(self) -> int:
        """Returns the process exit code: 0 when a stop condition was met, 1 on failure, 143 when cancelled."""
        self.t0 = now = time.monotonic()
        self._last_status = (now, 0, 0)
        self.last_seen = {w: now for w in self.workers}
        metrics_path = self.run_dir / "metrics.csv"
        with open(metrics_path, "w", newline="") as f:
            self._metrics_file, self.metrics = f, csv.writer(f)
            self.metrics.writerow(METRICS_COLUMNS)
            self._print(f"run {self.exp.name}: {len(self.workers) + 1} workers, run dir {self.run_dir}")
            status, reason = self._watch()
            if time.monotonic() - self._last_status[0] >= 1.0:  # rates over a shorter span would mislead
                self._status_line()
            accounting = self._stop(status)
        return self._conclude(status, reason, accounting)

    def _watch(self) -> tuple[str, str]:
        stop = self.exp.stop
        last_ping = 0.0
        while True:
            self._receive(100)
            now = time.monotonic()
            if now - last_ping >= PING_INTERVAL:  # workers that stop hearing from us end themselves
                self.commands.send_multipart(wire.pack("ping"))
                last_ping = now
            if self.failed:
                worker, error = next(iter(self.failed.items()))
                return "failed", f"worker {worker} failed: {error}"
            silent = [w for w, t in self.last_seen.items() if now - t > self.exp.monitor.heartbeat_timeout]
            if silent:
                self.finals.add(silent[0])  # nothing more will come from it
                self.failed[silent[0]] = f"no heartbeat for {self.exp.monitor.heartbeat_timeout:.0f}s"
                return "failed", f"worker {silent[0]} failed: no heartbeat for {self.exp.monitor.heartbeat_timeout:.0f}s"
            if self.stop_requested:
                return "cancelled", "stopped by signal"
            frames, mean_return = self._sum("actor", "env_frames"), self._mean_return()
            if stop.target_return is not None and mean_return is not None and len(self.returns) == stop.return_window \
                    and mean_return >= stop.target_return:
                return "succeeded", (f"target reached: mean return {mean_return:.1f} >= {stop.target_return:g} "
                                     f"over the last {stop.return_window} episodes")
            if stop.env_frames is not None and frames >= stop.env_frames:
                return "succeeded", f"env frame budget reached: {frames:,} >= {stop.env_frames:,}"
            if stop.wall_time is not None and now - self.t0 >= stop.wall_time:
                return "succeeded", f"wall time reached: {stop.wall_time:g}s"
            if now - self._last_status[0] >= self.exp.monitor.status_interval:
                self._status_line()

    def _receive(self, timeout_ms: int) -> None:
        if not self.events.poll(timeout_ms, zmq.POLLIN):
            return
        while True:
            try:
                msg = wire.unpack(self.events.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                return
            worker = msg.meta["worker"]
            self.last_seen[worker] = time.monotonic()
            if msg.kind == "failed":
                self.failed.setdefault(worker, msg.meta["error"])
                self.finals.add(worker)
                continue
            for ret, _length in msg.meta.pop("returns", []):
                self.returns.append(ret)
                self.episodes += 1
            self.lag_sum += msg.meta.pop("lag_sum", 0)
            self.lag_count += msg.meta.pop("lag_count", 0)
            self.latest[worker] = msg.meta
            if msg.kind == "final":
                self.finals.add(worker)

    # ------------------------------------------------------------------------------------------- stopping
    def _stop(self, status: str) -> dict:
        """Phase 1: stop everyone, wait for actors' and policy workers' final reports. Phase 2: once the
        trainers have received every frame the actors sent, tell them to finish; wait for their reports."""
        deadline = time.monotonic() + STOP_TIMEOUT
        senders = [w for w in self.workers if not w.startswith("trainer/")]
        trainers = [w for w in self.workers if w.startswith("trainer/")]
        self._broadcast_until("stop", lambda: all(w in self.finals for w in senders), deadline)
        sent = self._sum("actor", "frames_sent")
        self._broadcast_until("stop", lambda: self._sum("trainer", "frames_received") >= sent or
                              all(w in self.finals for w in trainers), deadline)
        self._broadcast_until("finish", lambda: all(w in self.finals for w in trainers), deadline)
        missing = [w for w in self.workers if w not in self.finals]
        received = self._sum("trainer", "frames_received")
        return {"frames_sent": sent, "frames_received": received,
                "frames_consumed": self._sum("trainer", "frames_consumed"),
                "frames_dropped": self._sum("trainer", "frames_dropped"),
                "frames_in_flight_lost": max(0, sent - received), "no_final_report": missing}

    def _broadcast_until(self, command: str, done, deadline: float) -> None:
        last = 0.0
        while not done() and time.monotonic() < deadline:
            if time.monotonic() - last > REBROADCAST:
                self.commands.send_multipart(wire.pack(command))
                last = time.monotonic()
            self._receive(50)
        self.commands.send_multipart(wire.pack(command))

    def _conclude(self, status: str, reason: str, accounting: dict) -> int:
        wall = time.monotonic() - self.t0
        frames = self._sum("actor", "env_frames")
        summary = {"status": status, "reason": reason, "wall_time": round(wall, 2), "env_frames": frames,
                   "episodes": self.episodes, "mean_return": self._mean_return(),
                   "policy_version": self._version(), **accounting,
                   "failed_workers": self.failed}
        path = self.run_dir / "summary.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(summary, indent=2))
        tmp.replace(path)
        self._print(f"{status}: {reason}")
        self._print(f"wall time {wall:.1f}s, {frames:,} env frames, {accounting['frames_consumed']:,} frames trained, "
                    f"{self.episodes:,} episodes")
        if accounting["no_final_report"]:
            self._print(f"no final report from: {', '.join(accounting['no_final_report'])}")
        return {"succeeded": 0, "failed": 1, "cancelled": 143}[status]

    # ------------------------------------------------------------------------------------------- reporting
    def _sum(self, kind: str, key: str) -> int:
        return sum(m.get(key, 0) for w, m in self.latest.items() if w.startswith(kind + "/"))

    def _version(self) -> int:
        """Trainers update in lockstep, so any of them has the policy version."""
        return max((m.get("version", 0) for w, m in self.latest.items() if w.startswith("trainer/")), default=0)

    def _mean_return(self) -> float | None:
        return sum(self.returns) / len(self.returns) if self.returns else None

    def _status_line(self) -> None:
        now = time.monotonic()
        frames, consumed = self._sum("actor", "env_frames"), self._sum("trainer", "frames_consumed")
        t_prev, frames_prev, consumed_prev = self._last_status
        dt = max(now - t_prev, 1e-9)
        sample_fps, train_fps = (frames - frames_prev) / dt, (consumed - consumed_prev) / dt
        self._last_status = (now, frames, consumed)
        mean_return = self._mean_return()
        lag = self.lag_sum / self.lag_count if self.lag_count else 0.0
        self.lag_sum = self.lag_count = 0
        version = self._version()
        ret = f"{mean_return:7.1f}" if mean_return is not None else "      -"
        self._print(f"[{now - self.t0:7.1f}s] frames {frames:>11,} | sample {sample_fps:8,.0f} fps | train "
                    f"{train_fps:8,.0f} fps | episodes {self.episodes:>7,} | return {ret} | version {version:>5} | "
                    f"lag {lag:4.1f}")
        self.metrics.writerow([round(now - self.t0, 2), frames, consumed, round(sample_fps, 1), round(train_fps, 1),
                               self.episodes, "" if mean_return is None else round(mean_return, 3), version,
                               round(lag, 3), self._sum("trainer", "frames_dropped")])
        self._metrics_file.flush()
        self.trace.record("progress", env_frames=frames, frames_consumed=consumed, sample_fps=sample_fps,
                          train_fps=train_fps, episodes=self.episodes,
                          mean_return=float("nan") if mean_return is None else mean_return,
                          policy_version=version, policy_lag=lag)

    def _print(self, line: str) -> None:
        print(line, file=self.out, flush=True)
