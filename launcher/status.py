"""What a run directory says about its run: state, outcome, progress, and which worker failed and why.

Works for local and Slurm runs, finished, running or killed: it reads only files the run leaves
(summary.json, metrics.csv, logs/, slurm.json) plus the scheduler's word on the job.
"""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Callable
from pathlib import Path

from launcher import local, slurm, slurm_jobs
from srl_hpc import group_watch
from srl_hpc.rundir import RunDir, tail
from srl_hpc.services.rendezvous import abandoned_by


def describe(run: RunDir, job_state: slurm_jobs.JobInfo | None = None) -> tuple[str, str]:
    """(state, a readable report). state: pending/running/completed/failed/cancelled/timeout/unknown.
    job_state: Slurm's word on the run's job when the caller already asked (a sweep asks once for all)."""
    if not run.experiment.exists():
        raise FileNotFoundError(f"{run.root} is not a run directory (no experiment.yaml)")
    lines = [f"run {run.root}" + (f" (attempt {run.attempt})" if run.attempt > 1 else "")]
    summary = _read_json(run.summary)
    if run.slurm.exists():
        state = _slurm_lines(run, job_state, summary, lines)
    elif summary is None and local.launcher_pid(run) is not None:
        state = "running"
        lines.append(f"local run, launcher pid {local.launcher_pid(run)}")
    else:
        state = slurm_jobs.OUTCOMES.get((summary or {}).get("status"), "unknown")
    if summary:
        lines.append(f"outcome: {summary['status']}: {summary['reason']}")
        lines.append(
            f"wall time {summary['wall_time']}s, {summary['env_frames']:,} env frames, "
            f"{summary['frames_consumed']:,} consumed, policy version {summary['policy_version']}"
        )
        if state == "completed" and summary["status"] == "failed":
            state = "failed"
    progress = last_progress(run)
    if progress:
        lines.append("last progress: " + ", ".join(f"{k} {v}" for k, v in progress.items() if v != ""))
    for worker, error in (summary or {}).get("failed_workers", {}).items():
        lines.append(f"worker {worker} failed: {error}\n--- last lines of {run.log(worker)}:\n{tail(run.log(worker))}")
    quitter = abandoned_by(run) if summary is None else None
    if quitter:  # a Slurm run whose start-up ended when this worker exited before the rendezvous
        lines.append(
            f"worker {quitter} exited before the rendezvous\n--- last lines of {run.log(quitter)}:\n"
            f"{tail(run.log(quitter))}"
        )
    if summary is None and state in ("failed", "cancelled", "timeout"):
        for out in run.slurm_outputs():  # the run never concluded: srun's own words
            lines.append(f"--- last lines of {out}:\n{tail(out)}")
    return state, "\n".join(lines)


def ended_badly(run: RunDir, job_id: str) -> str:
    """For a Slurm job that failed, was cancelled or timed out: Slurm's reason and exit code, then where to
    look. No output file means the batch script never ran on a node, which nothing in the run says."""
    return "\n".join(slurm_jobs.job_end(job_id) + where_to_look(run, job_id))


def why_it_ended(run: RunDir) -> str:
    """ended_badly for the run's last job; with slurm.layout: jobs, Slurm's word on every group's job, then
    where to look."""
    groups = slurm.group_jobs(run)
    if not groups:
        return ended_badly(run, slurm.jobs_of(run)[-1])
    infos = slurm_jobs.job_states(list(groups.values()))
    bad = [job for job in groups.values() if infos[job].state in ("failed", "cancelled", "timeout", "unknown")]
    lines = [line for job in bad for line in slurm_jobs.job_end(job)]
    for job in bad:
        if infos[job].state == "cancelled" and not run.slurm_output(job).exists():
            lines.append(f"job {job} was cancelled before it started (no {run.slurm_output(job).name})")
        else:
            lines += where_to_look(run, job)
    return "\n".join(dict.fromkeys(lines))  # (the logs' line once)


def where_to_look(run: RunDir, job_id: str) -> list[str]:
    """The job's batch script output, or that it has none; the run's logs directory, where it holds files."""
    output = run.slurm_output(job_id)
    lines = [
        f"the batch script's output: {output}"
        if output.exists()
        else f"{output} does not exist: the batch script never ran on a node (can every node see {run.root}?)"
    ]
    logs = [p for p in run.logs.iterdir() if p.is_file()] if run.logs.is_dir() else []
    if logs:
        lines.append(
            f"the workers' logs: {run.logs}/ ({len(logs)} file{'s' if len(logs) > 1 else ''}; "
            f"srl-launch logs {run.root} --worker NAME)"
        )
    return lines


