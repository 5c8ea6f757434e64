"""Submit to Slurm and follow a job: the thin side-effecting layer under plan and render.

`prepare` makes the request (plan, checked against the cluster when one answers, rendered script); `--dry-run`
prints it and `submit` sends that very request. A submitted run directory holds job.sbatch (exactly what was
submitted), experiment.yaml and slurm.json (job id, command, and the continuations `resume --after/--chain`
queued after it). With `slurm.layout: jobs` it holds job-<group>.sbatch per group instead, and slurm.json's
"groups" maps each group to its job (its "job_id" is the first group's: the controller's); the run's jobs are
then followed, cancelled and reported together. Job state comes from squeue, which works on every cluster, and
from sacct where accounting exists, all read through one table of Slurm states; one question covers every job
of a sweep or of a chain, and a watched job is asked about with backoff (`Polite`), as cluster admins expect
of tools that poll: at most once a minute while it is pending. Every Slurm command gets `TIMEOUT` seconds to
answer; one that does not is a SlurmError naming it (slurmctld not answering), not a hang.
"""
from __future__ import annotations

import dataclasses
import json
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple

from launcher import accounting, render
from launcher import mounts as mounts_of
from launcher import plan as planning
from srl_hpc.rundir import RunDir

TIMEOUT = 60.0  # seconds any Slurm command (sbatch, squeue, sacct, scancel, sinfo) may take to answer
PENDING_POLL = 60.0  # a pending job is asked about at most this often
FAST_POLLS = 10  # once the run says it is ending: this many looks a second apart, then backoff again
LOST_AFTER = 600.0  # a job neither squeue nor sacct has known for this long (and no summary): stop watching

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
# a run's summary.json status -> the run state it stands for (when Slurm no longer knows the job)
OUTCOMES = {"succeeded": "completed", "failed": "failed", "cancelled": "cancelled"}
NO_TIME = {"", "N/A", "Unknown", "None", "(null)"}  # squeue %S when Slurm has no start time
NODE_LOCAL = ("/tmp", "/dev/shm")  # directories each node of a cluster has its own of


class SlurmError(RuntimeError):
    pass


class SlurmRefused(SlurmError):
    """A Slurm command answered with an error (sbatch refused the job, ...), as opposed to not answering."""


def _run(cmd: list[str], check: bool = True) -> subprocess.CompletedProcess:
    if shutil.which(cmd[0]) is None:
        raise SlurmError(f"{cmd[0]} not found: is this a Slurm login node? (or start the local one: make slurm-up)")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        raise SlurmError(no_answer(cmd, TIMEOUT)) from None
    if check and proc.returncode != 0:
        output = proc.stderr.strip() or proc.stdout.strip()
        raise SlurmRefused(f"{' '.join(cmd)} failed (exit {proc.returncode}): {output}")
    return proc


def no_answer(cmd: list[str], seconds: float) -> str:
    """What a Slurm command that did not answer in time means, and what it may have done anyway."""
    text = (f"{cmd[0]} did not answer within {seconds:g} s: slurmctld is not answering (busy or down; "
            f"`scontrol ping` says which) [{shlex.join(cmd)}]")
    if cmd[0] == "sbatch":
        text += "; the job may still have been submitted: look with `squeue --me` before submitting again"
    elif cmd[0] == "scancel":
        text += "; the job may or may not have been cancelled: look with `squeue --me`"
    return text


def mpi_plugins() -> list[str]:
    """The MPI plugins this cluster's srun has (`srun --mpi=list`: one per indented line, then the versions
    of pmix, e.g. pmix_v4)."""
    out = _run(["srun", "--mpi=list"]).stdout
    names = [line.strip() for line in out.splitlines() if line.startswith(("\t", " ")) and line.strip()]
    versions = [v.strip() for line in out.splitlines() if "versions available:" in line
                for v in line.split(":", 1)[1].split(",")]
    return names + [v for v in versions if v]


def check_mpi_plugin(mpi: str) -> None:
    """slurm.mpi must be a plugin srun has ('none' always is)."""
    plugins = mpi_plugins()
    if mpi not in plugins:
        raise SlurmError(f"slurm.mpi is {mpi!r}, but srun has no MPI plugin {mpi!r} here (it has: "
                         f"{', '.join(plugins)}); choose one of them, or none for a rendezvous through files")


