"""A measured trial: run an experiment for a fixed time (here, or as a Slurm job) and read what it achieved.

Training throughput = env frames consumed by the trainer per second (Atari: agent steps x frame skip);
sampling throughput = env frames stepped by all actors per second. Both over the whole run (after rendezvous)
and over its steady part (metrics.csv rows after `warmup` seconds). From the run's traces: the trainer's busy
fraction, inference batch sizes and latency, the policy workers' CPU per request, actor memory and start-up,
and the verdict (the stage that bounds throughput). `srl-launch tune` and the benchmarks measure with this.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import json
import math
import statistics
import tempfile
from pathlib import Path

from launcher import local, runs
from launcher.plan import PlanError
from launcher.slurm import SlurmError
from srl_hpc import config
from srl_hpc.rundir import tail


class TrialFailed(RuntimeError):
    """The run did not finish its measured time (its log or state says why); `code`: its exit code (128+N: it
    was stopped by signal N)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def timed(exp: config.Experiment, seconds: float) -> config.Experiment:
    """`exp` stopped by time alone (env_frames stays: it is the lr-annealing horizon), reporting often enough."""
    stop = dataclasses.replace(exp.stop, wall_time=seconds, target_return=None, target_eval_return=None)
    monitor = dataclasses.replace(exp.monitor, status_interval=min(5.0, seconds / 4))
    return config.replace(exp, stop=stop, monitor=monitor)


def measure(
    exp: config.Experiment, seconds: float, warmup: float = 5.0, run_dir: Path | None = None, slurm: bool = False
) -> dict:
    """Run `exp` for `seconds` in `run_dir`/run (default: a temporary directory) and return its figures; with
    `slurm`, as one Slurm job (submitted, waited for). Raises TrialFailed with the log's end when it fails."""
    exp = timed(exp, seconds)
    run_dir = Path(run_dir or tempfile.mkdtemp(prefix=f"bench-{exp.name}-"))
    if slurm:
        from launcher import api

        # a short job asks for little time (the backfill scheduler starts it sooner) and is never requeued
        short = dataclasses.replace(exp.slurm, time=str(math.ceil(seconds / 60) + 10), requeue=None)
        try:
            handle = api.submit(config.replace(exp, slurm=short), slurm=True, run_dir=run_dir / "run")
        except (PlanError, SlurmError) as e:  # e.g. more nodes than the partition has: this setting cannot run
            raise TrialFailed(f"not submitted: {e}") from None
        try:
            state = handle.wait(timeout=seconds + 900)  # queueing and start-up on top of the measured time
        except TimeoutError as e:
            handle.cancel()
            raise TrialFailed(f"{e}; cancelled") from None
        run = handle.run
        if state != "completed":
            raise TrialFailed(
                f"Slurm job {handle.job_id} ended {state}: "
                f"{tail(run.log('controller'), 5) if run.log('controller').exists() else ''}"
            )
    else:
        exp, run = runs.create(exp, run_dir / "run")
        log = io.StringIO()
        code = local.run(exp, run, out=log)
        if code != 0:
            raise TrialFailed(f"exit {code}:\n{log.getvalue()[-3000:]}", code)
    summary = json.loads(run.summary.read_text())
    wall = summary["wall_time"]
    result = {
        "experiment": exp.name,
        "seconds": wall,
        "run_dir": str(run.root),
        "training_fps": round(summary["frames_consumed"] / wall, 1),
        "sampling_fps": round(summary["env_frames"] / wall, 1),
        **steady(run.metrics, warmup),
        "policy_version": summary["policy_version"],
        "frames_dropped": summary["frames_dropped"],
        "trace": exp.monitor.trace,
    }
    if exp.monitor.trace:
        result.update(from_traces(run.root, warmup))
    return result


def steady(metrics: Path, warmup: float) -> dict:
    """Training and sampling frames/s between the first metrics row after `warmup` and the last."""
    rows = [r for r in csv.DictReader(open(metrics)) if float(r["wall_time"]) > warmup]
    if len(rows) < 2:
        return {"steady_training_fps": None, "steady_sampling_fps": None}
    dt = float(rows[-1]["wall_time"]) - float(rows[0]["wall_time"])
    delta = lambda key: (int(rows[-1][key]) - int(rows[0][key])) / dt  # noqa: E731
    return {
        "steady_training_fps": round(delta("frames_consumed"), 1),
        "steady_sampling_fps": round(delta("env_frames"), 1),
    }


