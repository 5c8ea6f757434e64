"""Ends a group's job of a `slurm.layout: jobs` run once another group's job has ended badly.

In the jobs layout each group of workers is an ordinary job of its own; the groups meet through files in the
run directory and depend on each other until the run ends. A group whose job is cancelled, fails or times out
(before it started, or while it ran) takes its workers away, and the others would wait for them at the
rendezvous until the barrier's timeout, or afterwards until the controller gives up on silent workers.

Each group's job script starts the srun guard beside its srun (`python -m srl_hpc.srun_guard RUN SRUN_PID
--group GROUP`), and the guard runs `watch`: it reads the other groups' job ids from RUN/slurm.json (srl-launch
writes it before it releases the held jobs), then asks squeue about them every `interval` seconds until the
run has ended (summary.json) or srun has (then once more). When one has ended badly it says so on its own job's
output (a line `srl-launch status` quotes) and cancels its own job: the workers get SIGTERM and wind down, the
trainer keeping its checkpoint. Only the standard library and squeue/scancel: it runs in the batch step, in the
workers' image with apptainer.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from srl_hpc.rundir import RunDir

INTERVAL = 5.0  # seconds between two questions to Slurm about the other groups' jobs
TIMEOUT = 60.0  # seconds squeue may take to answer
PREFIX = "group_watch:"  # starts each line it writes on its job's output
ENDING = f"{PREFIX} ending this job:"  # starts the line that says why it cancelled its job (`said`)
# Slurm job states in which a job has ended without its run (squeue %T)
ENDED_BADLY = {
    "CANCELLED",
    "FAILED",
    "NODE_FAIL",
    "BOOT_FAIL",
    "OUT_OF_MEMORY",
    "DEADLINE",
    "TIMEOUT",
    "PREEMPTED",
    "REVOKED",
    "SPECIAL_EXIT",
}


def others(record: dict, job_id: str) -> dict[str, str] | None:
    """The other groups' jobs (job id -> group) from slurm.json's record, or None when it does not list this job
    among its groups (a script submitted by hand, or a run resubmitted since)."""
    groups = record.get("groups", {})
    if job_id not in groups.values():
        return None
    return {job: group for group, job in groups.items() if job != job_id}


def first_ended_badly(squeue: str, jobs: dict[str, str]) -> tuple[str, str] | None:
    """(job id, state) of the first of `jobs` that squeue's `%i|%T` lines say ended badly, in group order."""
    states = dict(line.strip().split("|", 1) for line in squeue.splitlines() if "|" in line)
    return next(
        (
            (job, states[job].split()[0])
            for job in jobs
            if states.get(job, "").split()[:1] and states[job].split()[0] in ENDED_BADLY
        ),
        None,
    )


def said(output: Path) -> str | None:
    """Why the watch cancelled a job, from the job's output (without its prefix), or None."""
    try:
        lines = output.read_text(errors="replace").splitlines()
    except OSError:
        return None
    return next((line[len(ENDING) :].strip() for line in lines if line.startswith(ENDING)), None)


def watch(run: RunDir, job_id: str, group: str, srun_alive, interval: float = INTERVAL) -> str | None:
    """Until the run's summary exists: cancel this job once another group's has ended badly. Returns what it said
    when it did, else None. After srun has ended by itself it asks once more: this group's workers end on their own
    when another group's leave (the rendezvous, the controller), often before the next question, and a job that
    ended for another group's is cancelled for it too, not taken for a failure of its own."""
    jobs, next_question = None, time.monotonic() + interval
    while not run.summary.exists():
        running = srun_alive()
        if running:
            time.sleep(1.0)
            if time.monotonic() < next_question:
                continue
        next_question = time.monotonic() + interval
        if jobs is None:
            try:
                jobs = others(json.loads(run.slurm.read_text()), job_id)
            except (OSError, ValueError):
                if not running:
                    return None
                continue  # not yet written
            if jobs is None:
                print(
                    f"{PREFIX} {run.slurm} does not list job {job_id}: not watching the other groups' jobs", flush=True
                )
                return None
            if not jobs:
                return None
        try:
            out = subprocess.run(
                ["squeue", "-h", "--states=all", "-j", ",".join(jobs), "-o", "%i|%T"],
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
            ).stdout
        except (OSError, subprocess.TimeoutExpired):  # Slurm did not answer: ask again later
            out = ""
        ended = first_ended_badly(out, jobs)
        if ended is not None and not run.summary.exists():
            job, state = ended
            line = (
                f"group {jobs[job]}'s job {job} ended {state} before the run did; cancelling group {group}'s "
                f"job {job_id}"
            )
            print(f"{ENDING} {line}", flush=True)
            subprocess.run(["scancel", job_id], capture_output=True, timeout=TIMEOUT)
            return line
        if not running:
            return None
    return None