def cluster_facts() -> planning.ClusterFacts:
    return planning.parse_sinfo(_run(["sinfo", "-h", "-N", "-o", "%N|%P|%c|%m|%G"]).stdout)


def cluster_config() -> dict[str, str]:
    """`scontrol show config` as {key: value}; {} where it cannot be read (nothing is then checked by it)."""
    try:
        proc = _run(["scontrol", "show", "config"], check=False)
    except SlurmError:
        return {}
    return accounting.parse_config(proc.stdout) if proc.returncode == 0 else {}


def _answer(cmd: list[str]) -> str | None:
    """A Slurm command's output, or None when it failed or did not answer (accounting.read_limits)."""
    try:
        proc = _run(cmd, check=False)
    except SlurmError:
        return None
    return proc.stdout if proc.returncode == 0 else None


HETJOB_HINT = ("if this cluster does not take heterogeneous jobs, set slurm.layout: jobs (one ordinary job per "
               "group, the workers meeting through files)")


def check_het_steps(settings: dict[str, str]) -> None:
    """The hetjob layout runs one srun over every group: refused where the cluster disables such steps."""
    if accounting.het_steps_disabled(settings):
        raise planning.PlanError([
            f"this cluster disables job steps that span a het job's components (scontrol show config: "
            f"SchedulerParameters={settings['SchedulerParameters']} has disable_hetero_steps), and slurm.layout: "
            f"hetjob runs one srun over every group. Set slurm.layout: jobs (one ordinary job per group, the "
            f"workers meeting through files)"])


def check_limits(plan: planning.Plan, settings: dict[str, str]) -> None:
    """Refuse a run whose jobs the user's QOS or association limits would not take or not run at once."""
    limits = accounting.read_limits(settings, _answer)
    problems = accounting.limit_problems(plan, limits) if limits is not None else []
    if problems:
        raise planning.PlanError(problems)


@dataclass(frozen=True)
class Request:
    plan: planning.Plan
    script: str  # with slurm.layout: jobs, every group's script (render.every_script: what --dry-run prints)
    checked: str | None  # why the plan was not checked against a cluster (None: it was, and it fits)
    scripts: tuple[tuple[str, str], ...] = ()  # slurm.layout: jobs: (group, its script), in task order


def prepare(exp, run_dir, python: str, command: str, require_cluster: bool = True,
            continuation: bool = False) -> Request:
    """Plan, check against the cluster (raises PlanError naming what does not fit), render.
    Without a reachable Slurm: an error, or with require_cluster=False (a dry run) a note in `checked`.
    continuation: a job queued by `resume --after/--chain` (continuation_lines run first in it).
    Also refused before anything is submitted: a het job where the cluster disables het steps, and a run whose
    jobs the user's QOS or association limits would not take or not run at once (launcher.accounting)."""
    check_run_dir(run_dir)
    job_plan = planning.make_plan(exp, str(run_dir), python)
    if continuation and job_plan.layout == "jobs":
        raise planning.PlanError([
            "resume --after/--chain queues one continuation job, and a run of slurm.layout: jobs is a job per "
            "group: resume it with `srl-launch resume RUN` once its jobs have ended, or run it with slurm.layout: "
            "hetjob"])
    try:
        planning.check_fits(job_plan, cluster_facts())
        settings = cluster_config()
        if job_plan.layout == "hetjob":  # (the jobs layout's sruns use no MPI)
            check_het_steps(settings)
            check_mpi_plugin(job_plan.mpi)
        check_limits(job_plan, settings)
        checked = None
    except SlurmError as e:
        if require_cluster:
            raise
        checked = str(e)
    if job_plan.layout == "jobs":
        scripts = render.render_groups(job_plan, command)
        return Request(job_plan, render.every_script(scripts), checked, tuple(scripts))
    if continuation:  # after the user's setup lines, before the workers start
        job_plan = dataclasses.replace(job_plan, setup=job_plan.setup + continuation_lines(job_plan))
    return Request(job_plan, render.render(job_plan, command), checked)


def node_local_problem(run_dir: Path, mounts: str) -> str | None:
    """Why the nodes of a job would not see `run_dir` (symlinks already followed), or None: it is under a
    directory each node has its own of, or on a tmpfs (memory of the one machine). Such a job fails to
    launch (Slurm's JobLaunchFailure) before any of its output could say why. `mounts`: /proc/mounts' text."""
    local = next((top for top in NODE_LOCAL if run_dir == Path(top) or Path(top) in run_dir.parents), None)
    if local is not None:
        return f"under {local}, which each node has its own of"
    point, kind = mounts_of.filesystem_of(run_dir, mounts)
    return f"on a tmpfs (mounted on {point}), which lives in one machine's memory" if kind == "tmpfs" else None