def from_traces(run_dir: Path, warmup: float) -> dict:
    import numpy as np  # (h5py and numpy: not for every srl-launch command's start)

    from srl_hpc.trace import analysis, reader

    run = reader.read_run(run_dir)
    s = analysis.summarize(run)
    updates = [w.table("train_step")["t"] for w in run.hosting("trainer") if len(w.table("train_step")["t"])]
    policy = analysis.policy_cost(run, float(updates[0][0]) + warmup, float(updates[0][-1])) if updates else {}
    actors = run.hosting("actor")
    rss = [float(np.max(w.table("heartbeat")["rss_mb"])) for w in actors if "rss_mb" in w.table("heartbeat")]
    startup = [float(w.table("startup")["seconds"][0]) for w in actors if len(w.table("startup").get("seconds", []))]
    busy = s["trainer_busy_fraction"]
    return {
        "update_training_fps": between_updates(run, warmup),
        "trainer_busy_fraction": None if busy is None else round(busy, 3),
        "inference_batch_mean": s["batch_size"].get("mean"),
        "inference_latency_ms": {
            k: round(1000 * v, 3)
            for k, v in s["latency"]["inference_latency"].items()
            if k in ("p50", "p90", "p99") and v is not None
        },
        "policy_cpu_us_per_request": policy.get("cpu_us_per_request"),
        "policy_forward_us_per_request": policy.get("forward_us_per_request"),
        "actor_rss_mb_max": round(max(rss), 1) if rss else None,
        "actor_startup_s_max": round(max(startup), 2) if startup else None,
        "verdict": s["verdict"]["stage"],
        "verdict_evidence": s["verdict"]["evidence"],
    }


def between_updates(run, warmup: float) -> float | None:
    """Training frames/s from the trainers' updates after `warmup`: each trainer's frames from its second update
    to its last, over the time between its first and last; summed over trainers. Unlike metrics rows, which
    count whole updates in fixed windows (Pong: 4,096 frames an update, ~14% of a 15 s window's), this has no
    rounding to an update. None with fewer than 3 updates after the warmup."""
    total = 0.0
    for w in run.hosting("trainer"):
        steps = w.table("train_step")
        if "frames" not in steps:  # no update at all (a trial whose start-up took its whole time)
            return None
        after = steps["t"] >= run.t0 + warmup
        t, frames = steps["t"][after], steps["frames"][after]
        if len(t) < 3 or t[-1] <= t[0]:
            return None
        total += float(frames[1:].sum()) / float(t[-1] - t[0])
    return round(total, 1) if total else None


def training_fps(result: dict) -> float:
    """The figure a trial is judged by: training frames/s between the updates after the warmup (traced runs),
    else over the steady metrics rows, else over the whole run."""
    for key in ("update_training_fps", "steady_training_fps"):
        if result.get(key) is not None:
            return result[key]
    return result["training_fps"]


def round_robin(
    candidates: list[tuple[str, config.Experiment]], seconds: float, warmup: float, repeats: int, out: Path, say=print
) -> list[dict]:
    """Each (label, experiment) measured `repeats` times, traced, one at a time in turns (drift in the machine's
    speed hits every one alike), after one trial of the first that is not counted: the first trial of an invocation
    runs slow here, and in turns it is always the first experiment's. Per experiment: the training
    frames/s of each trial (None where it failed), their median over the trials that ran, and each trial's verdict
    (or its failure)."""
    fps: list[list[float | None]] = [[] for _ in candidates]
    verdicts: list[list[str | None]] = [[] for _ in candidates]
    label, exp = candidates[0]
    say(f"[settling] {label} (not counted) ...")
    with contextlib.suppress(TrialFailed):  # its own trials will say why
        measure(config.with_overrides(exp, ["monitor.trace=true"]), seconds, warmup, out / "settling")
    for repeat in range(repeats):
        for i, (label, exp) in enumerate(candidates):
            say(f"[{repeat + 1}/{repeats}] {label} ...")
            try:
                r = measure(
                    config.with_overrides(exp, ["monitor.trace=true"]), seconds, warmup, out / f"{i:02d}-{repeat}"
                )
                fps[i].append(training_fps(r))
                verdicts[i].append(r.get("verdict"))
            except TrialFailed as e:
                fps[i].append(None)
                verdicts[i].append(f"failed: {str(e).strip().splitlines()[-1] if str(e).strip() else e.code}")
    rows = []
    for f, v in zip(fps, verdicts):
        ran = [x for x in f if x is not None]
        rows.append({"fps": f, "median_fps": statistics.median(ran) if ran else None, "verdicts": v})
    return rows


def table(rows: list[dict], label_key: str = "label") -> str:
    """A plain text table of the figures that matter, one row per measured configuration."""
    cols = [
        ("training fps", "steady_training_fps"),
        ("sampling fps", "steady_sampling_fps"),
        ("trainer busy", "trainer_busy_fraction"),
        ("batch", "inference_batch_mean"),
        ("actor RSS MB", "actor_rss_mb_max"),
        ("verdict", "verdict"),
    ]
    width = max([len(str(r.get(label_key, r["experiment"]))) for r in rows] + [12])
    lines = [f"{'configuration':<{width}} " + " ".join(f"{c:>13}" for c, _ in cols)]
    for r in rows:
        cells = []
        for _, key in cols:
            v = r.get(key)
            cells.append(
                f"{v:>13,.1f}"
                if isinstance(v, float) and key != "trainer_busy_fraction"
                else f"{v:>13.0%}"
                if key == "trainer_busy_fraction" and v is not None
                else f"{str(v):>13}"
            )
        lines.append(f"{str(r.get(label_key, r['experiment'])):<{width}} " + " ".join(cells))
    return "\n".join(lines)
