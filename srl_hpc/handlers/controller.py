"""Controller handler: watches a run, prints progress, decides when it stops, and stops it cleanly.

Every worker pushes heartbeats (cumulative counters), a "failed" event if it crashes, and a "final"
report when it ends. The controller stops the run on a stop condition, a failed or silent worker, or
SIGTERM. Stopping is two phases, read off the graph: "stop" (every worker ends, except those that drain a
sample stream: they checkpoint and keep receiving) and, once the drainers have received every frame that
was sent, "finish". Counters are summed by name over all workers, whatever their kind, and over every
incarnation of a worker that was replaced (its supervisor says "restarting"; the replacement's counters
start again from zero). The outcome goes to RUN/summary.json; progress rows to RUN/metrics.csv and, with
more (losses, episode lengths, queue depths, replay ratio), to TensorBoard in RUN/tb/.
"""
from __future__ import annotations

import collections
import csv
import json
import sys
import time

from srl_hpc.board import Board
from srl_hpc.handlers import Handler
from srl_hpc.streams.control import ControlServer, report_interval
from srl_hpc.supervisor import restart_budget

STOP_TIMEOUT = 30.0  # longest the two-phase stop may take before the controller gives up waiting
PING_INTERVAL = 1.0
DECIDE_INTERVAL = 0.1  # stop conditions are checked this often, not on every event of a big run
# Reports are taken in at most this often, all that wait at once: what one costs the controller is then the
# same whether they come one per wake-up (an idle machine) or many together (a busy one), and nothing it
# decides from them needs them sooner (docs/scaling.md: the controller's CPU model)
DRAIN_INTERVAL = 0.05
REBROADCAST = 0.5  # PUB drops messages to peers that are still connecting: repeat commands until obeyed

NOT_COUNTS = {"version", "policy_version", "incarnation"}  # numbers in a report that are states, not counts

METRICS_COLUMNS = ("wall_time", "env_frames", "frames_consumed", "sample_fps", "train_fps", "episodes",
                   "mean_return", "policy_version", "policy_lag", "frames_dropped", "malformed_dropped",
                   "eval_return")  # the mean return of the latest evaluation round (workers.eval)