def check_run_dir(run_dir, mounts_file: str = "/proc/mounts") -> None:
    """Refuse (PlanError) a run directory the job's nodes cannot see, before anything is submitted."""
    resolved = Path(run_dir).resolve()
    try:
        mounts = Path(mounts_file).read_text()
    except OSError:
        mounts = ""
    problem = node_local_problem(resolved, mounts)
    if problem:
        given = str(run_dir) if Path(run_dir).absolute() == resolved else f"{run_dir} (that is, {resolved})"
        raise planning.PlanError([f"run directory {given} is {problem}: the nodes cannot see it. Use --run-dir "
                                  "(or run_dir) on a filesystem every node mounts, e.g. under your home or a "
                                  "shared scratch"])


def continuation_lines(plan: planning.Plan) -> tuple[str, ...]:
    """Shell lines that make a queued continuation job the next attempt of its run directory when it starts
    (the job before it has ended by then; the trainer resumes from its checkpoint), or end it at once when
    the run has already ended by itself (succeeded or failed: nothing to continue, nothing trained again).
    A continuation that Slurm requeues is left to the script's own requeue lines (SLURM_RESTART_COUNT).
    Their python is the batch script's own (in the workers' apptainer image where there is one)."""
    python, run_dir = render.batch_words(plan), shlex.quote(plan.run_dir)
    return (
        "# a continuation (srl-launch resume --after/--chain): the next attempt of the run, from its checkpoint,",
        "# unless the run has already ended by itself",
        'if [ "${SLURM_RESTART_COUNT:-0}" -eq 0 ]; then',
        f'    case "$({python} -m srl_hpc.rundir {run_dir} --outcome)" in',
        '        succeeded) echo "the run has already succeeded: nothing to continue"; exit 0 ;;',
        '        failed) echo "the run has failed: not continued"; exit 1 ;;',
        "    esac",
        f"    {python} -m srl_hpc.rundir {run_dir} --next-attempt",
        "fi",
    )


def sbatch_command(script, after: str | None = None) -> list[str]:
    """The sbatch of a job script; after: a job it waits for (it starts once that one has ended, however)."""
    return ["sbatch", "--parsable", *([f"--dependency=afterany:{after}"] if after else []), str(script)]


def _sbatch(script, after: str | None = None, hold: bool = False) -> str:
    command = sbatch_command(script, after)
    return _run(command[:1] + ["--hold"] * hold + command[1:]).stdout.strip().split(";")[0]


def submit(request: Request, run: RunDir, command: str) -> str:
    """sbatch the prepared request's script, kept as RUN/job.sbatch (the jobs layout: submit_groups). Returns
    the job id (the jobs layout: the first group's, the controller's)."""
    if request.scripts:
        return submit_groups(request, run, command)[0]
    run.job_script.write_text(request.script)
    try:
        job_id = _sbatch(run.job_script)
    except SlurmRefused as e:
        raise SlurmRefused(f"{e}\n({HETJOB_HINT})") from None
    run.slurm.write_text(json.dumps({"job_id": job_id, "command": command, "submitted": time.time()}))
    return job_id


def submit_groups(request: Request, run: RunDir, command: str) -> list[str]:
    """The jobs layout: sbatch each group's script (kept as RUN/job-<group>.sbatch) held, record every job in
    RUN/slurm.json, then release them all at once, so that each group's watch finds its siblings listed there
    when it starts. A refused submission cancels the jobs already submitted and says Slurm's message. Returns
    the job ids in group order."""
    submitted: dict[str, str] = {}
    try:
        for group, script in request.scripts:
            path = run.root / render.script_name(group)
            path.write_text(script)
            submitted[group] = _sbatch(path, hold=True)
        _write_json(run.slurm, {"job_id": next(iter(submitted.values())), "command": command,
                                "submitted": time.time(), "layout": "jobs", "groups": submitted})
        _run(["scontrol", "release", ",".join(submitted.values())])
    except (SlurmError, OSError) as e:  # (OSError: RUN/slurm.json could not be written)
        if submitted:
            _run(["scancel", *submitted.values()], check=False)
        group = next((g for g, _ in request.scripts if g not in submitted), None)
        what = f"group {group}'s job was not submitted" if group else "the groups' jobs were not released"
        cancelled = ("; cancelled the jobs already submitted: " +
                     ", ".join(f"{j} ({g})" for g, j in submitted.items())) if submitted else ""
        raise type(e)(f"{what}: {e}{cancelled}") from None
    return list(submitted.values())


