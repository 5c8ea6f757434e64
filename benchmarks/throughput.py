"""Throughput harness: run an experiment for a fixed time in local mode and print what it achieved.

    python benchmarks/throughput.py experiments/cartpole_ppo.yaml --seconds 30 [--set KEY=VALUE ...]

Training throughput = env frames consumed by the trainer per second (Atari: agent steps x frame skip);
sampling throughput = env frames stepped by all actors per second. Both over the whole run (after
rendezvous) and over its steady part (metrics.csv rows after `--warmup` seconds). From the run's traces:
trainer busy fraction, inference batch sizes and latency, the policy workers' CPU per inference request (and
its forward-pass part; after the warmup), actor memory and start-up, the verdict.
The last line printed is JSON.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from launcher import local, runs
from srl_hpc import config
from srl_hpc.trace import analysis, reader


def measure(exp: config.Experiment, seconds: float, warmup: float = 5.0, run_dir: Path | None = None) -> dict:
    stop = dataclasses.replace(exp.stop, wall_time=seconds, target_return=None)  # env_frames: the lr horizon
    monitor = dataclasses.replace(exp.monitor, status_interval=min(5.0, seconds / 4))
    exp = config.replace(exp, stop=stop, monitor=monitor)
    run_dir = Path(run_dir or tempfile.mkdtemp(prefix=f"bench-{exp.name}-"))
    exp, run = runs.create(exp, run_dir / "run")
    run_dir = run.root
    log = io.StringIO()
    code = local.run(exp, run, out=log)
    if code != 0:
        raise SystemExit(f"benchmark run failed (exit {code}):\n{log.getvalue()}")
    summary = json.loads(run.summary.read_text())
    wall = summary["wall_time"]
    result = {"experiment": exp.name, "seconds": wall, "run_dir": str(run_dir),
              "training_fps": round(summary["frames_consumed"] / wall, 1),
              "sampling_fps": round(summary["env_frames"] / wall, 1),
              **_steady(run.metrics, warmup),
              "policy_version": summary["policy_version"], "frames_dropped": summary["frames_dropped"],
              "trace": exp.monitor.trace}
    if exp.monitor.trace:
        result.update(from_traces(run_dir, warmup))
    return result


def _steady(metrics: Path, warmup: float) -> dict:
    rows = [r for r in csv.DictReader(open(metrics)) if float(r["wall_time"]) > warmup]
    if len(rows) < 2:
        return {"steady_training_fps": None, "steady_sampling_fps": None}
    dt = float(rows[-1]["wall_time"]) - float(rows[0]["wall_time"])
    delta = lambda key: (int(rows[-1][key]) - int(rows[0][key])) / dt  # noqa: E731
    return {"steady_training_fps": round(delta("frames_consumed"), 1),
            "steady_sampling_fps": round(delta("env_frames"), 1)}


def from_traces(run_dir: Path, warmup: float) -> dict:
    run = reader.read_run(run_dir)
    s = analysis.summarize(run)
    updates = [w.table("train_step")["t"] for w in run.hosting("trainer") if len(w.table("train_step")["t"])]
    policy = analysis.policy_cost(run, float(updates[0][0]) + warmup, float(updates[0][-1])) if updates else {}
    actors = run.hosting("actor")
    rss = [float(np.max(w.table("heartbeat")["rss_mb"])) for w in actors if "rss_mb" in w.table("heartbeat")]
    startup = [float(w.table("startup")["seconds"][0]) for w in actors if len(w.table("startup").get("seconds", []))]
    busy = s["trainer_busy_fraction"]
    return {"trainer_busy_fraction": None if busy is None else round(busy, 3),
            "inference_batch_mean": s["batch_size"].get("mean"),
            "inference_latency_ms": {k: round(1000 * v, 3) for k, v in s["latency"]["inference_latency"].items()
                                     if k in ("p50", "p90", "p99") and v is not None},
            "policy_cpu_us_per_request": policy.get("cpu_us_per_request"),
            "policy_forward_us_per_request": policy.get("forward_us_per_request"),
            "actor_rss_mb_max": round(max(rss), 1) if rss else None,
            "actor_startup_s_max": round(max(startup), 2) if startup else None,
            "verdict": s["verdict"]["stage"]}


def table(rows: list[dict], label_key: str = "label") -> str:
    """A plain text table of the figures that matter, one row per measured configuration."""
    cols = [("training fps", "steady_training_fps"), ("sampling fps", "steady_sampling_fps"),
            ("trainer busy", "trainer_busy_fraction"), ("batch", "inference_batch_mean"),
            ("actor RSS MB", "actor_rss_mb_max"), ("verdict", "verdict")]
    width = max([len(str(r.get(label_key, r["experiment"]))) for r in rows] + [12])
    lines = [f"{'configuration':<{width}} " + " ".join(f"{c:>13}" for c, _ in cols)]
    for r in rows:
        cells = []
        for _, key in cols:
            v = r.get(key)
            cells.append(f"{v:>13,.1f}" if isinstance(v, float) and key != "trainer_busy_fraction"
                         else f"{v:>13.0%}" if key == "trainer_busy_fraction" and v is not None else f"{str(v):>13}")
        lines.append(f"{str(r.get(label_key, r['experiment'])):<{width}} " + " ".join(cells))
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("experiment", type=Path)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--warmup", type=float, default=5.0, help="seconds excluded from the steady-state figures")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--run-dir", type=Path, help="keep the run here (default: a temporary directory)")
    args = p.parse_args(argv)
    exp = config.load(args.experiment)
    if args.set:
        exp = config.with_overrides(exp, args.set)
    result = measure(exp, args.seconds, args.warmup, args.run_dir)
    result["overrides"] = args.set
    print(table([result]))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
