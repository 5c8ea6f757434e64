"""Throughput harness: run an experiment for a fixed time in local mode and print what it achieved.

    python benchmarks/throughput.py experiments/cartpole_ppo.yaml --seconds 30 [--set KEY=VALUE ...]

Training throughput = env frames consumed by the trainer per second; sampling throughput = env frames
stepped by all actors per second. Both are reported over the whole run (after rendezvous) and over the
steady part (metrics.csv rows after the first `--warmup` seconds). The last line is JSON.
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

from launcher import config, local, rundir


def measure(exp: config.Experiment, seconds: float, warmup: float, run_dir: Path | None) -> dict:
    stop = dataclasses.replace(exp.stop, wall_time=seconds, target_return=None, env_frames=None)
    exp = config.replace(exp, stop=stop, monitor=dataclasses.replace(exp.monitor, status_interval=min(5.0, seconds / 4)))
    run_dir = run_dir or Path(tempfile.mkdtemp(prefix=f"bench-{exp.name}-"))
    exp, run_dir = rundir.create(exp, run_dir / "run")
    log = io.StringIO()
    code = local.run(exp, run_dir, out=log)
    if code != 0:
        raise SystemExit(f"benchmark run failed (exit {code}):\n{log.getvalue()}")
    summary = json.loads((run_dir / "summary.json").read_text())
    rows = list(csv.DictReader(open(run_dir / "metrics.csv")))
    steady = [r for r in rows if float(r["wall_time"]) > warmup]
    if len(steady) >= 2:
        first, last = steady[0], steady[-1]
        dt = float(last["wall_time"]) - float(first["wall_time"])
        steady_train = (int(last["frames_consumed"]) - int(first["frames_consumed"])) / dt
        steady_sample = (int(last["env_frames"]) - int(first["env_frames"])) / dt
    else:
        steady_train = steady_sample = None
    wall = summary["wall_time"]
    return {"experiment": exp.name, "seconds": wall, "run_dir": str(run_dir),
            "training_fps": round(summary["frames_consumed"] / wall, 1),
            "sampling_fps": round(summary["env_frames"] / wall, 1),
            "steady_training_fps": steady_train and round(steady_train, 1),
            "steady_sampling_fps": steady_sample and round(steady_sample, 1),
            "policy_version": summary["policy_version"], "frames_dropped": summary["frames_dropped"],
            "trace": exp.monitor.trace, "overrides": []}


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
    print(f"{result['experiment']}: training {result['training_fps']:,.0f} frames/s "
          f"(steady {result['steady_training_fps'] or 0:,.0f}), sampling {result['sampling_fps']:,.0f} frames/s "
          f"(steady {result['steady_sampling_fps'] or 0:,.0f}) over {result['seconds']:.1f} s", file=sys.stderr)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
