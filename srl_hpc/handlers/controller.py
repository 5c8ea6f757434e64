"""Controller handler: watches a run, prints progress, decides when it stops, and stops it cleanly.

Every worker pushes heartbeats (cumulative counters), a "failed" event if it crashes, and a "final"
report when it ends. The controller stops the run on a stop condition, a failed or silent worker, or
SIGTERM. Stopping is two phases, read off the graph: "stop" (every worker ends, except those that drain a
sample stream: they checkpoint and keep receiving) and, once the drainers have received every frame that
was sent, "finish". What the reports add up to is RunTotals' (run_totals.py), when to stop StopRules'
(stop_rules.py); the progress goes to the sinks of progress_sinks.py: the console, RUN/metrics.csv and,
with more (losses, episode lengths, queue depths, replay ratio), TensorBoard in RUN/tb/ and W&B. The
outcome goes to RUN/summary.json.
"""

from __future__ import annotations

import json
import time

from srl_hpc import graph as wiring
from srl_hpc.handlers import Handler
from srl_hpc.handlers.board import Board
from srl_hpc.handlers.progress_sinks import Console, Dashboards, MetricsCsv
from srl_hpc.handlers.run_totals import RunTotals, earlier_attempts
from srl_hpc.handlers.stop_rules import StopRules
from srl_hpc.streams.control import ControlServer, report_interval

STOP_TIMEOUT = 30.0  # longest the two-phase stop may take before the controller gives up waiting
QUIET = 1.0  # seconds without a frame arriving after which a replaced drainer's lost frames are taken as lost
PING_INTERVAL = 1.0
DECIDE_INTERVAL = 0.1  # stop conditions are checked this often, not on every event of a big run
# Reports are taken in at most this often, all that wait at once: what one costs the controller is then the
# same whether they come one per wake-up (an idle machine) or many together (a busy one), and nothing it
# decides from them needs them sooner (docs/scaling.md: the controller's CPU model)
DRAIN_INTERVAL = 0.05
REBROADCAST = 0.5  # PUB drops messages to peers that are still connecting: repeat commands until obeyed


