"""Throughput harness: run an experiment for a fixed time in local mode and print what it achieved.

    python benchmarks/throughput.py experiments/cartpole_ppo.yaml --seconds 30 [--set KEY=VALUE ...]

The figures are launcher/trials.py's (what they mean: its docstring).
The last line printed is JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from launcher import trials
from launcher.trials import from_traces, table  # noqa: F401  (the other benchmarks import them from here)
from srl_hpc import config


def measure(exp: config.Experiment, seconds: float, warmup: float = 5.0, run_dir: Path | None = None) -> dict:
    """launcher.trials.measure, exiting with the run's log when the run fails."""
    try:
        return trials.measure(exp, seconds, warmup, run_dir)
    except trials.TrialFailed as e:
        raise SystemExit(f"benchmark run failed ({e})") from None


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
