"""When a run stops: a failed or silent worker (an actor the run can do without is lost instead), or the first
of the experiment's stop conditions it meets."""

from __future__ import annotations

from typing import cast

from srl_hpc.config.schema import StopConfig
from srl_hpc.handlers.run_totals import RunTotals


class StopRules:
    def __init__(self, stop: StopConfig, silence_limit: float, actors: int = 0, min_alive: float = 1.0) -> None:
        self.stop = stop
        self.silence_limit = silence_limit  # seconds without a report after which a worker counts as failed
        # ... or as lost, for an actor while `min_alive` of the run's `actors` remain (workers.actor.min_alive)
        self.actors, self.min_alive = actors, min_alive

    def may_lose(self, totals: RunTotals, worker: str) -> bool:
        """Whether the run can go on without `worker` too."""
        if not worker.startswith("actor/"):
            return False
        lost = sum(w.startswith("actor/") for w in totals.lost) + 1
        return self.actors - lost >= max(1.0, self.min_alive * self.actors)

    def decide(self, totals: RunTotals, now: float) -> tuple[str, str] | None:
        """(status, reason) when the run should stop now, else None. A silent worker is marked failed, or lost
        where the run can go on without it (may_lose)."""
        stop = self.stop
        if totals.failed:
            worker, error = next(iter(totals.failed.items()))
            return "failed", f"worker {worker} failed: {error}"
        silent = [w for w, t in totals.last_seen.items() if now - t > self.silence_limit]
        for worker in [w for w in silent if self.may_lose(totals, w)]:
            totals.lose(worker, f"no heartbeat for {self.silence_limit:.0f}s and not replaced")
        silent = [w for w in silent if w not in totals.lost]
        if silent:
            # a worker beats between units of work: one busy longer than the timeout (a long update on a
            # crowded node) looks dead too, and the message says so
            error = (
                f"no heartbeat for {self.silence_limit:.0f}s (hung, dead, or busy longer than "
                f"monitor.heartbeat_timeout in one step)"
            )
            totals.failure(silent[0], error)
            return "failed", f"worker {silent[0]} failed: {error}"
        frames, mean_return, evaluations = totals.env_frames(), totals.mean_return(), totals.evaluations
        if (
            stop.target_eval_return is not None
            and evaluations
            and evaluations[-1]["mean_return"] >= stop.target_eval_return
        ):
            latest = evaluations[-1]
            return "succeeded", (
                f"evaluation target reached: mean return {latest['mean_return']:.1f} >= "
                f"{stop.target_eval_return:g} over {len(latest['returns'])} episodes of version "
                f"{latest['version']} ({latest['worker']})"
            )
        if (
            stop.target_return is not None
            and mean_return is not None
            and len(totals.returns) == stop.return_window
            and mean_return >= stop.target_return
        ):
            return "succeeded", (
                f"target reached: mean return {mean_return:.1f} >= {stop.target_return:g} "
                f"over the last {stop.return_window} episodes"
            )
        best = totals.best_policy() if stop.target_return is not None else None  # a population: its best member
        if best is not None and best[1] >= cast(float, stop.target_return):  # (best: a target is set)
            return "succeeded", (
                f"target reached by {best[0]}: mean return {best[1]:.1f} >= "
                f"{stop.target_return:g} over its last {stop.return_window} episodes"
            )
        if stop.env_frames is not None and frames >= stop.env_frames:
            return "succeeded", f"env frame budget reached: {frames:,} >= {stop.env_frames:,}"
        if stop.wall_time is not None and totals.elapsed(now) >= stop.wall_time:
            return "succeeded", f"wall time reached: {stop.wall_time:g}s"
        return None