def _write_json(path: Path, data: dict) -> None:
    """Replaced whole: a group's watch may read it at any moment."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


def submit_chain(request: Request, run: RunDir, after: str | None, count: int) -> list[str]:
    """Queue `count` continuation jobs of a submitted run (prepare(continuation=True)'s request), the first
    after job `after` (None: at once), each next one after the one before (--dependency=afterany): for
    clusters that forbid requeue. Each is recorded in RUN/slurm.json's "chain" as soon as it is queued."""
    data = _record(run)
    run.job_script.write_text(request.script)
    queued: list[str] = []
    for _ in range(count):
        queued.append(_sbatch(run.job_script, queued[-1] if queued else after))
        data["chain"] = [*data.get("chain", []), queued[-1]]
        run.slurm.write_text(json.dumps(data))
    return queued


def _record(run: RunDir) -> dict:
    try:
        return json.loads(run.slurm.read_text())
    except FileNotFoundError:
        raise SlurmError(f"{run.root} is not a submitted run (no slurm.json)") from None


def job_id_of(run: RunDir) -> str:
    return _record(run)["job_id"]


def jobs_of(run: RunDir) -> list[str]:
    """Every job of a run, in order: the one submitted, then the continuations queued after it; with
    slurm.layout: jobs, its groups' jobs (which run side by side)."""
    data = _record(run)
    if data.get("groups"):
        return list(data["groups"].values())
    return [data["job_id"], *data.get("chain", [])]


def group_jobs(run: RunDir) -> dict[str, str]:
    """A slurm.layout: jobs run's job of each group, in task order; {} for a het job's run."""
    return dict(_record(run).get("groups", {}))


class JobInfo(NamedTuple):
    """Slurm's word on one job. Indexes 0 and 1 are the (state, raw state) pair callers have always had."""
    state: str  # what it means for the run (STATES), "unknown" when neither squeue nor sacct knows the job
    raw: str  # Slurm's own state
    reason: str = ""  # squeue %r: why a pending job waits (Priority, Resources, Dependency, JobHeldUser, ...)
    start: str = ""  # squeue %S: a pending job's expected start ("" when Slurm does not know)
    error: str = ""  # what went wrong asking, when squeue failed

    def line(self) -> str:
        """'PENDING (Priority), expected start 2026-12-03T10:00:00', 'RUNNING', 'UNKNOWN (squeue: ...)'"""
        if self.state == "pending":
            return f"{self.raw} {pending_text(self.reason, self.start)}"
        return f"{self.raw} ({self.error})" if self.error and self.state == "unknown" else self.raw


def pending_text(reason: str, start: str) -> str:
    """'(Priority), expected start 2026-12-03T10:00:00', or '... expected start unknown' when Slurm says N/A."""
    return (f"({reason})" if reason and reason != "None" else "(no reason given)") + \
        f", expected start {start if start not in NO_TIME else 'unknown'}"


def job_states(job_ids: list[str]) -> dict[str, JobInfo]:
    """Slurm's word on each job, from one question to Slurm for all of them: one squeue (slurmctld keeps a
    job MinJobAge after it ends), then one sacct for the jobs squeue no longer knows (where accounting
    exists). A job neither knows is ("unknown", "UNKNOWN")."""
    ids = list(dict.fromkeys(job_ids))
    proc = _run(["squeue", "-h", "--states=all", "--array", "-j", ",".join(ids), "-o", "%i|%T|%r|%S"], check=False)
    rows = parse_rows(proc.stdout, ids) if proc.returncode == 0 else {}
    # squeue exits 1 when it knows none of them ("Invalid job id"); anything else is worth saying
    error = "" if proc.returncode == 0 or "Invalid job id" in proc.stderr else \
        f"squeue: {proc.stderr.strip() or f'exit {proc.returncode}'}"
    missing = [i for i in ids if i not in rows]
    if missing and shutil.which("sacct") is not None:
        proc = _run(["sacct", "-n", "-X", "-P", "-j", ",".join(missing), "-o", "JobID,State"], check=False)
        if proc.returncode == 0:  # exits 1 where accounting is disabled
            rows.update(parse_rows(proc.stdout, missing))
    return {i: combine_info(rows.get(i, []), error) for i in ids}


def job_state(job_id: str) -> JobInfo:
    return job_states([job_id])[job_id]


def parse_rows(text: str, ids: list[str]) -> dict[str, list[list[str]]]:
    """`ID|STATE[|REASON|START]` lines (squeue -o %i|%T|%r|%S, sacct -o JobID,State -P) -> the fields after
    the id of each asked id; a het job's components (123+0, 123+1) count for 123, an array task (123_4)
    for itself."""
    out: dict[str, list[list[str]]] = {}
    for line in text.splitlines():
        slurm_id, *fields = line.strip().split("|")
        for owner in (slurm_id, slurm_id.split("+", 1)[0]):
            if owner in ids and fields and fields[0]:
                out.setdefault(owner, []).append(fields)
                break
    return out


def parse_states(text: str, ids: list[str]) -> dict[str, list[str]]:
    """The raw states of each asked id (parse_rows' first field)."""
    return {i: [row[0] for row in rows] for i, rows in parse_rows(text, ids).items()}


def combine(raw: list[str]) -> tuple[str, str]:
    """A het job's components may differ: the state that matters most ("CANCELLED by 0" is CANCELLED)."""
    if not raw:
        return "unknown", "UNKNOWN"
    states = [(STATES.get(s.split()[0].rstrip("+"), "unknown"), s) for s in raw]
    return min(states, key=lambda st: PRECEDENCE.index(st[0]))


def combine_info(rows: list[list[str]], error: str = "") -> JobInfo:
    """One JobInfo from a job's rows (one per het component): the state that matters most, the first
    reason Slurm gives, the latest expected start (the components start together)."""
    state, raw = combine([row[0] for row in rows])
    reasons = [row[1] for row in rows if len(row) > 1 and row[1] not in ("", "None")]
    starts = [row[2] for row in rows if len(row) > 2 and row[2] not in NO_TIME]
    return JobInfo(state, raw, reasons[0] if reasons else "", max(starts) if starts else "",
                   error if state == "unknown" else "")


class JobEnd(NamedTuple):
    """How a job (or one het component) ended, in `scontrol show job`'s words."""
    job: str  # 123, or 123+1 for a het job's component
    state: str  # JobState: FAILED, NODE_FAIL, TIMEOUT, ...
    reason: str  # Reason: JobLaunchFailure, NonZeroExitCode, TimeLimit, ... ("None" when Slurm gives none)
    exit_code: str  # ExitCode: the batch script's exit status:the signal that ended it


def parse_show_job(text: str) -> list[JobEnd]:
    """`scontrol show job` text (its indented lines, or -o's one line per job) -> one JobEnd per record (a
    het job shows one per component). A word without KEY= continues the value before it."""
    records: list[dict[str, str]] = []
    key = ""
    for word in text.split():
        name, sep, value = word.partition("=")
        if sep and name[:1].isalpha() and (records or name == "JobId"):
            if name == "JobId":
                records.append({})
            key = name
            records[-1][key] = value
        elif records:
            records[-1][key] += " " + word
    return [JobEnd(f"{r['HetJobId']}+{r['HetJobOffset']}" if "HetJobOffset" in r else r["JobId"],
                   r.get("JobState", "UNKNOWN"), r.get("Reason", "None"), r.get("ExitCode", "?")) for r in records]


def end_lines(ends: list[JobEnd]) -> list[str]:
    """One line per way the job's components ended ('Slurm: job 7+0, 7+1 FAILED, reason JobLaunchFailure,
    ExitCode 1:0 (exit status:signal)')."""
    jobs_by_end: dict[tuple[str, str, str], list[str]] = {}
    for end in ends:
        jobs_by_end.setdefault((end.state, end.reason, end.exit_code), []).append(end.job)
    return [f"Slurm: job {', '.join(jobs)} {state}, " + (f"reason {reason}" if reason != "None" else "no reason given")
            + f", ExitCode {code} (exit status:signal)" for (state, reason, code), jobs in jobs_by_end.items()]


def job_end(job_id: str) -> list[str]:
    """Slurm's reason and exit code for an ended job (end_lines), or why Slurm cannot give them: it keeps a
    job MinJobAge after its end."""
    try:
        proc = _run(["scontrol", "show", "job", job_id], check=False)
    except SlurmError as e:
        return [f"no word from Slurm on how job {job_id} ended: {e}"]
    ends = parse_show_job(proc.stdout) if proc.returncode == 0 else []
    if not ends:
        said = proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}"
        return [f"no word from Slurm on how job {job_id} ended (scontrol show job {job_id}: {said})"]
    return end_lines(ends)


