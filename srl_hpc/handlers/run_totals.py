"""The controller's intake: what the workers report, summed into the run's totals.

Counters are summed by name over all workers, whatever their kind, and over every incarnation of a worker
that was replaced (its replacement's counters start again from zero); a resumed run adds the attempts
before it. Episode returns are kept for the stop rule's window, the progress lines and, with several
policies, per policy; evaluation rounds in the order they came. No output here: the controller's sinks
show what `progress()` returns.
"""

from __future__ import annotations

import collections
import csv
import json
import time
from typing import cast

from srl_hpc.rundir import RunDir
from srl_hpc.streams.samples import sender_key

NOT_COUNTS = {"version", "policy_version", "incarnation"}  # numbers in a report that are states, not counts


def earlier_attempts(run_dir: RunDir, attempt: int) -> dict:
    """Totals of the attempts before this one: the previous attempt's summary if it ended cleanly, else
    the last row of metrics.csv (a killed attempt), else nothing."""
    if attempt == 1:
        return {"wall_time": 0.0, "env_frames": 0, "episodes": 0}
    try:
        last = json.loads(run_dir.attempt_summary(attempt - 1).read_text())
    except (OSError, ValueError):
        try:
            with open(run_dir.metrics, newline="") as f:
                last = list(csv.DictReader(f))[-1]
        except (OSError, IndexError):
            last = {}
    return {
        "wall_time": float(last.get("wall_time", 0.0)),
        "env_frames": int(last.get("env_frames", 0)),
        "episodes": int(last.get("episodes", 0)),
    }


