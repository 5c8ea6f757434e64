"""`srl-launch`: run an experiment locally or on Slurm, validate it, follow or stop a submitted run."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from launcher import config, local, rundir

USAGE = """\
srl-launch EXPERIMENT.yaml [--seed N] [--set KEY=VALUE]... [--run-dir DIR]
                                                          run every worker on this machine (local mode)
srl-launch validate EXPERIMENT.yaml                       check a file, run nothing
"""


def _run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="srl-launch", usage=USAGE, description="Launch an srl-hpc experiment.")
    p.add_argument("experiment", type=Path, help="experiment YAML file")
    p.add_argument("--seed", type=int, help="override the experiment's seed")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a field, e.g. --set workers.actor.ring_size=16 (repeatable)")
    p.add_argument("--run-dir", type=Path, help="where the run writes (default: runs/<name>-<time>)")
    return p


def cmd_validate(argv) -> int:
    p = argparse.ArgumentParser(prog="srl-launch validate", description="Check an experiment file; run nothing.")
    p.add_argument("experiment", type=Path)
    args = p.parse_args(argv)
    config.load(args.experiment)
    print(f"{args.experiment}: ok")
    return 0


def cmd_run(argv) -> int:
    args = _run_parser().parse_args(argv)
    exp = config.load(args.experiment)
    if args.seed is not None:
        exp = config.replace(exp, seed=args.seed)
    if args.set:
        exp = config.with_overrides(exp, args.set)
    exp, run_dir = rundir.create(exp, args.run_dir)
    code = local.run(exp, run_dir)
    print(f"run directory: {run_dir}")
    return code


COMMANDS = {"validate": cmd_validate}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE + "\n" + _run_parser().format_help().split("\n", 2)[2])
        return 0
    try:
        if argv[0] in COMMANDS:
            return COMMANDS[argv[0]](argv[1:])
        return cmd_run(argv)
    except config.ConfigError as e:
        print(f"srl-launch: {e}", file=sys.stderr)
        return 2
    except FileExistsError as e:
        print(f"srl-launch: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
