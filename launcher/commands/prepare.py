"""`srl-launch prepare EXPERIMENT.yaml`: a run directory ready to sbatch by hand."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from launcher import runs
from launcher.commands import common


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="srl-launch prepare",
        description="Write a run directory that is ready to run (its keys, the resolved "
        "experiment and job.sbatch) and print the sbatch command; submit nothing.",
    )
    p.add_argument("experiment", type=Path)
    common.add_overrides(p)
    p.add_argument("--run-dir", type=Path, help="where the run writes (default: runs/<name>-<time>)")
    return p


def main(argv) -> int:
    args = common.parse(parser(), argv)
    exp = common.checked_experiment(args)
    command = "srl-launch prepare " + " ".join(shlex.quote(a) for a in argv)
    if exp.slurm.layout == "jobs":
        raise common.UsageError(
            "prepare writes one job script to sbatch by hand; with slurm.layout: jobs a run is a "
            "job per group, which `srl-launch EXP --slurm` submits together and ties together "
            "(RUN/slurm.json): use that (--dry-run prints every group's script), or "
            "slurm.layout: hetjob"
        )
    run_dir, request = common.unsubmitted_request(exp, args, command)
    exp, run = runs.create(exp, run_dir)
    run.job_script.write_text(request.script)
    print(f"sbatch {shlex.quote(str(run.job_script))}")
    return 0
