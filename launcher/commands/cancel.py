"""`srl-launch cancel RUN`: stop a run or a sweep, here or on Slurm; checkpoints are kept."""

from __future__ import annotations

import argparse
import os
import signal
from typing import cast

from launcher import local, slurm_jobs, sweep
from launcher.commands import common
from srl_hpc.rundir import RunDir


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="srl-launch cancel", description="Stop a run; checkpoints are kept.")
    p.add_argument("run_dir", type=RunDir)
    return p


def main(argv) -> int:
    args = parser().parse_args(argv)
    pid: int | None
    if args.run_dir.sweep.exists():
        members = sweep.members_of(args.run_dir)
        if all("job_id" in m for m in members):
            slurm_jobs.cancel(*(m["job_id"] for m in members))  # one scancel for the whole sweep
            print(f"cancelled the sweep's {len(members)} jobs")
            return 0
        # a local sweep runs its members in one launcher, one after another: stopping it stops the sweep
        pids = cast(set[int], {local.launcher_pid(RunDir(m["run_dir"])) for m in members} - {None})
        if not pids:
            raise common.UsageError(f"{args.run_dir.root} is a local sweep with no member running")
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        print(f"sent SIGTERM to the sweep's local launcher (pid {', '.join(map(str, sorted(pids)))})")
        return 0
    if args.run_dir.slurm.exists():
        job_ids = slurm_jobs.cancel_run(args.run_dir)  # with the continuations queued after it
        print(f"cancelled job {', '.join(job_ids)}")
        return 0
    pid = local.launcher_pid(args.run_dir)
    if pid is None:
        raise common.UsageError(f"{args.run_dir.root} has no running local launcher")
    os.kill(pid, signal.SIGTERM)
    print(f"sent SIGTERM to the local launcher (pid {pid})")
    return 0
