"""`srl-launch resume RUN`: continue a stopped run from its checkpoint, now or as queued continuations."""

from __future__ import annotations

import argparse
import shlex
import sys

from launcher import local, runs, slurm, slurm_jobs
from launcher.commands import common
from launcher.commands import run as running
from srl_hpc.rundir import RunDir


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="srl-launch resume",
        description="Continue a stopped run from its checkpoint, "
        "in the same run directory (counters, metrics.csv and stop conditions continue).",
    )
    p.add_argument("run_dir", type=RunDir)
    p.add_argument("--follow", action="store_true", help="a Slurm run: stream progress, exit with the run's result")
    p.add_argument(
        "--after",
        metavar="JOBID",
        help="a Slurm run: queue the continuation to start once job JOBID "
        "has ended, however it ended (--dependency=afterany); default with --chain: the run's job "
        "while it is pending or running",
    )
    p.add_argument(
        "--chain",
        type=int,
        metavar="K",
        help="a Slurm run: queue K continuation jobs, each after the "
        "one before (for clusters that forbid requeue); a run that has ended by itself is not continued",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change the run's size or shape for this attempt and the next (keys under workers, stop, monitor, "
        "slurm; e.g. workers.actor.count=64), written into its experiment.yaml",
    )
    return p


def main(argv) -> int:
    args = parser().parse_args(argv)
    run = args.run_dir
    if args.after is not None or args.chain is not None:
        if args.set:
            raise common.UsageError(
                "--set changes a run as it resumes now; queued continuations (--after, --chain) run the "
                "experiment as it is: resume with --set first, or without --after and --chain"
            )
        if args.chain is not None and args.chain < 1:
            raise common.UsageError(f"--chain must be >= 1, got {args.chain}")
        command = "srl-launch resume " + " ".join(shlex.quote(a) for a in argv)
        after, job_ids = runs.continue_later(run.root, sys.executable, command, args.after, args.chain or 1)
        print(f"continuing {run.root}: queued job {', '.join(job_ids)}" + (f", after job {after}" if after else ""))
        return running.follow(run, job_ids[-1]) if args.follow else 0
    if run.slurm.exists():
        job_id, info = slurm_jobs.run_job(run)
        if (slurm_jobs.live(info) or info.error) and slurm.group_jobs(run):
            raise common.UsageError(
                f"job {job_id} of {run.root} (slurm.layout: jobs) is {info.line()}; cancel the run "
                f"first: srl-launch cancel {run.root}"
            )
        if slurm_jobs.live(info) or info.error:
            raise common.UsageError(
                f"job {job_id} of {run.root} is {info.line()}; cancel it first, or queue the "
                f"continuation after it: --after {job_id}"
            )
    elif local.launcher_pid(run) is not None:
        raise common.UsageError(f"{run.root} is still running (local launcher pid {local.launcher_pid(run)})")
    exp, run = runs.reopen(run.root, args.set, check=None if run.slurm.exists() else local.check_fits)
    command = "srl-launch resume " + " ".join(shlex.quote(a) for a in argv)
    if not run.slurm.exists():
        print(f"resuming {run.root}: attempt {run.attempt}" + changed(args.set))
        code = local.run(exp, run)
        print(f"run directory: {run.root}")
        return code
    job_id = slurm.submit(slurm.prepare(exp, run.root, sys.executable, command), run, command)
    print(f"resuming {run.root}: attempt {run.attempt}{changed(args.set)}, submitted {running.jobs_text(run, job_id)}")
    return running.follow(run, job_id) if args.follow else 0


def changed(assignments: list[str]) -> str:
    return f", with {' '.join(assignments)}" if assignments else ""
