"""Ends an srun that outlives its job step, so that a finished run does not hold its nodes to the time limit.

Slurm 22.05 (Debian 12's) can leave srun hanging after a heterogeneous step launched with --mpi=pmix has
ended: each het group's launch thread in srun stops the PMIx abort agent without a lock, and when two
groups finish together both join the same thread; the second join never returns. Every worker has exited
and Slurm has ended the step, but srun waits forever, and with it the job script and the job (seen here
in 1 of about 10 two-policy MAPPO jobs with two CPU hogs beside them; gdb: srun's main thread waits in
slurm_step_launch_wait_finish -> pmixp_abort_agent_stop -> pthread_join). Later Slurm releases count the
agent's users under a lock.

The job script starts this beside srun (`python -m srl_hpc.srun_guard RUN SRUN_PID`; with slurm.layout: jobs
each group's job, with `--group GROUP`, and the guard also runs srl_hpc.group_watch, which cancels the job
once another group's has ended badly). Until the workers have met, it watches srun's reports of dead tasks
for the start-up barrier (srl_hpc.start_watch); then it
does nothing until the run has ended (the controller has written summary.json); if srun is still there a few seconds
later, it asks Slurm for the job's steps (one squeue every `interval` seconds, only then). While the
workers wind down their step is still there and the guard goes on waiting; once Slurm has twice said that
no step is left, it kills srun and exits 0: the job script then takes the run's own outcome as the job's.
It exits 1 when srun ends by itself, and at once, saying so, where it cannot ask: in a container image
without `squeue` (the job's status is then srun's, as when srun ends by itself).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from srl_hpc import config, group_watch, start_watch
from srl_hpc import graph as wiring
from srl_hpc.rundir import RunDir

GRACE = 5.0  # after the summary, before the first question: srun usually ends by itself within it
INTERVAL = 5.0  # between two questions to Slurm once the grace is over


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def hostnames(nodelist: str) -> list[str]:
    """A Slurm node list ('n[1-3],m7') as names; empty where scontrol cannot say (then no task is mapped)."""
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return []
    return out.stdout.split()


def steps_left(job_id: str) -> list[str]:
    """The job's srun steps Slurm still runs (the batch and extern steps are not srun's)."""
    out = subprocess.run(["squeue", "-h", "-s", "-j", job_id, "-o", "%i"], capture_output=True, text=True, check=True)
    return [step for step in out.stdout.split() if step.rpartition(".")[2].isdigit()]


def guard(run: RunDir, srun_pid: int, job_id: str, grace: float = GRACE, interval: float = INTERVAL) -> bool:
    """Until srun exits (False), or until it has been ended here, its step gone (True)."""
    ended_at: float | None
    next_question: float | None
    ended_at = next_question = None
    answers_without_step = 0
    while alive(srun_pid):
        time.sleep(1.0)
        now = time.monotonic()
        if ended_at is None:
            if run.summary.exists():
                ended_at, next_question = now, now + grace
            continue
        assert next_question is not None  # set with ended_at
        if now < next_question:
            continue
        next_question = now + interval
        try:
            left = steps_left(job_id)
        except (OSError, subprocess.CalledProcessError):  # Slurm did not answer: ask again later
            continue
        answers_without_step = 0 if left else answers_without_step + 1
        if answers_without_step >= 2 and alive(srun_pid):
            print(
                f"srun_guard: srun (pid {srun_pid}) still running {now - ended_at:.0f}s after the run ended, "
                f"and job {job_id} has no step left (a known Slurm 22.05 hang after a het step); ending it",
                flush=True,
            )
            os.kill(srun_pid, signal.SIGKILL)
            return True
    return False


def watched_tasks(
    graph: wiring.Graph, group: str | None, env: Mapping[str, str]
) -> tuple[list[str], list[tuple[list[str], int]]]:
    """The workers this guard's srun runs, by srun's task number, and the het components that number them (see
    start_watch.global_task). With slurm.layout: jobs (`group`) its srun runs that group's tasks only, numbered
    from 0: no components."""
    if group:
        return [w.name for w in graph.workers if w.group == group], []
    sizes = [len(members) for _, members in graph.groups()]
    return graph.names, start_watch.het_groups(sizes, env, hostnames)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m srl_hpc.srun_guard", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("srun_pid", type=int)
    parser.add_argument(
        "--group",
        help="slurm.layout: jobs: the group this job runs; its workers' start-up is "
        "watched, and this job is cancelled once another group's has ended badly",
    )
    parser.add_argument("--grace", type=float, default=GRACE, help=f"seconds after the summary (default {GRACE:.0f})")
    parser.add_argument("--interval", type=float, default=INTERVAL, help="seconds between squeue calls")
    args = parser.parse_args(argv)
    job_id = os.environ.get("SLURM_JOB_ID")
    if job_id is None:
        parser.error("SLURM_JOB_ID is not set: the guard runs inside a Slurm job script")
    run = RunDir(args.run_dir)
    can_guard = shutil.which("squeue") is not None
    if not can_guard:  # on stdout: the job's slurm-%j.out
        print(
            "srun_guard: cannot end a hung srun: `squeue` is not found here (not in the container image?); "
            "should srun hang after the run has ended, the job holds its nodes until scancel or its time limit"
            + (
                "; should another group's job end, this group's workers wait for the rendezvous' timeout"
                if args.group
                else ""
            ),
            flush=True,
        )
    srun_running = lambda: alive(args.srun_pid)  # noqa: E731
    siblings = None
    if args.group and can_guard:  # the jobs layout: the other groups' jobs, until the run or srun has ended
        siblings = threading.Thread(
            target=group_watch.watch, daemon=True, args=(run, job_id, args.group, srun_running, args.interval)
        )
        siblings.start()
    if not run.summary.exists():
        names, groups = watched_tasks(wiring.build(config.load(run.experiment)), args.group, os.environ)
        if start_watch.watch(run, names, run.slurm_output(job_id), srun_running, groups=groups):
            start_watch.end_srun_if_stuck(args.srun_pid, srun_running)
    if not can_guard:
        return 1
    ended_it = guard(run, args.srun_pid, job_id, args.grace, args.interval)
    if siblings is not None:
        siblings.join()  # ends with srun
    return 0 if ended_it else 1


if __name__ == "__main__":
    sys.exit(main())
