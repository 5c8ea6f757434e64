"""`srl-launch [run] EXPERIMENT.yaml`: run here, submit to Slurm (one job, or a sweep through submitit), or
print the request (--dry-run); --follow streams the job's progress."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from launcher import local, overrides, runs, slurm, slurm_jobs, status, sweep
from launcher.commands import common
from launcher.settings import add_profile_option
from srl_hpc import graph as wiring
from srl_hpc.rundir import RunDir


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="srl-launch", usage=common.USAGE, description="Launch an srl-hpc experiment.")
    p.add_argument("experiment", type=Path, help="experiment YAML file")
    overrides.add(p)
    p.add_argument("--slurm", action="store_true", help="submit to Slurm instead of running here")
    p.add_argument("--dry-run", action="store_true", help="with --slurm: print the sbatch script, submit nothing")
    p.add_argument("--follow", action="store_true", help="with --slurm: stream progress, exit with the run's result")
    p.add_argument("--seed", type=int, help="override the experiment's seed")
    p.add_argument("--seeds", help="comma-separated seeds: one run per seed (a submitit job array with --slurm)")
    p.add_argument(
        "--sweep",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="a sweep over these values of KEY (repeatable: every combination), times --seeds; each "
        "member is its own run directory, SWEEP/KEY=V/seed-N",
    )
    p.add_argument(
        "--sweep-set",
        action="append",
        default=[],
        metavar="'K1=V1 K2=V2'",
        help="one configuration of a sweep given as a list (repeatable), times --seeds",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a field, e.g. --set workers.actor.ring_size=16 (repeatable)",
    )
    p.add_argument("--run-dir", type=Path, help="where the run writes (default: runs/<name>-<time>)")
    add_profile_option(p)
    return p


def main(argv) -> int:
    args = common.parse(parser(), argv)
    exp = common.checked_experiment(args)
    command = "srl-launch " + " ".join(shlex.quote(a) for a in argv)
    members = _sweep_points(exp, args)
    if args.dry_run:
        if not args.slurm:
            raise common.UsageError("--dry-run needs --slurm (local mode has nothing to submit)")
        return _dry_run(exp, args, command)
    if members:
        return _sweep(exp, members, args, command)
    if not args.slurm:
        local.check_fits(exp)
        exp, run = runs.create(exp, args.run_dir)
        code = local.run(exp, run)
        print(f"run directory: {run.root}")
        return code
    run_dir = runs.resolve(exp, args.run_dir)
    request = slurm.prepare(exp, run_dir, sys.executable, command)
    exp, run = runs.create(exp, run_dir)
    job_id = slurm.submit(request, run, command)
    print(f"submitted {jobs_text(run, job_id)}; run directory {run.root}")
    print(
        f"  follow: srl-launch logs {run.root} -f    state: srl-launch status {run.root}    "
        f"stop: srl-launch cancel {run.root}"
    )
    if not args.follow:
        return 0
    return follow(run, job_id)


def _dry_run(exp, args, command) -> int:
    """The very request `--slurm` would submit (slurm.prepare), printed instead of sent."""
    if _sweep_points(exp, args):
        raise common.UsageError(
            "--dry-run shows the hetjob script; sweeps (--seeds, --sweep, slurm.sweep's grid, sets "
            "or seeds) go through submitit"
        )
    _, request = common.unsubmitted_request(exp, args, command)
    print(request.script, end="")
    return 0


def jobs_text(run: RunDir, job_id: str) -> str:
    """'job 12', or with slurm.layout: jobs 'jobs 12 (trainer), 13 (policy), 14 (actor)'."""
    groups = slurm.group_jobs(run)
    return f"jobs {', '.join(f'{j} ({g})' for g, j in groups.items())}" if groups else f"job {job_id}"


def follow(run: RunDir, job_id: str) -> int:
    log = run.log(wiring.CONTROLLER)
    position = 0

    def stream_progress() -> None:
        nonlocal position
        position = status.follow_file(log, position)

    slurm_jobs.wait(job_id, on_poll=stream_progress, run=run, say=print)  # print: pending reasons, state changes
    stream_progress()
    final, report = status.describe(run)
    print(report)
    groups = slurm.group_jobs(run)
    if final in common.ENDED_BADLY:
        print(status.why_it_ended(run) if groups else status.ended_badly(run, job_id))
    print(f"{jobs_text(run, job_id)} ended: {final}")
    return 0 if final == "completed" else 1


def _sweep_points(exp, args) -> list[sweep.Point]:
    """The members of a sweep (--seeds, --sweep, --sweep-set, or else the experiment's slurm.sweep grid, sets
    and seeds), each one's experiment built and so checked now; none for a single run."""
    grid, sets, seeds = sweep.from_experiment(exp.slurm.sweep)
    if args.seeds or args.sweep or args.sweep_set:
        grid, sets, seeds = args.sweep, args.sweep_set, common.parse_seeds(args.seeds) if args.seeds else []
    if not (grid or sets or seeds):
        return []
    try:
        members = sweep.points(sweep.configurations(grid, sets), seeds or [exp.seed])
    except sweep.SweepError as e:
        raise common.UsageError(str(e)) from None
    sweep.member_experiments(exp, members)
    return members


def _sweep(exp, members, args, command: str) -> int:
    sweep_dir = runs.resolve(exp, args.run_dir, suffix="-sweep")
    if not args.slurm:
        return _local_sweep(exp, members, sweep_dir, command)
    jobs = sweep.submit(exp, members, sweep_dir, command)
    print(f"submitted job array {jobs[0].job_id.split('_')[0]} ({len(jobs)} runs); sweep directory {sweep_dir}")
    if not args.follow:
        return 0
    failed = 0
    for p, job in zip(members, jobs):
        try:
            result = job.result()
            print(f"{p.label}: {result['status']}: {result['reason']} ({result['wall_time']}s)")
        except Exception as e:  # noqa: BLE001  submitit re-raises the member's error
            failed += 1
            print(f"{p.label}: failed: {str(e).strip().splitlines()[-1]}")
    return 1 if failed else 0


def _local_sweep(exp, members, sweep_dir: Path, command: str) -> int:
    """The members one after another on this machine; a signal (Ctrl-C, `srl-launch cancel SWEEP`) stops the
    member running and the sweep."""
    local.check_fits(exp)
    created = sweep.create_members(exp, members, sweep_dir)
    sweep.write_index(exp, sweep_dir, members, [run for _, run in created], command)
    codes = []
    for p, (member_exp, run) in zip(members, created):
        print(f"== {p.label}: {run.root}", flush=True)
        codes.append(local.run(member_exp, run))
        if codes[-1] >= 128:  # stopped by a signal: the rest of the sweep does not start
            print(f"sweep stopped at {p.label}; {len(members) - len(codes)} members not run")
            break
    print(f"sweep directory: {sweep_dir}")
    return max(codes)
