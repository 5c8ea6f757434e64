"""`srl-launch tune EXPERIMENT.yaml`: the options of a search over the throughput knobs (launcher.tune)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from launcher import local, runs, trials, tune, tune_knobs
from launcher.commands import common


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="srl-launch tune",
        description=(
            "Short measured runs (here, or each as a Slurm job with --slurm) choose the settings that change "
            "throughput but not the algorithm: placement, ring size, inference splits, actors and policy workers, "
            "max batch, torch threads, inference and trainer precision (bf16 rounds the forward passes; --skip "
            "them to keep fp32). The trace verdict of each trial (what bound it) decides "
            "which to try next. Writes the tuned experiment file, a comment on each changed key, and a table of "
            "every trial."
        ),
    )
    p.add_argument("experiment", type=Path)
    common.add_overrides(p)
    p.add_argument("--slurm", action="store_true", help="each trial a Slurm job, on the nodes the run will use")
    p.add_argument("--budget", type=float, default=600.0, help="seconds for the whole search (default 600)")
    p.add_argument("--seconds", type=float, default=20.0, help="each trial's measured run (default 20)")
    p.add_argument(
        "--warmup",
        type=float,
        default=5.0,
        help="seconds at a trial's start left out of its training frames/s (default 5)",
    )
    p.add_argument(
        "--keys",
        help="comma-separated knobs to search (default: all of them here; with --slurm, all "
        "but the process counts, workers.actor.count and workers.policy.count): " + ", ".join(tune_knobs.BY_KEY),
    )
    p.add_argument(
        "--skip",
        help="comma-separated knobs not to search (e.g. workers.policy.precision,"
        "workers.trainer.precision: fp32 arithmetic throughout)",
    )
    p.add_argument(
        "--min-gain",
        type=float,
        default=0.05,
        help="how much faster than the best a setting must be, by the mean of its two trials against "
        "the best's trial measured between them, to become the best; a knob's fastest value is "
        "checked so when its trial comes within this of the best (default 0.05: 5 percent)",
    )
    p.add_argument("--dir", type=Path, help="where the trials write (default: runs/<name>-tune-<time>)")
    p.add_argument(
        "-o",
        "--output",
        type=Path,
        help="the tuned experiment file (default: beside the experiment, EXPERIMENT.tuned.yaml; never overwritten)",
    )
    return p


def main(argv) -> int:
    args = common.parse(parser(), argv)
    exp = common.checked_experiment(args)
    default = tune_knobs.SLURM_KEYS if args.slurm else tuple(tune_knobs.BY_KEY)
    keys = _knobs(args.keys, "--keys") if args.keys else default
    skip = _knobs(args.skip, "--skip") if args.skip else ()
    keys = tuple(k for k in keys if k not in skip)
    if not keys:
        raise common.UsageError("--keys and --skip leave no knob to search")
    if args.seconds <= args.warmup or args.budget < 3 * args.seconds:
        raise common.UsageError(
            f"--seconds ({args.seconds:g}) must exceed --warmup ({args.warmup:g}), and --budget "
            f"({args.budget:g}) hold at least 3 trials"
        )
    output = args.output or args.experiment.with_suffix(".tuned.yaml")
    if output.exists():
        raise FileExistsError(f"{output} exists; move it away or choose another --output")
    if not args.slurm:
        local.check_fits(exp)
    tune_dir = runs.resolve(exp, args.dir, suffix="-tune")
    if tune_dir.exists() and any(tune_dir.iterdir()):
        raise FileExistsError(f"{tune_dir} is not empty; choose another --dir")
    try:
        tune.tune(
            exp,
            args.experiment,
            tune_dir,
            output,
            keys=keys,
            seconds=args.seconds,
            warmup=args.warmup,
            budget=args.budget,
            min_gain=args.min_gain,
            slurm=args.slurm,
            given=args.set,
        )
    except trials.TrialFailed as e:
        print(f"srl-launch tune: {e}", file=sys.stderr)
        return e.code if e.code >= 128 else 1
    except KeyboardInterrupt:
        print(f"srl-launch tune: interrupted; each trial's run directory is in {tune_dir}", file=sys.stderr)
        return 130
    return 0


def _knobs(words: str, option: str) -> tuple[str, ...]:
    """A comma-separated list of tune's knobs, each checked."""
    keys = tuple(k.strip() for k in words.split(",") if k.strip())
    unknown = [k for k in keys if k not in tune_knobs.BY_KEY]
    if unknown or not keys:
        raise common.UsageError(
            f"{option}: {', '.join(unknown) or 'none given'} not among the knobs ({', '.join(tune_knobs.BY_KEY)})"
        )
    return keys
