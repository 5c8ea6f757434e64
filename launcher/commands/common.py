"""What the subcommands of srl-launch share: the usage text, the experiment as the options make it, the
usage error."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from launcher import overrides, runs, slurm
from launcher.settings import add_profile_option, profile_files
from srl_hpc import config
from srl_hpc.config import spaces_check
from srl_hpc.config.loader import key_lines

USAGE = """\
srl-launch [run] EXPERIMENT.yaml [KEY=VALUE...] [options]  run every worker here (local mode); KEY=VALUE: --set
srl-launch EXPERIMENT.yaml --slurm [--follow]   submit one heterogeneous Slurm job
srl-launch EXPERIMENT.yaml --slurm --dry-run    print the sbatch script; submit nothing
srl-launch EXPERIMENT.yaml --slurm --seeds 1,2,3  a sweep: one submitit job array, one node per seed
srl-launch EXPERIMENT.yaml --sweep algorithm.lr=1e-3,3e-4 --seeds 1,2,3  a grid sweep (here, or with --slurm)
srl-launch prepare EXPERIMENT.yaml --run-dir R   write R (keys, experiment, R/job.sbatch) to sbatch by hand
srl-launch validate EXPERIMENT.yaml... [KEY=VALUE...]  check files (--seed, --set as for a run); run nothing
srl-launch doctor [EXPERIMENT.yaml] [--probe]  check this node before a first submission (--probe: a small test job)
srl-launch graph EXPERIMENT.yaml...         print the workers, their handlers and het groups, and the streams
srl-launch tune EXPERIMENT.yaml [--slurm] [--budget 600]   short measured runs choose placement, ring, threads...
srl-launch status RUN_DIR                   state, outcome, progress, failed workers of a run or sweep
srl-launch logs RUN_DIR [--worker actor/3] [-f]   a worker's log (default: the controller's)
srl-launch cancel RUN_DIR                   stop a run (scancel for Slurm runs; checkpoints are kept)
srl-launch resume RUN_DIR [--follow] [--set workers.actor.count=N]   continue a stopped run from its checkpoint
srl-launch resume RUN_DIR --after JOBID | --chain K   queue continuation job(s) (no requeue needed)
srl-launch enjoy RUN_DIR [--episodes N] [--video out.mp4] [--greedy] [--tag best | --version N]   watch it play
srl-launch enjoy RUN_DIR --against one-ply [--games 200]   a self-play game's policy against a fixed player
srl-launch params RUN_DIR [--policy P] [--tag NAME=VERSION] [--untag NAME]   a run's stored versions and tags
srl-launch --version                        the installed version
srl-launch COMMAND --help                   a command's options"""


class UsageError(ValueError):
    pass


def experiment(args: argparse.Namespace) -> config.Experiment:
    exp = config.load(args.experiment, profiles=profile_files(args.profile))
    if getattr(args, "seed", None) is not None:
        exp = config.replace(exp, seed=args.seed)
    if args.set:
        exp = config.with_overrides(exp, args.set)
    return exp


def parse(p: argparse.ArgumentParser, argv, many: bool = False) -> argparse.Namespace:
    """p's arguments, its KEY=VALUE words moved to args.set (launcher.overrides); the other positional words are
    the experiment files: one, or with `many` one or more."""
    args = p.parse_intermixed_args(argv)
    files = overrides.take(args, [*(args.experiments if many else [args.experiment]), *args.overrides])
    if not files:
        raise UsageError("no experiment file given (a KEY=VALUE word overrides a field; it is not a file)")
    if many:
        args.experiments = files
    elif len(files) > 1:
        raise UsageError(
            f"{str(files[1])!r} is neither KEY=VALUE nor an option ({p.prog} takes one experiment file: {files[0]})"
        )
    else:
        args.experiment = files[0]
    return args


def checked_experiment(args: argparse.Namespace) -> config.Experiment:
    """_experiment, then the env's spaces against the algorithm (one throw-away env, no workers): what
    validate checks, before anything runs or is queued."""
    exp = experiment(args)
    spaces_check.check(exp, str(args.experiment), key_lines(args.experiment, profile_files(args.profile)), args.set)
    return exp


def add_overrides(p: argparse.ArgumentParser) -> None:
    """KEY=VALUE words, --seed and --set, meaning what they mean for a run."""
    overrides.add(p)
    p.add_argument("--seed", type=int, help="override the experiment's seed")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a field, as when running (repeatable)"
    )
    add_profile_option(p)


def parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise UsageError(f"--seeds must be comma-separated integers, got {text!r}") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise UsageError(f"--seeds must list distinct seeds, got {text!r}")
    return seeds


ENDED_BADLY = ("failed", "cancelled", "timeout")


def unsubmitted_request(exp: config.Experiment, args: argparse.Namespace, command: str) -> tuple[Path, slurm.Request]:
    """(run directory, the request `--slurm` would submit for it) without submitting it (`--dry-run`,
    `prepare`): checked against the cluster where one answers, else with a note on stderr saying so."""
    run_dir = runs.resolve(exp, args.run_dir)
    request = slurm.prepare(
        config.replace(exp, run_dir=str(run_dir)), run_dir, sys.executable, command, require_cluster=False
    )
    if request.checked:
        print(f"# note: not checked against a cluster ({request.checked})", file=sys.stderr)
    return run_dir, request
