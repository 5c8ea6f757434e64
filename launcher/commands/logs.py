"""`srl-launch logs RUN [--worker W] [-f]`: one worker's log, printed or followed."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from launcher import status
from launcher.commands import common
from srl_hpc import graph as wiring
from srl_hpc.rundir import RunDir


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="srl-launch logs", description="Print (or follow) one worker's log.")
    p.add_argument("run_dir", type=RunDir)
    p.add_argument("--worker", default=wiring.CONTROLLER, help="e.g. actor/3, trainer/0 (default: controller/0)")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the run ends")
    return p


def main(argv) -> int:
    args = parser().parse_args(argv)
    log = args.run_dir.log(args.worker)
    if not args.follow:
        if not log.exists():
            raise common.UsageError(
                f"no log for {args.worker} in {args.run_dir.logs} (workers: "
                f"{', '.join(sorted(x.stem for x in args.run_dir.logs.glob('*.log')))})"
            )
        print(log.read_text(errors="replace"), end="")
        return 0
    status.tail_forever(log, stop=_finished(args.run_dir))
    return 0


def _finished(run: RunDir) -> Callable[[], bool]:
    """`logs -f`'s stop test (status.ended); the job's pending reason and state changes go to stderr."""
    return status.ended(run, say=lambda line: print(line, file=sys.stderr, flush=True))