def _slurm_lines(run: RunDir, info: slurm_jobs.JobInfo | None, summary: dict | None, lines: list[str]) -> str:
    """The run's job (with its pending reason and expected start), the continuations queued after it, and
    the run's state: the job's, or the summary's outcome when Slurm no longer knows the job."""
    groups = slurm.group_jobs(run)
    if groups:
        return _group_jobs_lines(run, groups, summary, lines)
    ids = slurm.jobs_of(run)
    infos = {ids[0]: slurm_jobs.JobInfo(*info)} if info is not None else slurm_jobs.job_states(ids)
    job_id, info = slurm_jobs.current([i for i in ids if i in infos], infos)
    lines.append(f"slurm job {job_id}: {info.line()}")
    after = ids[ids.index(job_id) + 1 :]
    if after:
        lines.append(
            "queued after it (resume --after/--chain): "
            + ", ".join(f"{i} {infos[i].line()}" for i in after if i in infos)
        )
    state = info.state
    if state == "unknown" and summary and summary.get("status") in slurm_jobs.OUTCOMES:
        state = slurm_jobs.OUTCOMES[summary["status"]]
        lines.append(f"(no word from Slurm on job {job_id}: the run's state is its summary's)")
    return state


def _group_jobs_lines(run: RunDir, groups: dict[str, str], summary: dict | None, lines: list[str]) -> str:
    """slurm.layout: jobs: each group's job and its state, which group's job ended first where the group watch
    cancelled the others for it, and the run's state (slurm_jobs.current's, together)."""
    infos = slurm_jobs.job_states(list(groups.values()))
    lines.append("slurm jobs, one per group (slurm.layout: jobs):")
    watched = {}
    for group, job in groups.items():
        watched[group] = group_watch.said(run.slurm_output(job))
        lines.append(
            f"  group {group}: job {job} {infos[job].line()}"
            + (f" (its group watch: {watched[group]})" if watched[group] else "")
        )
    if any(watched.values()):
        for group, job in groups.items():
            if infos[job].state in ("failed", "cancelled", "timeout") and not watched[group]:
                lines.append(
                    f"group {group}'s job {job} ended {infos[job].raw} before the run did; the other "
                    f"groups' jobs were cancelled for it"
                )
    _, info = slurm_jobs.current(list(groups.values()), infos, together=True)
    state = info.state
    if state == "unknown" and summary and summary.get("status") in slurm_jobs.OUTCOMES:
        state = slurm_jobs.OUTCOMES[summary["status"]]
        lines.append("(no word from Slurm on the groups' jobs: the run's state is its summary's)")
    return state


def last_progress(run: RunDir) -> dict | None:
    """The last row of metrics.csv (the controller writes one per progress line)."""
    try:
        with open(run.metrics, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError:
        return None
    return rows[-1] if rows else None


def follow_file(path: Path, position: int = 0) -> int:
    """Print what was appended to `path` since `position`; returns the new position."""
    if not path.exists():
        return position
    with open(path, "rb") as f:
        f.seek(position)
        data = f.read()
    if data:
        print(data.decode(errors="replace"), end="", flush=True)
    return position + len(data)


def ended(run: RunDir, say: Callable[[str], None] | None = None) -> Callable[[], bool]:
    """`logs -f`'s stop test: a local run has ended once its summary exists; a Slurm run once none of its
    jobs is live (slurm_jobs.Watch: asked politely, at most once a minute while pending; the summary's outcome
    once Slurm no longer knows the job). say(line): the job's pending reason and state changes."""
    if not run.slurm.exists():
        return run.summary.exists
    watch = slurm_jobs.Watch(
        lambda: slurm.jobs_of(run),
        run.summary.exists,
        lambda: slurm_jobs.outcome_of(run),
        say,
        groups=lambda: slurm.group_jobs(run),
    )
    return lambda: watch.check() is not None


def tail_forever(path: Path, stop) -> None:
    """`logs -f`: print new lines until stop() is true."""
    position = 0
    while True:
        position = follow_file(path, position)
        if stop():
            follow_file(path, position)
            return
        time.sleep(0.5)


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
