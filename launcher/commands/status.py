"""`srl-launch status RUN`: the state and outcome of a run or of every member of a sweep."""

from __future__ import annotations

import argparse

from launcher import local, slurm_jobs, status, sweep
from launcher.commands import common
from srl_hpc.rundir import RunDir


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="srl-launch status", description="State and outcome of a run or sweep.")
    p.add_argument("run_dir", type=RunDir)
    return p


def main(argv) -> int:
    args = parser().parse_args(argv)
    if args.run_dir.sweep.exists():
        members = sweep.members_of(args.run_dir)
        on_slurm = [m["job_id"] for m in members if "job_id" in m]
        states = slurm_jobs.job_states(on_slurm) if on_slurm else {}  # one squeue for the whole sweep
        sweeping = any(local.launcher_pid(RunDir(m["run_dir"])) for m in members if "job_id" not in m)
        codes = []
        for member in members:
            run = RunDir(member["run_dir"])
            if "job_id" in member:
                state, report = status.describe(run, states[member["job_id"]])
            elif run.summary.exists() or run.launcher_pid.exists():
                state, report = status.describe(run)
            else:
                state, report = (
                    ("pending", "waits for the members before it")
                    if sweeping
                    else ("not run", "the local sweep ended before this member started")
                )
            print(f"== {sweep.label(member)}: {state}\n{report}\n")
            codes.append(_state_code(state))
        return max(codes, default=0)
    state, report = status.describe(args.run_dir)
    print(f"state: {state}\n{report}")
    if state in common.ENDED_BADLY and args.run_dir.slurm.exists():  # no job of the run is live: the last speaks for it
        print(status.why_it_ended(args.run_dir))
    return _state_code(state)


def _state_code(state: str) -> int:
    """status's exit code: 1 for a run that ended without success, else 0 (succeeded, pending, running, unknown)."""
    return 1 if state in common.ENDED_BADLY else 0
