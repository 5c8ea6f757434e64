"""Submit to Slurm and follow a job: the thin side-effecting layer under plan and render.

`prepare` makes the request (plan, checked against the cluster when one answers, rendered script);
`--dry-run` prints it and `submit` sends that very request. A submitted run directory holds job.sbatch
(exactly what was submitted), experiment.yaml and slurm.json (job id, command). Job state comes from
squeue, which works on every cluster, and from sacct where accounting exists, all read through one
table of Slurm states; one question covers every job of a sweep, and a watched job is asked about
with backoff (`Polite`), as cluster admins expect of tools that poll.
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


def job_states(job_ids: list[str]) -> dict[str, tuple[str, str]]:
    """(run state from STATES, raw Slurm state) of each job, from one question to Slurm for all of them:
    one squeue (slurmctld keeps a job MinJobAge after it ends), then one sacct for the jobs squeue no
    longer knows (where accounting exists). A job neither knows is ("unknown", "UNKNOWN")."""
    ids = list(dict.fromkeys(job_ids))
    proc = _run(["squeue", "-h", "--states=all", "--array", "-j", ",".join(ids), "-o", "%i|%T"], check=False)
    raw = parse_states(proc.stdout, ids) if proc.returncode == 0 else {}  # exits 1 when it knows none of them
    missing = [i for i in ids if i not in raw]
    if missing and shutil.which("sacct") is not None:
        proc = _run(["sacct", "-n", "-X", "-P", "-j", ",".join(missing), "-o", "JobID,State"], check=False)
        if proc.returncode == 0:  # exits 1 where accounting is disabled
            raw.update(parse_states(proc.stdout, missing))
    return {i: combine(raw.get(i, [])) for i in ids}


def job_state(job_id: str) -> tuple[str, str]:
    return job_states([job_id])[job_id]


def parse_states(text: str, ids: list[str]) -> dict[str, list[str]]:
    """`ID|STATE` lines (squeue -o %i|%T, sacct -o JobID,State -P) -> the raw states of each asked id; a
    het job's components (123+0, 123+1) count for 123, an array task (123_4) for itself."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        slurm_id, _, state = line.strip().partition("|")
        for owner in (slurm_id, slurm_id.split("+", 1)[0]):
            if owner in ids and state:
                out.setdefault(owner, []).append(state)
                break
    return out


def combine(raw: list[str]) -> tuple[str, str]:
    """A het job's components may differ: the state that matters most ("CANCELLED by 0" is CANCELLED)."""
    if not raw:
        return "unknown", "UNKNOWN"
    states = [(STATES.get(s.split()[0].rstrip("+"), "unknown"), s) for s in raw]
    return min(states, key=lambda st: PRECEDENCE.index(st[0]))


class Polite:
    """When to ask Slurm next about a job being watched: at once, then after 1, 2, 4, 8 s and every
    `most` (15) s after that, so that a run followed for hours costs its scheduler one squeue a quarter
    minute. `due(hurry=True)` (the run has written its summary: the job is about to end) goes back to
    asking every second."""

    def __init__(self, first: float = 1.0, most: float = 15.0):
        self.first, self.most, self.gap, self.next = first, most, first, time.monotonic()

    def due(self, hurry: bool = False) -> bool:
        now = time.monotonic()
        if hurry:
            self.gap = self.first
            self.next = min(self.next, now + self.first)
        if now < self.next:
            return False
        self.next = now + self.gap
        self.gap = min(2 * self.gap, self.most)
        return True


def cancel(*job_ids: str) -> None:
    _run(["scancel", *job_ids])


def wait(job_id: str, timeout: float | None = None, on_poll=None, ending=None) -> str:
    """Until the job reaches a finished state (returned), asking Slurm as Polite says (ending(): the
    run says it is about to end). on_poll() runs every second (e.g. to stream a log)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    ask, state = Polite(), "unknown"
    while True:
        if on_poll:
            on_poll()
        if ask.due(hurry=bool(ending and ending())):
            state, _ = job_state(job_id)
            if state in FINISHED:
                return state
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} still {state} after {timeout:.0f}s")
        time.sleep(1.0)