class ControllerHandler(Handler):
    kind = "controller"

    def __init__(self, worker, out=None):
        super().__init__(worker)
        exp = self.exp
        self.out = out or sys.stdout
        self.run_dir = worker.run_dir
        self.workers = [w for w in self.graph.names if w != self.name]
        self.drainers = [w for w in self.workers if self.graph.drains(w)]
        self.latest: dict[str, dict] = {}  # worker -> last heartbeat/final meta
        self.last_seen: dict[str, float] = {}
        self.finals: set[str] = set()
        self.failed: dict[str, str] = {}  # worker -> error
        self.retired: collections.Counter = collections.Counter()  # counters of replaced incarnations, summed
        self.restarts: dict[str, list[dict]] = {}  # worker -> [{"error", "at", "back_after"}] per replacement
        self.returns = collections.deque(maxlen=exp.stop.return_window)  # this attempt's: a resumed run refills it
        self.ended: list[tuple[float, int]] = []  # (return, length) of the episodes since the last progress line
        self.policies = list(exp.policies)  # several: their returns are kept apart (an agent's, by its policy)
        self.policy_returns = [collections.deque(maxlen=exp.stop.return_window) for _ in self.policies]
        self.policy_ended: list[list[float]] = [[] for _ in self.policies]
        self.evaluations: list[dict] = []  # evaluation rounds, in the order they came
        self.board: Board | None = None
        self.lag_sum = self.lag_count = 0
        self.outcome: tuple[str, str] | None = None  # (status, reason) once decided
        self.exit_code = 1
        self.control = ControlServer(worker.ctx, self.workers)
        # in a run so big that workers report less often than every second, silence is judged accordingly
        self.silence_limit = max(exp.monitor.heartbeat_timeout, 3 * report_interval(len(self.graph.names)))
        self._last_decision = 0.0
        self._last_drain = 0.0
        self.t0 = time.monotonic()
        self._last_status = (self.t0, 0, 0)  # (time, env_frames, frames_consumed) at the last status line
        self._last_ping = 0.0
        self.attempt = worker.attempt
        self.before = self._earlier_attempts()  # a resumed run: stop conditions and totals count the whole run
        self.episodes = self.before["episodes"]

    def bind(self):
        return self.control.bind()

    def start(self):
        self.t0 = now = time.monotonic()
        self._last_status = (now, self.before["env_frames"], 0)
        self.last_seen = {w: now for w in self.workers}
        resumed = self.attempt > 1 and self.run_dir.metrics.exists()
        self._metrics_file = open(self.run_dir.metrics, "a" if resumed else "w", newline="")  # rows continue
        self.metrics = csv.writer(self._metrics_file)
        if not resumed:
            self.metrics.writerow(METRICS_COLUMNS)
        self._print(f"run {self.exp.name}: {len(self.workers) + 1} workers, run dir {self.run_dir.root}")
        if self.exp.monitor.tensorboard or self.exp.monitor.wandb is not None:
            self.board = Board(self.exp, self.run_dir)
            for line in self.board.where:
                self._print(line)
        if self.attempt > 1:
            self._print(f"attempt {self.attempt}: resuming after {self.before['wall_time']:.1f}s, "
                        f"{self.before['env_frames']:,} env frames, {self.before['episodes']:,} episodes")

    def _earlier_attempts(self) -> dict:
        """Totals of the attempts before this one: the previous attempt's summary if it ended cleanly, else
        the last row of metrics.csv (a killed attempt), else nothing."""
        if self.attempt == 1:
            return {"wall_time": 0.0, "env_frames": 0, "episodes": 0}
        try:
            last = json.loads(self.run_dir.attempt_summary(self.attempt - 1).read_text())
        except (OSError, ValueError):
            try:
                with open(self.run_dir.metrics, newline="") as f:
                    last = list(csv.DictReader(f))[-1]
            except (OSError, IndexError):
                last = {}
        return {"wall_time": float(last.get("wall_time", 0.0)), "env_frames": int(last.get("env_frames", 0)),
                "episodes": int(last.get("episodes", 0))}

    def _env_frames(self) -> int:
        """Env frames of the whole run (every attempt)."""
        return self.before["env_frames"] + self._sum("env_frames")

    def _elapsed(self, now: float) -> float:
        """Wall time of the whole run (every attempt)."""
        return self.before["wall_time"] + now - self.t0

    def keep_running(self, stop_requested: bool) -> bool:
        if stop_requested and self.outcome is None:
            self.outcome = ("cancelled", "stopped by signal")
        return self.outcome is None

    def poll(self, timeout_ms):
        early = self._last_drain + DRAIN_INTERVAL - time.monotonic()
        if early > 0:
            time.sleep(min(early, timeout_ms / 1000))
            self._receive(0)
        else:
            self._receive(timeout_ms)
        now = self._last_drain = time.monotonic()
        if now - self._last_ping >= PING_INTERVAL:  # workers that stop hearing from us end themselves
            self.control.broadcast("ping")
            self._last_ping = now
        if now - self._last_decision >= DECIDE_INTERVAL or self.failed:  # its sums are over every worker
            self._last_decision = now
            self.outcome = self._decide(now)
        if self.outcome is None and now - self._last_status[0] >= self.exp.monitor.status_interval:
            self._status_line()

    def finish(self):
        status, reason = self.outcome
        if time.monotonic() - self._last_status[0] >= 1.0:  # rates over a shorter span would mislead
            self._status_line()
        at_stop = self._mean_return()  # the figure the decision saw; episodes still end while the run stops
        stopping = time.monotonic()
        accounting = self._stop()
        self.trace.record("stop", seconds=time.monotonic() - stopping, events_received=self.control.received)
        self._metrics_file.close()
        if self.board is not None:
            self.board.close()
        self.exit_code = self._conclude(status, reason, {"mean_return_at_stop": at_stop, **accounting})

    def _decide(self, now: float) -> tuple[str, str] | None:
        stop = self.exp.stop
        if self.failed:
            worker, error = next(iter(self.failed.items()))
            return "failed", f"worker {worker} failed: {error}"
        silent = [w for w, t in self.last_seen.items() if now - t > self.silence_limit]
        if silent:
            self.finals.add(silent[0])  # nothing more will come from it
            # a worker beats between units of work: one busy longer than the timeout (a long update on a
            # crowded node) looks dead too, and the message says so
            error = (f"no heartbeat for {self.silence_limit:.0f}s (hung, dead, or busy longer than "
                     f"monitor.heartbeat_timeout in one step)")
            self.failed[silent[0]] = error
            return "failed", f"worker {silent[0]} failed: {error}"
        frames, mean_return = self._env_frames(), self._mean_return()
        if stop.target_eval_return is not None and self.evaluations \
                and self.evaluations[-1]["mean_return"] >= stop.target_eval_return:
            latest = self.evaluations[-1]
            return "succeeded", (f"evaluation target reached: mean return {latest['mean_return']:.1f} >= "
                                 f"{stop.target_eval_return:g} over {len(latest['returns'])} episodes of version "
                                 f"{latest['version']} ({latest['worker']})")
        if stop.target_return is not None and mean_return is not None and len(self.returns) == stop.return_window \
                and mean_return >= stop.target_return:
            return "succeeded", (f"target reached: mean return {mean_return:.1f} >= {stop.target_return:g} "
                                 f"over the last {stop.return_window} episodes")
        if stop.env_frames is not None and frames >= stop.env_frames:
            return "succeeded", f"env frame budget reached: {frames:,} >= {stop.env_frames:,}"
        if stop.wall_time is not None and self._elapsed(now) >= stop.wall_time:
            return "succeeded", f"wall time reached: {stop.wall_time:g}s"
        return None

    def _receive(self, timeout_ms: int) -> None:
        msg = self.control.next_event(timeout_ms)
        while msg is not None:
            worker = msg.meta["worker"]
            self.last_seen[worker] = time.monotonic()
            if msg.kind == "failed":
                self.failed.setdefault(worker, msg.meta["error"])
                self.finals.add(worker)
            elif msg.kind == "restarting":
                self._restarting(worker, msg.meta["error"])
            else:
                for ret, length in msg.meta.pop("returns", []):
                    self.returns.append(ret)
                    self.ended.append((ret, length))
                    self.episodes += 1
                for p, ret, length in msg.meta.pop("policy_returns", []):
                    self.policy_returns[int(p)].append(ret)
                    self.policy_ended[int(p)].append(ret)
                    self.episodes += 1
                self._evaluated(worker, msg.meta.pop("eval_episodes", []))
                self.lag_sum += msg.meta.pop("lag_sum", 0)
                self.lag_count += msg.meta.pop("lag_count", 0)
                self._retire_if_replaced(worker, msg.meta)
                self.latest[worker] = msg.meta
                if msg.kind == "final":
                    self.finals.add(worker)
            msg = self.control.next_event(0)

    def _evaluated(self, worker: str, episodes: list[list[float]]) -> None:
        """Evaluation rounds from a report: the (version, return, length) of each episode, one version a round."""
        for version in sorted({int(v) for v, _, _ in episodes}):
            returns = [r for v, r, _ in episodes if v == version]
            lengths = [int(n) for v, _, n in episodes if v == version]
            self.evaluations.append({"worker": worker, "version": version, "mean_return": sum(returns) / len(returns),
                                     "returns": returns, "lengths": lengths, "env_frames": self._env_frames(),
                                     "wall_time": round(self._elapsed(time.monotonic()), 2)})
            if self.board is not None:
                self.board.write(self._env_frames(), {"eval/return": self.evaluations[-1]["mean_return"],
                                                      "eval/length": _mean(lengths), "eval/version": version})

    def _restarting(self, worker: str, error: str) -> None:
        self.restarts.setdefault(worker, []).append({"error": error, "at": round(self._elapsed(time.monotonic()), 2)})
        self._print(f"{worker} {error}: restarting it ({len(self.restarts[worker])} of "
                    f"{restart_budget(self.exp, worker)})")

    def _retire_if_replaced(self, worker: str, meta: dict) -> None:
        """The first report of a replacement: its predecessor's counters stay in the run's totals."""
        previous = self.latest.get(worker)
        if previous is None or meta.get("incarnation", 0) <= previous.get("incarnation", 0):
            return
        self.retired.update(_counts(previous))
        for restart in self.restarts.get(worker, [])[-1:]:
            restart["back_after"] = round(self._elapsed(time.monotonic()) - restart["at"], 2)
            self._print(f"{worker} is back (replacement {meta['incarnation']}) after {restart['back_after']:.1f}s")

    # ------------------------------------------------------------------------------------------- stopping
    def _stop(self) -> dict:
        """Phase 1: stop everyone, wait for the final reports of all but the drainers. Phase 2: once the
        drainers have received every frame that was sent, tell them to finish; wait for their reports."""
        deadline = time.monotonic() + STOP_TIMEOUT
        others = [w for w in self.workers if w not in self.drainers]
        self._broadcast_until("stop", lambda: all(w in self.finals for w in others), deadline)
        sent = self._sum("frames_sent")
        self._broadcast_until("stop", lambda: self._sum("frames_received") >= sent or
                              all(w in self.finals for w in self.drainers), deadline)
        self._broadcast_until("finish", lambda: all(w in self.finals for w in self.drainers), deadline)
        missing = [w for w in self.workers if w not in self.finals]
        received = self._sum("frames_received")
        return {"frames_sent": sent, "frames_received": received, "frames_consumed": self._sum("frames_consumed"),
                "frames_dropped": self._sum("frames_dropped"), "frames_in_flight_lost": max(0, sent - received),
                "no_final_report": missing}

    def _broadcast_until(self, command: str, done, deadline: float) -> None:
        last = 0.0
        while not done() and time.monotonic() < deadline:
            if time.monotonic() - last > REBROADCAST:
                self.control.broadcast(command)
                last = time.monotonic()
            self._receive(50)
        self.control.broadcast(command)

    def _conclude(self, status: str, reason: str, accounting: dict) -> int:
        wall = self._elapsed(time.monotonic())
        frames = self._env_frames()
        summary = {"status": status, "reason": reason, "attempt": self.attempt, "wall_time": round(wall, 2),
                   "env_frames": frames,
                   "episodes": self.episodes, "mean_return": self._mean_return(),
                   "policy_version": self._version(), **accounting,
                   "failed_workers": self.failed, "restarts": self.restarts, **self._evaluation_summary(),
                   **self._policies_summary(),
                   "counters": {**self._counters(), **self._refused_or_dropped()}}
        path = self.run_dir.summary
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(summary, indent=2))
        tmp.replace(path)
        self._print(f"{status}: {reason}")
        self._print(f"wall time {wall:.1f}s, {frames:,} env frames, {accounting['frames_consumed']:,} frames consumed, "
                    f"{self.episodes:,} episodes")
        if accounting["no_final_report"]:
            self._print(f"no final report from: {', '.join(accounting['no_final_report'])}")
        return {"succeeded": 0, "failed": 1, "cancelled": 143}[status]

    # ------------------------------------------------------------------------------------------- reporting
    def _sum(self, key: str) -> int:
        return sum(m.get(key, 0) for m in self.latest.values()) + self.retired.get(key, 0)

    def _counters(self) -> dict[str, float]:
        """Every numeric counter any worker reports, summed over workers (what a handler counts reaches the
        summary without the controller knowing its name)."""
        keys = {k for m in self.latest.values() for k in _counts(m)} | set(self.retired)
        return {k: self._sum(k) for k in sorted(keys)}

    def _refused_or_dropped(self) -> dict[str, int]:
        """What the run's ports kept out, the controller's own ports included."""
        own = self.worker.stats().get("handshakes_refused")
        refused = {} if own is None else {"handshakes_refused": self._sum("handshakes_refused") + own}
        return {"malformed_dropped": self._malformed(), **refused}

    def _malformed(self) -> int:
        """Foreign or damaged messages dropped by any worker's receiving sockets, the controller's included."""
        return self._sum("malformed_dropped") + self.control.malformed

    def _version(self) -> int:
        """The trained version: trainers update in lockstep and report it as "version"."""
        return max((m.get("version", 0) for m in self.latest.values()), default=0)

    def _mean_return(self) -> float | None:
        return sum(self.returns) / len(self.returns) if self.returns else None

    def _status_line(self) -> None:
        now = time.monotonic()
        frames, consumed = self._env_frames(), self._sum("frames_consumed")
        t_prev, frames_prev, consumed_prev = self._last_status
        dt = max(now - t_prev, 1e-9)
        sample_fps, train_fps = (frames - frames_prev) / dt, (consumed - consumed_prev) / dt
        self._last_status = (now, frames, consumed)
        mean_return = self._mean_return()
        lag = self.lag_sum / self.lag_count if self.lag_count else 0.0
        self.lag_sum = self.lag_count = 0
        version = self._version()
        ret = f"{mean_return:7.1f}" if mean_return is not None else "      -"
        if self.policies:  # each policy's own
            ret = " ".join(f"{name} " + (f"{sum(r) / len(r):.1f}" if r else "-")
                           for name, r in zip(self.policies, self.policy_returns))
        evaluated = self.evaluations[-1]["mean_return"] if self.evaluations else None
        shown = "" if not self.exp.workers.eval.count else \
            " | eval " + (f"{evaluated:7.1f}" if evaluated is not None else "      -")
        self._print(f"[{self._elapsed(now):7.1f}s] frames {frames:>11,} | sample {sample_fps:8,.0f} fps | train "
                    f"{train_fps:8,.0f} fps | episodes {self.episodes:>7,} | return {ret} | version {version:>5} | "
                    f"lag {lag:4.1f}{shown}")
        self.metrics.writerow([round(self._elapsed(now), 2), frames, consumed, round(sample_fps, 1), round(train_fps, 1),
                               self.episodes, "" if mean_return is None else round(mean_return, 3), version,
                               round(lag, 3), self._sum("frames_dropped"), self._malformed(),
                               "" if evaluated is None else round(evaluated, 3)])
        self._metrics_file.flush()
        ended, self.ended = self.ended, []
        per_policy = self._policy_scalars()
        if self.board is not None:
            self.board.write(frames, {
                "episode/return_mean": mean_return,  # over the last stop.return_window episodes (the stop rule's)
                "episode/return": _mean([r for r, _ in ended]), "episode/length": _mean([n for _, n in ended]),
                "episode/count": self.episodes, "throughput/sample_fps": sample_fps, "throughput/train_fps": train_fps,
                "policy/version": version, "policy/lag": lag, "frames/dropped": self._sum("frames_dropped"),
                "frames/malformed_dropped": self._malformed(), "replay/ratio": self._replay_ratio(),
                **per_policy,
                **{f"train/{k}": v for k, v in self._losses().items()},
                **{f"queue/{k}": v for k, v in self._queue_depths().items()}})
        self.trace.record("progress", env_frames=frames, frames_consumed=consumed, sample_fps=sample_fps,
                          train_fps=train_fps, episodes=self.episodes,
                          mean_return=float("nan") if mean_return is None else mean_return,
                          policy_version=version, policy_lag=lag, events_received=self.control.received)

    def _policy_version(self, policy: str) -> int:
        return max((self.latest.get(t.name, {}).get("version", 0) for t in self.graph.trainers(policy)), default=0)

    def _policy_scalars(self) -> dict:
        """Several policies: each one's returns (since the last line, and of its last return_window episodes)
        and trained version, under its name."""
        out = {}
        for name, window, ended in zip(self.policies, self.policy_returns, self.policy_ended):
            out.update({f"{name}/return_mean": _mean(list(window)), f"{name}/return": _mean(ended),
                        f"{name}/version": self._policy_version(name)})
            ended.clear()
        return out

    def _policies_summary(self) -> dict:
        """summary.json's "policies" (several policies): each one's mean return of its last return_window
        episodes, trained version and checkpoint."""
        if not self.policies:
            return {}
        return {"policies": {name: {"mean_return": _mean(list(window)), "version": self._policy_version(name),
                                    "checkpoint": str(self.run_dir.checkpoint_of(name))}
                             for name, window in zip(self.policies, self.policy_returns)}}

    def _evaluation_summary(self) -> dict:
        """summary.json's "evaluation": the latest and the best round, every episode of each (runs with eval workers)."""
        if not self.exp.workers.eval.count:
            return {}
        best = max(self.evaluations, key=lambda e: e["mean_return"], default=None)
        return {"evaluation": {"rounds": len(self.evaluations), "latest": self.evaluations[-1] if self.evaluations else None,
                               "best": best}}

    def _losses(self) -> dict[str, float]:
        """Each loss averaged over the trainers that report it (data-parallel trainers report alike); with
        several policies, each policy's under its name ("predator/policy_loss")."""
        out = {}
        for policy in self.graph.policies():
            reports = [self.latest[t.name]["losses"] for t in self.graph.trainers(policy)
                       if self.latest.get(t.name, {}).get("losses")]
            prefix = f"{policy}/" if policy else ""
            out.update({prefix + k: _mean([r[k] for r in reports if k in r]) for k in sorted({k for r in reports for k in r})})
        return out

    def _queue_depths(self) -> dict[str, int]:
        """Items waiting in each kind of queue, summed over the workers that have one."""
        depths = collections.Counter()
        for meta in self.latest.values():
            depths.update(meta.get("queues", {}))
        return dict(sorted(depths.items()))

    def _replay_ratio(self) -> float | None:
        """Transitions sampled per transition stored (runs with buffer workers; what max_replay_ratio caps).
        Both counters come from the buffers' own reports, so each report's pair is consistent."""
        stored = self._sum("transitions_stored")
        return self._sum("transitions_sampled") / stored if stored else None

    def _print(self, line: str) -> None:
        print(line, file=self.out, flush=True)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _counts(meta: dict) -> dict[str, float]:
    """The cumulative counters of one worker's report."""
    return {k: v for k, v in meta.items() if isinstance(v, (int, float)) and k not in NOT_COUNTS}
