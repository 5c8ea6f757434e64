"""Submit to Slurm: the thin side-effecting layer under plan and render (what follows, launcher.slurm_jobs).

`prepare` makes the request (plan, checked against the cluster when one answers, rendered script); `--dry-run`
prints it and `submit` sends that very request. A submitted run directory holds job.sbatch (exactly what was
submitted), experiment.yaml and slurm.json (job id, command, and the continuations `resume --after/--chain`
queued after it). With `slurm.layout: jobs` it holds job-<group>.sbatch per group instead, and slurm.json's
"groups" maps each group to its job (its "job_id" is the first group's: the controller's); the run's jobs are
then followed, cancelled and reported together (launcher.slurm_jobs). Every Slurm command gets `TIMEOUT`
seconds to answer; one that does not is a SlurmError naming it (slurmctld not answering), not a hang.
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

from launcher import accounting, render
from launcher import mounts as mounts_of
from launcher import plan as planning
from srl_hpc.rundir import RunDir

TIMEOUT = 60.0  # seconds any Slurm command (sbatch, squeue, sacct, scancel, sinfo) may take to answer

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
    text = (
        f"{cmd[0]} did not answer within {seconds:g} s: slurmctld is not answering (busy or down; "
        f"`scontrol ping` says which) [{shlex.join(cmd)}]"
    )
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
    versions = [
        v.strip()
        for line in out.splitlines()
        if "versions available:" in line
        for v in line.split(":", 1)[1].split(",")
    ]
    return names + [v for v in versions if v]


def check_mpi_plugin(mpi: str) -> None:
    """slurm.mpi must be a plugin srun has ('none' always is)."""
    plugins = mpi_plugins()
    if mpi not in plugins:
        raise SlurmError(
            f"slurm.mpi is {mpi!r}, but srun has no MPI plugin {mpi!r} here (it has: "
            f"{', '.join(plugins)}); choose one of them, or none for a rendezvous through files"
        )


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


HETJOB_HINT = (
    "if this cluster does not take heterogeneous jobs, set slurm.layout: jobs (one ordinary job per "
    "group, the workers meeting through files)"
)


def check_het_steps(settings: dict[str, str]) -> None:
    """The hetjob layout runs one srun over every group: refused where the cluster disables such steps."""
    if accounting.het_steps_disabled(settings):
        raise planning.PlanError(
            [
                f"this cluster disables job steps that span a het job's components (scontrol show config: "
                f"SchedulerParameters={settings['SchedulerParameters']} has disable_hetero_steps), and slurm.layout: "
                f"hetjob runs one srun over every group. Set slurm.layout: jobs (one ordinary job per group, the "
                f"workers meeting through files)"
            ]
        )


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


def prepare(
    exp, run_dir, python: str, command: str, require_cluster: bool = True, continuation: bool = False
) -> Request:
    """Plan, check against the cluster (raises PlanError naming what does not fit), render.
    Without a reachable Slurm: an error, or with require_cluster=False (a dry run) a note in `checked`.
    continuation: a job queued by `resume --after/--chain` (continuation_lines run first in it).
    Also refused before anything is submitted: a het job where the cluster disables het steps, and a run whose
    jobs the user's QOS or association limits would not take or not run at once (launcher.accounting)."""
    check_run_dir(run_dir)
    job_plan = planning.make_plan(exp, str(run_dir), python)
    if continuation and job_plan.layout == "jobs":
        raise planning.PlanError(
            [
                "resume --after/--chain queues one continuation job, and a run of slurm.layout: jobs is a job per "
                "group: resume it with `srl-launch resume RUN` once its jobs have ended, or run it with slurm.layout: "
                "hetjob"
            ]
        )
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
        raise planning.PlanError(
            [
                f"run directory {given} is {problem}: the nodes cannot see it. Use --run-dir "
                "(or run_dir) on a filesystem every node mounts, e.g. under your home or a "
                "shared scratch"
            ]
        )


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
    group: str | None
    try:
        for group, script in request.scripts:
            path = run.root / render.script_name(group)
            path.write_text(script)
            submitted[group] = _sbatch(path, hold=True)
        _write_json(
            run.slurm,
            {
                "job_id": next(iter(submitted.values())),
                "command": command,
                "submitted": time.time(),
                "layout": "jobs",
                "groups": submitted,
            },
        )
        _run(["scontrol", "release", ",".join(submitted.values())])
    except (SlurmError, OSError) as e:  # (OSError: RUN/slurm.json could not be written)
        if submitted:
            _run(["scancel", *submitted.values()], check=False)
        group = next((g for g, _ in request.scripts if g not in submitted), None)
        what = f"group {group}'s job was not submitted" if group else "the groups' jobs were not released"
        cancelled = (
            ("; cancelled the jobs already submitted: " + ", ".join(f"{j} ({g})" for g, j in submitted.items()))
            if submitted
            else ""
        )
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