class ControllerHandler(Handler):
    kind = "controller"

    def __init__(self, worker, out=None) -> None:
        super().__init__(worker)
        exp = self.exp
        self.run_dir = worker.run_dir
        self.workers = [w for w in self.graph.names if w != self.name]
        self.drainers = [w for w in self.workers if self.graph.drains(w)]
        self.attempt = worker.attempt
        policies = [p for p in self.graph.policies() if p]  # several (or a population's members): returns apart
        self.totals = RunTotals(
            self.graph, policies, exp.stop.return_window, earlier_attempts(self.run_dir, self.attempt)
        )
        self.console = Console(policies, bool(exp.workers.eval.count), out)
        self.sinks: list = [self.console]  # what every progress line goes to
        self.dashboards: Dashboards | None = None
        self.outcome: tuple[str, str] | None = None  # (status, reason) once decided
        self.exit_code = 1
        self.control = ControlServer(worker.ctx, self.workers)
        # in a run so big that workers report less often than every second, silence is judged accordingly
        self.rules = StopRules(
            exp.stop,
            max(exp.monitor.heartbeat_timeout, 3 * report_interval(len(self.graph.names))),
            exp.workers.actor.count,
            exp.workers.actor.min_alive,
        )
        self._last_decision = 0.0
        # each policy's (mean return of its window, episodes ended): renewed, never changed in place, so that
        # a handler beside it in its own thread (the population manager) reads a consistent one
        self.scores: dict[str, tuple[float | None, int]] = {}
        self._last_drain = 0.0
        self._last_ping = 0.0

    def bind(self) -> dict[str, int]:
        return self.control.bind(self.worker.ports)

    def start(self) -> None:
        self.totals.start(self.workers)
        replaced = self.worker.incarnation > 0
        go_on = self.attempt > 1 or replaced  # metrics.csv has the rows before
        self.metrics = MetricsCsv(self.run_dir, resumed=go_on and self.run_dir.metrics.exists())
        self.sinks.insert(0, self.metrics)  # first: a line on the console has its row in metrics.csv already
        self.console.line(f"run {self.exp.name}: {len(self.workers) + 1} workers, run dir {self.run_dir.root}")
        if self.exp.monitor.tensorboard or self.exp.monitor.wandb is not None:
            board = Board(self.exp, self.run_dir)
            self.dashboards = Dashboards(board)
            self.sinks.append(self.dashboards)
            for line in board.where:
                self.console.line(line)
        if replaced:
            self._go_on_from_predecessor()
        else:
            self._save()
        if self.attempt > 1 and not replaced:
            before = self.totals.before
            self.console.line(
                f"attempt {self.attempt}: resuming after {before['wall_time']:.1f}s, "
                f"{before['env_frames']:,} env frames, {before['episodes']:,} episodes"
            )

    def keep_running(self, stop_requested: bool) -> bool:
        if stop_requested and self.outcome is None:
            self.outcome = ("cancelled", "stopped by signal")
        return self.outcome is None

    def poll(self, timeout_ms) -> None:
        early = self._last_drain + DRAIN_INTERVAL - time.monotonic()
        if early > 0:
            time.sleep(min(early, timeout_ms / 1000))
            self._receive(0)
        else:
            self._receive(timeout_ms)
        now = self._last_drain = time.monotonic()
        if now - self._last_decision >= DECIDE_INTERVAL or self.totals.failed:  # its sums are over every worker
            self._last_decision = now
            lost = set(self.totals.lost)
            self.outcome = self.rules.decide(self.totals, now)
            self.scores = self.totals.policy_scores()
            for worker in sorted(self.totals.lost.keys() - lost):
                self._ping(now)  # its peers stop waiting for it at once
                self._save()  # (the local launcher reads it: that worker's process may end now)
                alive = self.exp.workers.actor.count - sum(w.startswith("actor/") for w in self.totals.lost)
                self.console.line(
                    f"{worker} lost: {self.totals.lost[worker]} (its host died or was cut off); the run goes on "
                    f"with {alive} of {self.exp.workers.actor.count} actors"
                )
        if now - self._last_ping >= PING_INTERVAL:  # workers that stop hearing from us end themselves
            self._ping(now)
        if self.outcome is None and now - self.totals.last_line[0] >= self.exp.monitor.status_interval:
            self._progress()
            self._save()

    def _ping(self, now: float) -> None:
        """The sign of life every worker waits for, naming the workers the run goes on without."""
        self.control.broadcast("ping", {"lost": sorted(self.totals.lost)})
        self._last_ping = now

    def finish(self) -> None:
        assert self.outcome is not None  # (decided: keep_running ended the loop)
        status, reason = self.outcome
        if time.monotonic() - self.totals.last_line[0] >= 1.0:  # rates over a shorter span would mislead
            self._progress()
        at_stop = self.totals.mean_return()  # the figure the decision saw; episodes still end while the run stops
        self._save()  # with the outcome: a replacement stops the run as decided
        stopping = time.monotonic()
        accounting = self._stop()
        self.trace.record("stop", seconds=time.monotonic() - stopping, events_received=self.control.received)
        for sink in self.sinks:
            if sink is not self.console:  # (it stays open for the conclusion)
                sink.close()
        self.exit_code = self._conclude(status, reason, {"mean_return_at_stop": at_stop, **accounting})

    def _receive(self, timeout_ms: int) -> None:
        msg = self.control.next_event(timeout_ms)
        while msg is not None:
            worker = msg.meta["worker"]
            if msg.kind == "failed" and worker in self.totals.lost:
                msg = self.control.next_event(0)  # (its process ended where it was lost: the launcher says so)
                continue
            if self.totals.back(worker):
                self.console.line(f"{worker} reports again: counted and waited for again")
            self.totals.last_seen[worker] = time.monotonic()
            if msg.kind == "failed":
                self.totals.failure(worker, msg.meta["error"])
            elif msg.kind == "restarting":
                count = self.totals.restarting(worker, msg.meta["error"])
                self.console.line(
                    f"{worker} {msg.meta['error']}: restarting it ({count} of "
                    f"{wiring.restart_budget(self.exp, worker)})"
                )
            else:
                rounds, back_after = self.totals.report(worker, msg.meta, final=msg.kind == "final")
                for evaluation in rounds if self.dashboards is not None else []:
                    assert self.dashboards is not None  # (iterated with dashboards only)
                    self.dashboards.evaluation(evaluation)
                if back_after is not None:
                    self.console.line(
                        f"{worker} is back (replacement {msg.meta['incarnation']}) after {back_after:.1f}s"
                    )
            msg = self.control.next_event(0)

    def _progress(self) -> None:
        """A progress line: the same scalars to every sink, and to the trace."""
        s = self.totals.progress(time.monotonic(), self._malformed())
        for sink in self.sinks:
            sink.write(s)
        self.trace.record(
            "progress",
            env_frames=s["env_frames"],
            frames_consumed=s["frames_consumed"],
            sample_fps=s["sample_fps"],
            train_fps=s["train_fps"],
            episodes=s["episodes"],
            mean_return=float("nan") if s["mean_return"] is None else s["mean_return"],
            policy_version=s["policy_version"],
            policy_lag=s["policy_lag"],
            events_received=self.control.received,
        )

    # ------------------------------------------------------------------------------------------- replacement
    def _save(self) -> None:
        """What a replacement goes on from (RUN/controller.json): the totals, and the outcome once decided."""
        state = {"attempt": self.attempt, "outcome": self.outcome, **self.totals.state(time.monotonic())}
        path = self.run_dir.controller_state
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(path)

    def _go_on_from_predecessor(self) -> None:
        """A replacement: the totals its predecessor saved last (this attempt's), and its own restarts."""
        try:
            state = json.loads(self.run_dir.controller_state.read_text())
        except (OSError, ValueError):
            state = {}
        if state.get("attempt") == self.attempt:
            self.totals.restore(state, time.monotonic())
            if state["outcome"] is not None:
                self.outcome = (state["outcome"][0], state["outcome"][1])
        own = self.totals.restarts.setdefault(self.name, [])
        at = round(self.totals.elapsed(time.monotonic()), 2)
        for why in self.worker.kept.get("restarted", [])[len(own) :]:
            own.append({"error": why, "at": at})
        saved = f"{time.time() - state['saved_at']:.1f}s old" if "saved_at" in state else "none saved"
        self.console.line(
            f"{self.name} {own[-1]['error'] if own else 'ended'}: replaced ({len(own)} of "
            f"{wiring.restart_budget(self.exp, self.name)}), going on from its totals ({saved})"
        )

    # ------------------------------------------------------------------------------------------- stopping
    def _stop(self) -> dict:
        """Phase 1: stop everyone, wait for the final reports of all but the drainers. Phase 2: once the
        drainers have received every frame that was sent, tell them to finish; wait for their reports."""
        deadline = time.monotonic() + STOP_TIMEOUT
        finals, total = self.totals.finals, self.totals.sum
        others = [w for w in self.workers if w not in self.drainers]
        self._broadcast_until("stop", lambda: all(w in finals for w in others), deadline)
        arrived = ArrivalWatch(self.totals.frames_awaited, any(w in self.totals.restarts for w in self.drainers))
        self._broadcast_until("stop", lambda: arrived.all() or all(w in finals for w in self.drainers), deadline)
        self._broadcast_until("finish", lambda: all(w in finals for w in self.drainers), deadline)
        missing = [w for w in self.workers if w not in finals]
        sent, at_receivers = self.totals.frames_sent()  # (what arrived since from senders without a final report)
        received = total("frames_received")
        return {
            "frames_sent": sent,
            "frames_sent_counted_at_receivers": at_receivers,
            "frames_received": received,
            "frames_consumed": total("frames_consumed"),
            "frames_dropped": total("frames_dropped"),
            "frames_lost_with_replaced_workers": self.totals.frames_lost_with_replaced,
            "frames_in_flight_lost": max(0, sent - received),
            "no_final_report": missing,
        }

    def _broadcast_until(self, command: str, done, deadline: float) -> None:
        last = 0.0
        while not done() and time.monotonic() < deadline:
            if time.monotonic() - last > REBROADCAST:
                self.control.broadcast(command)
                last = time.monotonic()
            self._receive(50)
            self.worker.maybe_heartbeat()  # (its supervisor replaces a controller that stops beating)
        self.control.broadcast(command)

    def _conclude(self, status: str, reason: str, accounting: dict) -> int:
        totals = self.totals
        wall = totals.elapsed(time.monotonic())
        frames = totals.env_frames()
        summary = {
            "status": status,
            "reason": reason,
            "attempt": self.attempt,
            "wall_time": round(wall, 2),
            "env_frames": frames,
            "episodes": totals.episodes,
            "mean_return": totals.mean_return(),
            "policy_version": totals.version(),
            **accounting,
            "failed_workers": totals.failed,
            "lost_workers": totals.lost,
            "restarts": totals.restarts,
            **(totals.evaluation_summary() if self.exp.workers.eval.count else {}),
            **totals.policies_summary(self.run_dir),
            "counters": {**totals.counters(), **self._refused_or_dropped()},
        }
        path = self.run_dir.summary
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(summary, indent=2))
        tmp.replace(path)
        self.console.line(f"{status}: {reason}")
        self.console.line(
            f"wall time {wall:.1f}s, {frames:,} env frames, {accounting['frames_consumed']:,} frames "
            f"consumed, {totals.episodes:,} episodes"
        )
        if accounting["no_final_report"]:
            self.console.line(f"no final report from: {', '.join(accounting['no_final_report'])}")
        return {"succeeded": 0, "failed": 1, "cancelled": 143}[status]

    def _refused_or_dropped(self) -> dict[str, int]:
        """What the run's ports kept out, the controller's own ports included."""
        own = self.worker.stats().get("handshakes_refused")
        refused = {} if own is None else {"handshakes_refused": self.totals.sum("handshakes_refused") + own}
        return {"malformed_dropped": self._malformed(), **refused}

    def _malformed(self) -> int:
        """Foreign or damaged messages dropped by any worker's receiving sockets, the controller's included."""
        return self.totals.sum("malformed_dropped") + self.control.malformed


class ArrivalWatch:
    """Phase 2's end: every frame that each sender finally reported sent has arrived from it (`awaited`: how
    many have not). A drainer that was replaced lost what reached it after its last report, so the count may
    never reach zero: then the frames have arrived once it has stood still for QUIET seconds (the drainers
    report every 0.2 s while they drain)."""

    def __init__(self, awaited, replaced: bool) -> None:
        self.awaited, self.replaced = awaited, replaced
        self.last = (awaited(), time.monotonic())

    def all(self) -> bool:
        now, count = time.monotonic(), self.awaited()
        if count == 0:
            return True
        if count != self.last[0]:
            self.last = (count, now)
        return self.replaced and now - self.last[1] > QUIET
