"""What a run's traces say: throughput, latencies, where each worker's time went, and what bounds throughput.

Pure functions over the tables of trace.reader (dicts of numpy arrays); `summarize` puts them together
into one JSON-ready dict, which the CLI prints and the plots draw from. Durations are in seconds and
times are relative to the run's start (the earliest worker start), so sums of many unix times keep
their precision.

Every duration a worker records ends at its row's time "t" (the writer stamps the row after measuring),
so a row is an interval [t - duration, t]; a row with several consecutive phases (the trainer's wait,
compute, publish) is laid out backwards from t. ACTIVITIES lists those phases per task handler; a
worker's activities are those of the handlers the run's graph put in it (an IMPALA-style actor hosts the
policy handler too: its inline inference counts as inference, not as env stepping).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np

from srl_hpc.trace.accounting import frame_accounting
from srl_hpc.trace.learning import evaluation, population, ratings, returns_over_time
from srl_hpc.trace.reader import RunTrace, Table, WorkerTrace
from srl_hpc.trace.verdict import verdict

# handler -> (activity, table, duration field, fields recorded after it in the same row)
ACTIVITIES = {
    "actor": [
        ("stepping", "env_step", "step_seconds", ("request_seconds",)),
        ("waiting_inference", "env_step", "wait_seconds", ("step_seconds", "request_seconds")),
        ("sending", "segment", "send_wait", ()),
        ("waiting_leave", "leave", "wait_seconds", ()),
    ],
    "policy": [
        ("computing", "inference", "compute_seconds", ("reply_seconds",)),
        ("replying", "inference", "reply_seconds", ()),
        ("pulling_params", "param_pull", "seconds", ()),
    ],
    "trainer": [
        ("waiting", "train_step", "wait_seconds", ("compute_seconds", "publish_seconds")),
        ("computing", "train_step", "compute_seconds", ("publish_seconds",)),
        ("publishing", "train_step", "publish_seconds", ()),
    ],
    "buffer": [
        ("storing", "buffer_step", "store_seconds", ("priority_seconds", "sample_seconds")),
        ("updating_priorities", "buffer_step", "priority_seconds", ("sample_seconds",)),
        ("sampling", "buffer_step", "sample_seconds", ()),
    ],
}
ACTIVITY_LABELS = {
    "waiting_inference": "waiting on inference",
    "stepping": "stepping envs",
    "sending": "blocked sending samples",
    "waiting_leave": "waiting for leave to sample",
    "pulling_params": "loading weights",
    "computing": "computing",
    "replying": "replying",
    "waiting": "waiting for data",
    "publishing": "publishing weights",
    "storing": "storing transitions",
    "updating_priorities": "updating priorities",
    "sampling": "sampling batches",
    "other": "other",
}

# stage -> (label, handler, table, field)
STAGES = {
    "env_step": ("env step (one ring group)", "actor", "env_step", "step_seconds"),
    "inference_latency": ("inference latency at actor", "actor", "env_step", "inference_latency"),
    "policy_queue_wait": ("policy queue wait", "policy", "inference", "queue_wait"),
    "policy_compute": ("policy compute", "policy", "inference", "compute_seconds"),
    "policy_reply": ("policy reply", "policy", "inference", "reply_seconds"),
    "sample_send_wait": ("sample send wait", "actor", "segment", "send_wait"),
    "trainer_wait": ("trainer wait for data", "trainer", "train_step", "wait_seconds"),
    "trainer_compute": ("trainer compute", "trainer", "train_step", "compute_seconds"),
    "trainer_publish": ("trainer publish", "trainer", "train_step", "publish_seconds"),
    "param_pull": ("policy weight load", "policy", "param_pull", "seconds"),
}

# handler -> (unit, table, field counting units per row, the consecutive phases the row's units took)
THROUGHPUT = {
    "actor": ("env frames", "env_step", "envs", ("wait_seconds", "step_seconds", "request_seconds")),
    "policy": ("observations", "inference", "batch_size", ("compute_seconds", "reply_seconds")),
    "trainer": ("frames consumed", "train_step", "frames", ("wait_seconds", "compute_seconds", "publish_seconds")),
    "buffer": ("transitions stored", "segment", "transitions", ()),
}
KIND_LABELS = {"actor": "actors", "policy": "policy handlers", "trainer": "trainers", "buffer": "buffers"}


# ----------------------------------------------------------------------------------------------- basics


def percentiles(values) -> dict:
    """n, mean, p50, p90, p99, max of a sample; None values when it is empty."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if not len(v):
        return {"n": 0, "mean": None, "p50": None, "p90": None, "p99": None, "max": None}
    p50, p90, p99 = np.percentile(v, [50, 90, 99])
    return {
        "n": int(len(v)),
        "mean": float(v.mean()),
        "p50": float(p50),
        "p90": float(p90),
        "p99": float(p99),
        "max": float(v.max()),
    }