def live(info: JobInfo) -> bool:
    """Slurm still has the job to run or running (not ended, and known)."""
    return info.state not in FINISHED and info.state != "unknown"


def current(job_ids: list[str], infos: dict[str, JobInfo], together: bool = False) -> tuple[str, JobInfo]:
    """Which of a run's jobs (jobs_of) speaks for it: the first still live (the ones after it wait for
    it), else the last. together (the jobs layout's groups, which run side by side): while any is live, the
    first pending (the run waits for it), else the first live; then the one whose end matters most (failed,
    timed out, cancelled, before completed: combine's order)."""
    if together:
        alive = [i for i in job_ids if live(infos[i])]
        if alive:
            speaker = next((i for i in alive if infos[i].state == "pending"), alive[0])
        else:
            speaker = min(job_ids, key=lambda i: PRECEDENCE.index(infos[i].state))
        return speaker, infos[speaker]
    for job_id in job_ids:
        if live(infos[job_id]):
            return job_id, infos[job_id]
    return job_ids[-1], infos[job_ids[-1]]


def run_job(run: RunDir) -> tuple[str, JobInfo]:
    """The run's current job and Slurm's word on it (one squeue for all of the run's jobs)."""
    ids = jobs_of(run)
    return current(ids, job_states(ids), together=bool(group_jobs(run)))


