"""`python -m srl_hpc.rundir RUN --next-attempt | --outcome`: what a Slurm job script asks of its run directory."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from srl_hpc.rundir import RunDir


def main(argv=None) -> int:
    """What a Slurm job script asks of its run directory: `--next-attempt` (a requeued job, before its
    workers start) and `--outcome` (after them: the attempt's status from summary.json, or nothing)."""
    parser = argparse.ArgumentParser(prog="python -m srl_hpc.rundir")
    parser.add_argument("run_dir", type=Path)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--next-attempt", action="store_true")
    action.add_argument("--outcome", action="store_true")
    args = parser.parse_args(argv)
    run = RunDir(args.run_dir)
    if args.outcome:
        try:
            print(json.loads(run.summary.read_text())["status"])
        except (OSError, ValueError, KeyError):  # no summary: the controller never concluded
            print("")
        return 0
    print(f"{args.run_dir}: attempt {run.begin_next_attempt()}", flush=True)
    return 0


sys.exit(main())