def histogram(values, exact_up_to: int = 16) -> list[dict]:
    """Counts of non-negative integers: one bucket per value up to `exact_up_to`, else power-of-two buckets."""
    v = np.asarray(values).astype(int)
    if not len(v):
        return []
    top = int(v.max())
    if top <= exact_up_to:
        edges = np.arange(top + 2)
    else:
        edges = np.concatenate([[0], 2 ** np.arange(int(np.log2(top)) + 2)])
    counts, _ = np.histogram(v, bins=edges)
    return [
        {"bucket": f"{lo}" if hi - lo == 1 else f"{lo}-{hi - 1}", "count": int(c)}
        for lo, hi, c in zip(edges[:-1], edges[1:], counts)
    ]


def intervals(
    table: Table, duration: str, after: tuple[str, ...] = (), t0: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the `duration` phase of every row, relative to t0."""
    if duration not in table or not len(table["t"]):
        return np.empty(0), np.empty(0)
    ends = table["t"] - t0 - sum((table[f] for f in after if f in table), np.zeros(len(table["t"])))
    return ends - table[duration], ends


def busy_time(starts, ends, edges, weights=None) -> np.ndarray:
    """Seconds of the intervals [starts, ends) falling in each bin [edges[i], edges[i+1]).

    With `weights`, each interval instead contributes its weight spread evenly over it (units per bin).
    B(x), the amount lying before x, is sum_{s<x} rate*(x - s) - sum_{e<x} rate*(x - e) with rate the
    weight per second (1 for plain time); evaluated with sorted cumulative sums, it is exact and fast.
    """
    edges = np.asarray(edges, dtype=float)
    starts, ends = np.asarray(starts, dtype=float), np.asarray(ends, dtype=float)
    if weights is None:
        rate = np.ones(len(starts))
    else:
        ends = np.maximum(ends, starts + 1e-6)  # a zero-length row still delivers its units
        rate = np.asarray(weights, dtype=float) / (ends - starts)

    def before(points: np.ndarray) -> np.ndarray:
        order = np.argsort(points)
        p, r = points[order], rate[order]
        k = np.searchsorted(p, edges)
        cum_r = np.concatenate([[0.0], np.cumsum(r)])
        cum_rp = np.concatenate([[0.0], np.cumsum(r * p)])
        return cum_r[k] * edges - cum_rp[k]

    return np.diff(before(starts) - before(ends))


def activities(worker: WorkerTrace, handler: str | None = None) -> list[tuple]:
    """The ACTIVITIES rows of one hosted handler, or of all the worker hosts."""
    return [a for h in ((handler,) if handler else worker.handlers) for a in ACTIVITIES.get(h, [])]


def span(worker: WorkerTrace, t0: float = 0.0, handler: str | None = None) -> tuple[float, float] | None:
    """From the start of the worker's (or one of its handlers') first recorded activity to the end of its last."""
    bounds = [intervals(worker.table(table), dur, after, t0) for _, table, dur, after in activities(worker, handler)]
    starts = np.concatenate([s for s, _ in bounds]) if bounds else np.empty(0)
    ends = np.concatenate([e for _, e in bounds]) if bounds else np.empty(0)
    if not len(starts):
        return None
    return float(starts.min()), float(ends.max())


def time_shares(worker: WorkerTrace, t0: float = 0.0, handler: str | None = None) -> dict[str, float] | None:
    """Fraction of the span spent in each activity of the worker (or of one hosted handler); 'other' is the
    rest (idle, polling, heartbeats). A handler with a thread of its own (SEED-style inference on the
    trainer) overlaps the others: ask per handler for shares that add up."""
    window = span(worker, t0, handler)
    if window is None or window[1] <= window[0]:
        return None
    shares = {}
    for activity, table, dur, after in activities(worker, handler):
        starts, ends = intervals(worker.table(table), dur, after, t0)
        shares[activity] = float(busy_time(starts, ends, window)[0]) / (window[1] - window[0])
    shares["other"] = max(0.0, 1.0 - sum(shares.values()))
    return shares


def activity_timeline(worker: WorkerTrace, edges, t0: float = 0.0) -> dict[str, np.ndarray]:
    """Per bin of `edges`, the fraction of the bin spent in each activity (for the timeline plot)."""
    width = np.diff(np.asarray(edges, dtype=float))
    out: dict[str, np.ndarray] = {}
    for activity, table, dur, after in activities(worker):
        starts, ends = intervals(worker.table(table), dur, after, t0)
        out[activity] = out.get(activity, 0.0) + busy_time(starts, ends, edges) / width
    return out


def rate_over_time(worker: WorkerTrace, handler: str, edges, t0: float = 0.0) -> np.ndarray:
    """A hosted handler's THROUGHPUT units per second in each bin, each row's units spread over the time it took."""
    _, table, field, durations = THROUGHPUT[handler]
    tab = worker.table(table)
    if field not in tab:
        return np.zeros(len(edges) - 1)
    ends = tab["t"] - t0
    starts = ends - sum(tab[f] for f in durations if f in tab)
    return busy_time(starts, ends, edges, tab[field]) / np.diff(edges)


def mean_shares(shares: Sequence[dict[str, float] | None]) -> dict[str, float] | None:
    shares = cast(list[dict[str, float]], [s for s in shares if s])
    return {k: float(np.mean([s[k] for s in shares])) for k in shares[0]} if shares else None


# ----------------------------------------------------------------------------------------------- the report


def throughput(run: RunTrace) -> dict:
    """Per task handler: units per second over the span of the workers hosting it, in total and per worker."""
    t0 = run.t0
    out = {}
    for kind, (unit, table, field, _) in THROUGHPUT.items():
        workers = run.hosting(kind)
        per_worker, total, lo, hi = {}, 0.0, np.inf, -np.inf
        for w in workers:
            window, tab = span(w, t0, kind), w.table(table)
            if window is None or field not in tab:
                continue
            units = float(tab[field].sum())
            per_worker[w.name] = units / max(window[1] - window[0], 1e-9)
            total += units
            lo, hi = min(lo, window[0]), max(hi, window[1])
        if per_worker:
            out[kind] = {
                "unit": unit,
                "workers": len(per_worker),
                "total": total,
                "per_second": total / max(hi - lo, 1e-9),
                "per_worker": per_worker,
            }
    return out


def rate(table, field: str | None, start: float, end: float) -> float:
    """Rows (or the sum of `field`) per second between two unix times."""
    inside = (table["t"] >= start) & (table["t"] <= end)
    total = inside.sum() if field is None else table[field][inside].sum()
    return float(total) / max(end - start, 1e-9)


def slope(table, field: str, start: float, end: float) -> float | None:
    """How fast a cumulative field grew between two unix times (None with fewer than two rows there)."""
    inside = (table["t"] >= start) & (table["t"] <= end)
    t, v = table["t"][inside], table[field][inside]
    return float((v[-1] - v[0]) / (t[-1] - t[0])) if len(t) >= 2 and t[-1] > t[0] else None


def policy_cost(run: RunTrace, start: float, end: float) -> dict:
    """What serving one inference request costs the policy workers, between two unix times: their CPU
    (heartbeats' cpu_seconds: receiving, batching, replying, forward passes) and the forward passes' share of
    it, in microseconds per request. Workers of the srl placement only: an actor or trainer hosting a policy
    handler spends its CPU on more than that."""
    cpu = requests = forward = 0.0
    for w in (w for w in run.hosting("policy") if w.kind == "policy"):
        cpu += slope(w.table("heartbeat"), "cpu_seconds", start, end) or 0.0
        requests += rate(w.table("inference"), "requests", start, end)
        forward += rate(w.table("inference"), "compute_seconds", start, end)
    per = (lambda x: round(x / requests * 1e6, 1)) if requests else (lambda x: None)  # noqa: E731
    return {
        "requests_per_s": round(requests, 1),
        "cpu_share": round(cpu, 4),
        "cpu_us_per_request": per(cpu),
        "forward_us_per_request": per(forward),
    }


def latencies(run: RunTrace) -> dict:
    """Percentiles of every stage's duration, all workers of its kind pooled."""
    out = {}
    for stage, (label, kind, table, field) in STAGES.items():
        out[stage] = {"label": label, **percentiles(run.pooled(kind, table, field))}
    return out


def batch_sizes(run: RunTrace) -> dict:
    """Observations per inference batch: percentiles and a histogram."""
    sizes = run.pooled("policy", "inference", "batch_size")
    return {**percentiles(sizes), "histogram": histogram(sizes)}


def policy_lag(run: RunTrace) -> dict:
    """Versions between the policy that produced a segment and the trainer that received it."""
    lags = run.pooled("trainer", "segment", "lag")
    dropped = run.pooled("trainer", "segment", "dropped")
    out = percentiles(lags)
    out["segments"] = int(len(lags))
    out["dropped"] = int(dropped.sum()) if len(dropped) else 0
    out["histogram"] = histogram(lags)
    return out


def summarize(run: RunTrace) -> dict:
    """Everything srl-trace reports about one run, as plain JSON-ready data."""
    t0 = run.t0
    shares = {w.name: time_shares(w, t0) for w in run.workers if activities(w)}
    by_kind = {kind: mean_shares([time_shares(w, t0, kind) for w in run.hosting(kind)]) for kind in ACTIVITIES}
    inline = [time_shares(w, t0, "policy") for w in run.hosting("actor") if "policy" in w.handlers]
    if by_kind["actor"] and inline:  # IMPALA-style: the actors' own inference
        by_kind["actor"]["inference_inline"] = float(np.mean([s["computing"] if s else 0.0 for s in inline]))
    lat = latencies(run)
    lag = policy_lag(run)
    service = [lat[s]["p50"] for s in ("policy_queue_wait", "policy_compute", "policy_reply")]
    extra = {
        "dropped_fraction": lag["dropped"] / lag["segments"] if lag["segments"] else 0.0,
        "inference_latency": lat["inference_latency"]["p50"],
        "policy_service": sum(service) if None not in service else None,
    }
    rates = throughput(run)
    extra["sample_fps"] = rates.get("actor", {}).get("per_second")
    extra["train_fps"] = rates.get("trainer", {}).get("per_second")
    found = verdict(by_kind["actor"], by_kind["policy"], by_kind["trainer"], extra)
    ends = [float(tab["t"].max()) - t0 for w in run.workers for tab in w.tables.values() if len(tab["t"])]
    summary = run.meta.get("summary", {})
    return {
        "run_dir": str(run.run_dir),
        "experiment": run.meta.get("experiment"),
        "status": summary.get("status"),
        "reason": summary.get("reason"),
        "no_final_report": summary.get("no_final_report", []),  # workers that died: traces end at their last flush
        "traced_seconds": max(ends) if ends else 0.0,
        "attempts": max((w.attempts for w in run.workers), default=1),  # a resumed run's spans hold the gaps
        "restarts": {w.name: w.restarts for w in run.workers if w.restarts},  # replaced workers, read as one each
        "workers": [
            {
                "name": w.name,
                "policy": w.policy,
                "file": w.path.name,
                "host": w.attrs.get("host"),
                "pid": w.attrs.get("pid"),
                "rows": {name: int(len(tab["t"])) for name, tab in w.tables.items()},
                "notes": w.notes,
            }
            for w in run.workers
        ],
        "problems": [{"file": p.path.name, "reason": p.reason} for p in run.problems],
        "throughput": rates,
        "frames": frame_accounting(run),
        "time_shares": {"by_kind": by_kind, "by_worker": shares},
        "trainer_busy_fraction": (
            by_kind["trainer"]["computing"] + by_kind["trainer"]["publishing"] if by_kind["trainer"] else None
        ),
        "latency": lat,
        "batch_size": batch_sizes(run),
        "policy_lag": lag,
        "returns": returns_over_time(run),
        "returns_by_policy": {name: returns_over_time(run, policy=i) for i, name in enumerate(run.policies)},
        "evaluation": evaluation(run),
        "ratings": ratings(run),
        "population": population(run),
        "verdict": {"stage": found.stage, "evidence": found.evidence},
    }