def groups_line(groups: dict[str, str], infos: dict[str, JobInfo]) -> str:
    """The jobs layout's groups in a line: 'waiting for group actor (job 12): pending, reason Priority, expected
    start unknown', or each group's state while none waits ('group trainer (job 10) running, ...')."""
    for group, job in groups.items():
        info = infos[job]
        if info.state == "pending":
            start = info.start if info.start not in NO_TIME else "unknown"
            reason = info.reason if info.reason and info.reason != "None" else "none given"
            return f"waiting for group {group} (job {job}): pending, reason {reason}, expected start {start}"
    return ", ".join(f"group {group} (job {job}) {infos[job].state}" for group, job in groups.items())


def outcome_of(run: RunDir) -> str | None:
    """The run state its summary.json stands for (completed, failed, cancelled), None without one."""
    try:
        return OUTCOMES.get(json.loads(run.summary.read_text()).get("status"))
    except (OSError, ValueError, AttributeError):
        return None


class Polite:
    """When to ask Slurm next about a job being watched: at once, then after 1, 2, 4, 8 s and every
    `most` (15) s after that, so that a run followed for hours costs its scheduler one squeue a quarter
    minute; a job heard to be pending (heard()) no sooner than `pending` (60) s after that look.
    `due(hurry=True)` (the run has written its summary: the job is about to end) gives `fast` (10) looks
    a second apart, even while pending, then the backoff again: a job that stays on (a requeue, a hang)
    is not asked about every second for long. The next hurry needs the summary to have gone first."""

    def __init__(self, first: float = 1.0, most: float = 15.0, pending: float | None = None,
                 fast: int | None = None):
        self.first, self.most = first, most
        self.pending = PENDING_POLL if pending is None else pending
        self.fast = FAST_POLLS if fast is None else fast
        self.gap, self.next = first, time.monotonic()
        self.asked = self.next
        self.fast_left: int | None = None  # None: not hurried since the summary last appeared

    def due(self, hurry: bool = False) -> bool:
        now = time.monotonic()
        if not hurry:
            self.fast_left = None
        elif self.fast_left is None:
            self.fast_left, self.gap = self.fast, self.first
            self.next = min(self.next, now + self.first)
        if now < self.next:
            return False
        self.asked = now
        if self.fast_left:
            self.fast_left -= 1
            if self.fast_left:  # more quick looks to come
                self.next = now + self.first
                return True
            self.gap = 2 * self.first  # the last quick one: the backoff resumes
        self.next = now + self.gap
        self.gap = min(2 * self.gap, self.most)
        return True

    def wake(self) -> None:
        """Something outside Slurm says the job has moved on (its output file appeared): ask at once."""
        self.next = min(self.next, time.monotonic())

    def heard(self, state: str) -> None:
        """The answer to the last look: a pending job waits a minute for the next (unless hurried)."""
        if state == "pending" and not self.fast_left:
            self.next = max(self.next, self.asked + self.pending)
            self.gap = self.first  # once it runs: 1, 2, 4, ... again