class RunTotals:
    def __init__(self, graph, policies: list[str], return_window: int, before: dict) -> None:
        self.graph = graph
        self.before = before  # earlier attempts': stop rules and totals count the whole run
        self.latest: dict[str, dict] = {}  # worker -> last heartbeat/final meta
        self.last_seen: dict[str, float] = {}
        self.finals: set[str] = set()
        self.failed: dict[str, str] = {}  # worker -> error
        self.lost: dict[str, str] = {}  # worker -> why: the run goes on without it (StopRules)
        self.retired: collections.Counter = collections.Counter()  # counters of replaced incarnations, summed
        # frames a replaced incarnation had received and neither consumed nor dropped (at its last report)
        self.frames_lost_with_replaced = 0
        self.retired_sent: dict[str, int] = {}  # sender_key -> frames_sent at its last report, of replaced senders
        self.retired_received_from: collections.Counter[str] = collections.Counter()  # of replaced receivers
        self.final_reports: set[str] = set()  # sender_key of every incarnation that made its final report
        self.restarts: dict[str, list[dict]] = {}  # worker -> [{"error", "at", "back_after"}] per replacement
        # this attempt's: a resumed run refills it
        self.returns: collections.deque[float] = collections.deque(maxlen=return_window)
        self.ended: list[tuple[float, int]] = []  # (return, length) of the episodes since the last progress line
        self.episodes = before["episodes"]
        self.policies = policies  # several: their returns are kept apart (an agent's, by its policy)
        self.policy_returns: list[collections.deque[float]] = [
            collections.deque(maxlen=return_window) for _ in policies
        ]
        self.policy_ended: list[list[float]] = [[] for _ in policies]
        self.policy_episodes = [0] * len(policies)
        self.evaluations: list[dict] = []  # evaluation rounds, in the order they came
        self.lag_sum = self.lag_count = 0
        self.t0 = time.monotonic()
        self.last_line = (self.t0, 0, 0)  # (time, env_frames, frames_consumed) at the last progress line

    def start(self, workers: list[str]) -> None:
        self.t0 = now = time.monotonic()
        self.last_line = (now, self.before["env_frames"], 0)
        self.last_seen = {w: now for w in workers}

    def env_frames(self) -> int:
        """Env frames of the whole run (every attempt)."""
        return self.before["env_frames"] + self.sum("env_frames")

    def elapsed(self, now: float) -> float:
        """Wall time of the whole run (every attempt)."""
        return self.before["wall_time"] + now - self.t0

    # ------------------------------------------------------------------------------------------- intake
    def failure(self, worker: str, error: str) -> None:
        self.failed.setdefault(worker, error)
        self.finals.add(worker)  # nothing more will come from it

    def lose(self, worker: str, why: str) -> None:
        """Go on without `worker`: nothing more is waited for from it."""
        self.lost[worker] = why
        self.last_seen.pop(worker, None)
        self.finals.add(worker)

    def back(self, worker: str) -> bool:
        """A report from `worker`: True if it was lost (it is counted again, and waited for at the stop)."""
        if self.lost.pop(worker, None) is None:
            return False
        self.finals.discard(worker)
        return True

    def restarting(self, worker: str, error: str) -> int:
        """A worker's supervisor replaces it; returns how many times it has been so far."""
        self.restarts.setdefault(worker, []).append({"error": error, "at": round(self.elapsed(time.monotonic()), 2)})
        return len(self.restarts[worker])

    def report(self, worker: str, meta: dict, final: bool) -> tuple[list[dict], float | None]:
        """A heartbeat or final report: (the evaluation rounds it completed, the seconds its worker was away
        when it is a replacement's first report, else None)."""
        for ret, length in meta.pop("returns", []):
            self.returns.append(ret)
            self.ended.append((ret, length))
            self.episodes += 1
        for p, ret, _length in meta.pop("policy_returns", []):
            self.policy_returns[int(p)].append(ret)
            self.policy_ended[int(p)].append(ret)
            self.policy_episodes[int(p)] += 1
            self.episodes += 1
        rounds = self._evaluated(worker, meta.pop("eval_episodes", []))
        self.lag_sum += meta.pop("lag_sum", 0)
        self.lag_count += meta.pop("lag_count", 0)
        back_after = self._retire_if_replaced(worker, meta)
        self.latest[worker] = meta
        if final:
            self.finals.add(worker)
            self.final_reports.add(sender_key(worker, meta.get("incarnation", 0)))
        return rounds, back_after

    def _evaluated(self, worker: str, episodes: list[list[float]]) -> list[dict]:
        """Evaluation rounds from a report: the (version, return, length) of each episode, one version a round."""
        rounds = []
        for version in sorted({int(v) for v, _, _ in episodes}):
            returns = [r for v, r, _ in episodes if v == version]
            lengths = [int(n) for v, _, n in episodes if v == version]
            rounds.append(
                {
                    "worker": worker,
                    "version": version,
                    "mean_return": sum(returns) / len(returns),
                    "returns": returns,
                    "lengths": lengths,
                    "env_frames": self.env_frames(),
                    "wall_time": round(self.elapsed(time.monotonic()), 2),
                }
            )
        self.evaluations += rounds
        return rounds

    def _retire_if_replaced(self, worker: str, meta: dict) -> float | None:
        """The first report of a replacement: its predecessor's counters stay in the run's totals."""
        previous = self.latest.get(worker)
        if previous is None or meta.get("incarnation", 0) <= previous.get("incarnation", 0):
            return None
        counts = _counts(previous)
        self.retired.update(counts)
        if "frames_sent" in previous:
            self.retired_sent[sender_key(worker, previous.get("incarnation", 0))] = previous["frames_sent"]
        self.retired_received_from.update(previous.get("received_from", {}))
        held = counts.get("frames_received", 0) - counts.get("frames_consumed", 0) - counts.get("frames_dropped", 0)
        self.frames_lost_with_replaced += int(max(0, held))
        if not self.restarts.get(worker):
            return None
        restart = self.restarts[worker][-1]
        restart["back_after"] = round(self.elapsed(time.monotonic()) - restart["at"], 2)
        return restart["back_after"]

    # ------------------------------------------------------------------------------------------- saved
    def state(self, now: float) -> dict:
        """What a replacement controller needs to go on from here: everything summed so far, as JSON."""
        return {
            "saved_at": time.time(),
            "elapsed": self.elapsed(now),
            "latest": self.latest,
            "finals": sorted(self.finals),
            "failed": self.failed,
            "lost": self.lost,
            "retired": dict(self.retired),
            "frames_lost_with_replaced": self.frames_lost_with_replaced,
            "retired_sent": self.retired_sent,
            "retired_received_from": dict(self.retired_received_from),
            "final_reports": sorted(self.final_reports),
            "restarts": self.restarts,
            "returns": list(self.returns),
            "episodes": self.episodes,
            "policy_returns": [list(window) for window in self.policy_returns],
            "policy_episodes": self.policy_episodes,
            "evaluations": self.evaluations,
            "last_line": self.last_line[1:],
        }

    def restore(self, state: dict, now: float) -> None:
        """Go on from a predecessor's `state()`; the wall time it was away counts (after start())."""
        away = max(0.0, time.time() - state["saved_at"])
        self.t0 = now - (state["elapsed"] - self.before["wall_time"]) - away
        self.latest = state["latest"]
        self.finals = set(state["finals"])
        self.failed = state["failed"]
        self.lost = state["lost"]
        for worker in self.lost:
            self.last_seen.pop(worker, None)
        self.retired = collections.Counter(state["retired"])
        self.frames_lost_with_replaced = state["frames_lost_with_replaced"]
        self.retired_sent = state["retired_sent"]
        self.retired_received_from = collections.Counter(state["retired_received_from"])
        self.final_reports = set(state["final_reports"])
        self.restarts = state["restarts"]
        self.returns.extend(state["returns"])
        self.episodes = state["episodes"]
        for window, saved in zip(self.policy_returns, state["policy_returns"]):
            window.extend(saved)
        self.policy_episodes = state["policy_episodes"]
        self.evaluations = state["evaluations"]
        self.last_line = (now, *state["last_line"])

    # ------------------------------------------------------------------------------------------- totals
    def sum(self, key: str) -> int:
        return sum(m.get(key, 0) for m in self.latest.values()) + self.retired.get(key, 0)

    def received_from(self) -> collections.Counter[str]:
        """Frames that arrived from each sender (sender_key), summed over the receivers and their incarnations."""
        arrived = collections.Counter(self.retired_received_from)
        for meta in self.latest.values():
            arrived.update(meta.get("received_from", {}))
        return arrived

    def _sent_by(self) -> dict[str, int]:
        """Each sender's own count of frames sent, at its last report."""
        own = {
            sender_key(w, m.get("incarnation", 0)): m["frames_sent"]
            for w, m in self.latest.items()
            if "frames_sent" in m
        }
        return {**self.retired_sent, **own}

    def frames_sent(self) -> tuple[int, int]:
        """(frames sent, of which counted where they arrived). A sender's own count where it made a final
        report; a sender that did not (killed, hung, lost, or gone before its first report) counted only up to
        its last report, so what arrived from it is what it sent, as far as the run can know."""
        own, arrived = self._sent_by(), self.received_from()
        sent = at_receivers = 0
        for key in own.keys() | arrived.keys():
            if key in self.final_reports:
                sent += own.get(key, arrived[key])
            else:
                sent += arrived[key]
                at_receivers += arrived[key]
        return sent, at_receivers

    def frames_awaited(self) -> int:
        """Frames that senders which made their final report sent and that have not arrived (as reported)."""
        arrived = self.received_from()
        return sum(max(0, n - arrived[key]) for key, n in self._sent_by().items() if key in self.final_reports)

    def counters(self) -> dict[str, float]:
        """Every numeric counter any worker reports, summed over workers (what a handler counts reaches the
        summary without the controller knowing its name)."""
        keys = {k for m in self.latest.values() for k in _counts(m)} | set(self.retired)
        return {k: self.sum(k) for k in sorted(keys)}

    def version(self) -> int:
        """The trained version: trainers update in lockstep and report it as "version"."""
        return max((m.get("version", 0) for m in self.latest.values()), default=0)

    def policy_version(self, policy: str) -> int:
        return max((self.latest.get(t.name, {}).get("version", 0) for t in self.graph.trainers(policy)), default=0)

    def mean_return(self) -> float | None:
        return sum(self.returns) / len(self.returns) if self.returns else None

    def progress(self, now: float, malformed_dropped: int) -> dict:
        """The scalars of a progress line, every sink's: rates and episodes since the previous line, which
        this call starts anew. Names with a "/" are dashboard tags as they are."""
        frames, consumed = self.env_frames(), self.sum("frames_consumed")
        t_prev, frames_prev, consumed_prev = self.last_line
        dt = max(now - t_prev, 1e-9)
        self.last_line = (now, frames, consumed)
        lag = self.lag_sum / self.lag_count if self.lag_count else 0.0
        self.lag_sum = self.lag_count = 0
        ended, self.ended = self.ended, []
        return {
            "wall_time": self.elapsed(now),
            "env_frames": frames,
            "frames_consumed": consumed,
            "sample_fps": (frames - frames_prev) / dt,
            "train_fps": (consumed - consumed_prev) / dt,
            "episodes": self.episodes,
            "mean_return": self.mean_return(),
            "policy_version": self.version(),
            "policy_lag": lag,
            "frames_dropped": self.sum("frames_dropped"),
            "malformed_dropped": malformed_dropped,
            "eval_return": self.evaluations[-1]["mean_return"] if self.evaluations else None,
            "episode_return": _mean([r for r, _ in ended]),
            "episode_length": _mean([n for _, n in ended]),
            "replay_ratio": self._replay_ratio(),
            **self._policy_scalars(),
            **{f"train/{k}": v for k, v in self._losses().items()},
            **{f"queue/{k}": v for k, v in self._queue_depths().items()},
        }

    def _policy_scalars(self) -> dict:
        """Several policies: each one's returns (since the last line, and of its last return_window episodes)
        and trained version, under its name."""
        out = {}
        for name, window, ended in zip(self.policies, self.policy_returns, self.policy_ended):
            out.update(
                {
                    f"{name}/return_mean": _mean(list(window)),
                    f"{name}/return": _mean(ended),
                    f"{name}/version": self.policy_version(name),
                }
            )
            ended.clear()
        return out

    def policy_scores(self) -> dict[str, tuple[float | None, int]]:
        """Each policy's mean return over its last return_window episodes (None before the first) and the
        number of its episodes ended in this attempt."""
        return {
            name: (_mean(list(window)), ended)
            for name, window, ended in zip(self.policies, self.policy_returns, self.policy_episodes)
        }

    def best_policy(self) -> tuple[str, float] | None:
        """The policy with the highest mean return over a full window, and that mean (None while no window is
        full)."""
        full = [
            (name, cast(float, _mean(list(window))))  # (a full window)
            for name, window in zip(self.policies, self.policy_returns)
            if window and len(window) == window.maxlen
        ]
        return max(full, key=lambda item: item[1], default=None)

    def policies_summary(self, run_dir: RunDir) -> dict:
        """summary.json's "policies" (several policies): each one's mean return of its last return_window
        episodes, trained version and checkpoint."""
        if not self.policies:
            return {}
        return {
            "policies": {
                name: {
                    "mean_return": _mean(list(window)),
                    "version": self.policy_version(name),
                    "checkpoint": str(run_dir.checkpoint_of(name)),
                }
                for name, window in zip(self.policies, self.policy_returns)
            }
        }

    def evaluation_summary(self) -> dict:
        """summary.json's "evaluation": the latest and the best round, every episode of each."""
        latest = self.evaluations[-1] if self.evaluations else None
        best = max(self.evaluations, key=lambda e: e["mean_return"], default=None)
        return {"evaluation": {"rounds": len(self.evaluations), "latest": latest, "best": best}}

    def _losses(self) -> dict[str, float]:
        """Each loss averaged over the trainers that report it (data-parallel trainers report alike); with
        several policies, each policy's under its name ("predator/policy_loss")."""
        out: dict[str, float] = {}
        for policy in self.graph.policies():
            reports = [
                self.latest[t.name]["losses"]
                for t in self.graph.trainers(policy)
                if self.latest.get(t.name, {}).get("losses")
            ]
            prefix = f"{policy}/" if policy else ""
            names = sorted({k for r in reports for k in r})
            out.update({prefix + k: cast(float, _mean([r[k] for r in reports if k in r])) for k in names})
        return out

    def _queue_depths(self) -> dict[str, int]:
        """Items waiting in each kind of queue, summed over the workers that have one."""
        depths: collections.Counter[str] = collections.Counter()
        for meta in self.latest.values():
            depths.update(meta.get("queues", {}))
        return dict(sorted(depths.items()))

    def _replay_ratio(self) -> float | None:
        """Transitions sampled per transition stored (runs with buffer workers; what max_replay_ratio caps).
        Both counters come from the buffers' own reports, so each report's pair is consistent."""
        stored = self.sum("transitions_stored")
        return self.sum("transitions_sampled") / stored if stored else None


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _counts(meta: dict) -> dict[str, float]:
    """The cumulative counters of one worker's report."""
    return {k: v for k, v in meta.items() if isinstance(v, (int, float)) and k not in NOT_COUNTS}
