"""Submit to Slurm and follow a job: the thin side-effecting layer under plan and render.

`prepare` makes the request (plan, checked against the cluster when one answers, rendered script);
`--dry-run` prints it and `submit` sends that very request. A submitted run directory holds job.sbatch
(exactly what was submitted), experiment.yaml and slurm.json (job id, command). Job state comes from squeue/scontrol, which work on every cluster, and
from sacct where accounting exists, all read through one table of Slurm states.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import time
from dataclasses import dataclass

from launcher import plan as planning
from launcher import render
from srl_hpc.rundir import RunDir

# Slurm job state -> what it means for a run. Finished states are the ones that never change again.
STATES = {
    "PENDING": "pending", "CONFIGURING": "pending", "REQUEUED": "pending", "REQUEUE_HOLD": "pending",
    "REQUEUE_FED": "pending", "RESV_DEL_HOLD": "pending", "SPECIAL_EXIT": "failed",
    "RUNNING": "running", "COMPLETING": "running", "STAGE_OUT": "running", "SIGNALING": "running",
    "SUSPENDED": "suspended", "STOPPED": "suspended", "RESIZING": "running",
    "COMPLETED": "completed",
    "FAILED": "failed", "NODE_FAIL": "failed", "BOOT_FAIL": "failed", "OUT_OF_MEMORY": "failed", "DEADLINE": "failed",
    "TIMEOUT": "timeout", "CANCELLED": "cancelled", "PREEMPTED": "cancelled", "REVOKED": "cancelled",
}
FINISHED = {"completed", "failed", "timeout", "cancelled"}
# a het job's components may differ: report the one that matters most
PRECEDENCE = ["failed", "timeout", "cancelled", "running", "suspended", "pending", "completed", "unknown"]


class SlurmError(RuntimeError):
    pass


def _run(cmd: list[str], check: bool = True) -> subprocess.CompletedProcess:
    if shutil.which(cmd[0]) is None:
        raise SlurmError(f"{cmd[0]} not found: is this a Slurm login node? (or start the local one: make slurm-up)")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise SlurmError(f"{' '.join(cmd)} failed (exit {proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def cluster_facts() -> planning.ClusterFacts:
    return planning.parse_sinfo(_run(["sinfo", "-h", "-N", "-o", "%N|%P|%c|%m|%G"]).stdout)


@dataclass(frozen=True)
class Request:
    plan: planning.Plan
    script: str
    checked: str | None  # why the plan was not checked against a cluster (None: it was, and it fits)


def prepare(exp, run_dir, python: str, command: str, require_cluster: bool = True) -> Request:
    """Plan, check against the cluster (raises PlanError naming what does not fit), render.
    Without a reachable Slurm: an error, or with require_cluster=False (a dry run) a note in `checked`."""
    job_plan = planning.make_plan(exp, str(run_dir), python)
    try:
        planning.check_fits(job_plan, cluster_facts())
        checked = None
    except SlurmError as e:
        if require_cluster:
            raise
        checked = str(e)
    return Request(job_plan, render.render(job_plan, command), checked)


def submit(request: Request, run: RunDir, command: str) -> str:
    """sbatch the prepared request's script, kept as RUN/job.sbatch. Returns the job id."""
    run.job_script.write_text(request.script)
    job_id = _run(["sbatch", "--parsable", str(run.job_script)]).stdout.strip().split(";")[0]
    run.slurm.write_text(json.dumps({"job_id": job_id, "command": command, "submitted": time.time()}))
    return job_id


def job_id_of(run: RunDir) -> str:
    try:
        return json.loads(run.slurm.read_text())["job_id"]
    except FileNotFoundError:
        raise SlurmError(f"{run.root} is not a submitted run (no slurm.json)") from None


def job_state(job_id: str) -> tuple[str, str]:
    """(run state from STATES, raw Slurm state). squeue first, then scontrol, then sacct."""
    raw = _squeue_states(job_id) or _scontrol_states(job_id) or _sacct_states(job_id)
    if not raw:
        return "unknown", "UNKNOWN"
    states = [(STATES.get(s.split()[0].rstrip("+"), "unknown"), s) for s in raw]
    return min(states, key=lambda st: PRECEDENCE.index(st[0]))


def _squeue_states(job_id: str) -> list[str]:
    proc = _run(["squeue", "-h", "--states=all", "-j", job_id, "-o", "%T"], check=False)
    return proc.stdout.split() if proc.returncode == 0 else []


def _scontrol_states(job_id: str) -> list[str]:
    proc = _run(["scontrol", "-o", "show", "job", job_id], check=False)
    if proc.returncode != 0:
        return []
    return [field.split("=", 1)[1] for line in proc.stdout.splitlines()
            for field in line.split() if field.startswith("JobState=")]


def _sacct_states(job_id: str) -> list[str]:
    if shutil.which("sacct") is None:
        return []
    proc = _run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State"], check=False)
    return proc.stdout.split() if proc.returncode == 0 else []  # exits 1 where accounting is disabled


def cancel(job_id: str) -> None:
    _run(["scancel", job_id])


def wait(job_id: str, timeout: float | None = None, poll: float = 1.0, on_poll=None) -> str:
    """Until the job reaches a finished state (returned). on_poll() runs every poll (e.g. to stream logs)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        state, _ = job_state(job_id)
        if on_poll:
            on_poll()
        if state in FINISHED:
            return state
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} still {state} after {timeout:.0f}s")
        time.sleep(poll)