class Watch:
    """A run's jobs followed until they end. check() asks Slurm only when Polite says so and returns the
    final state once no job of the run is live: the last one's finished state, or when Slurm no longer
    knows it (it ended MinJobAge ago on a cluster without accounting; or squeue failed) the run's outcome
    from its summary (`outcome()`); without a summary, "unknown" once Slurm has not known it for
    LOST_AFTER seconds. say(line): told when the current job's state, pending reason or expected start
    changes (and when asking fails), one line each time. groups() (the jobs layout: group -> job, {} for a
    het job): the jobs run side by side, the run ends when none is live, and the lines name the groups."""

    def __init__(self, jobs: Callable[[], list[str]], ending: Callable[[], bool] | None = None,
                 outcome: Callable[[], str | None] | None = None, say: Callable[[str], None] | None = None,
                 ask: Polite | None = None, started: Callable[[str], bool] | None = None,
                 groups: Callable[[], dict[str, str]] | None = None):
        self.jobs, self.ending, self.outcome, self.say, self.started = jobs, ending, outcome, say, started
        self.groups = groups or dict
        self.ask = ask or Polite()
        self.state, self.told, self.unknown_since, self.job_id = "unknown", None, None, None

    def check(self) -> str | None:
        ending = bool(self.ending and self.ending())
        if self.state == "pending" and self.started and self.started(self.job_id):
            self.ask.wake()  # the job started within the minute a pending job waits: no need to wait on
        if not self.ask.due(hurry=ending):
            return None
        ids, groups = self.jobs(), self.groups()
        infos = job_states(ids)
        job_id, info = current(ids, infos, together=bool(groups))
        self.job_id = job_id
        self.ask.heard(info.state)
        self.state = info.state
        if groups and not info.error:
            self._say(groups_line(groups, infos) if live(info) else None)
        else:
            self._tell(job_id, info)
        if live(info):
            self.unknown_since = None
            return None
        if info.state in FINISHED:
            return info.state
        if ending:  # the run has concluded; Slurm no longer knows its job
            return (self.outcome and self.outcome()) or "unknown"
        if info.error:  # Slurm did not answer: ask again
            return None
        now = time.monotonic()
        self.unknown_since = self.unknown_since or now
        return "unknown" if now - self.unknown_since >= LOST_AFTER else None

    def _tell(self, job_id: str, info: JobInfo) -> None:
        if info.state == "pending":
            line = f"job {job_id} pending {pending_text(info.reason, info.start)}"
        elif live(info):
            line = f"job {job_id} {info.state}"
        elif info.error:
            line = f"job {job_id}: {info.error} (asking again)"
        else:
            return  # an end: the caller reports it
        self._say(line)

    def _say(self, line: str | None) -> None:
        if self.say and line and line != self.told:
            self.say(line)
        self.told = line or self.told


def cancel(*job_ids: str) -> None:
    _run(["scancel", *job_ids])


def cancel_run(run: RunDir) -> list[str]:
    """scancel a run's live jobs (its continuations too); returns their ids."""
    ids = jobs_of(run)
    infos = job_states(ids)
    targets = [i for i in ids if live(infos[i])] or [current(ids, infos)[0]]
    cancel(*targets)
    return targets


def wait(job_id: str, timeout: float | None = None, on_poll=None, ending=None, run: RunDir | None = None,
         say=None) -> str:
    """Until the job has ended (its finished state returned; see Watch), asking Slurm as Polite says
    (ending(): the run says it is about to end). With run: every job of the run (continuations too),
    ending when its summary exists, and the summary's outcome when Slurm no longer knows the job.
    on_poll() runs every second (e.g. to stream a log); say(line): pending reasons and state changes."""
    if run is not None:
        watch = Watch(lambda: jobs_of(run), ending or run.summary.exists, lambda: outcome_of(run), say,
                      started=lambda job: run.slurm_output(job).exists(), groups=lambda: group_jobs(run))
    else:
        watch = Watch(lambda: [job_id], ending, None, say)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        if on_poll:
            on_poll()
        final = watch.check()
        if final is not None:
            return final
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} still {watch.state} after {timeout:.0f}s")
        time.sleep(1.0)
