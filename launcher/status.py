"""What a run directory says about its run: state, outcome, progress, and which worker failed and why.

Works for local and Slurm runs, finished, running or killed: it reads only files the run leaves
(summary.json, logs/, slurm.json) plus the scheduler's word on the job.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from launcher import local, rundir, slurm


def describe(run_dir: Path) -> tuple[str, str]:
    """(state, a readable report). state: pending/running/completed/failed/cancelled/timeout/unknown."""
    run_dir = Path(run_dir)
    if not (run_dir / "experiment.yaml").exists():
        raise FileNotFoundError(f"{run_dir} is not a run directory (no experiment.yaml)")
    lines = [f"run {run_dir}"]
    summary = _read_json(run_dir / "summary.json")
    if (run_dir / "slurm.json").exists():
        job_id = slurm.job_id_of(run_dir)
        state, raw = slurm.job_state(job_id)
        lines.append(f"slurm job {job_id}: {raw}")
    elif summary is None and local.launcher_pid(run_dir) is not None:
        state = "running"
        lines.append(f"local run, launcher pid {local.launcher_pid(run_dir)}")
    else:
        state = {"succeeded": "completed", "failed": "failed", "cancelled": "cancelled"}.get(
            (summary or {}).get("status"), "unknown")
    if summary:
        lines.append(f"outcome: {summary['status']}: {summary['reason']}")
        lines.append(f"wall time {summary['wall_time']}s, {summary['env_frames']:,} env frames, "
                     f"{summary['frames_consumed']:,} trained, policy version {summary['policy_version']}")
        if state == "completed" and summary["status"] == "failed":
            state = "failed"
    progress = last_progress_line(run_dir)
    if progress:
        lines.append(f"last progress: {progress}")
    for worker, error in (summary or {}).get("failed_workers", {}).items():
        log = rundir.log_path(run_dir, worker)
        lines.append(f"worker {worker} failed: {error}\n--- last lines of {log}:\n{rundir.tail(log)}")
    if summary is None and state in ("failed", "cancelled", "timeout"):
        for out in sorted(run_dir.glob("slurm-*.out")):  # the run never concluded: srun's own words
            lines.append(f"--- last lines of {out}:\n{rundir.tail(out)}")
    return state, "\n".join(lines)


def last_progress_line(run_dir: Path) -> str | None:
    log = rundir.log_path(run_dir, "controller/0")
    if not log.exists():
        return None
    progress = [line for line in log.read_text(errors="replace").splitlines()
                if line.startswith("[") and "| sample" in line]
    return progress[-1].strip() if progress else None


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


def tail_forever(path: Path, stop) -> None:
    """`logs -f`: print new lines until stop() is true."""
    position = 0
    while True:
        position = follow_file(path, position)
        if stop():
            follow_file(path, position)
            return
        time.sleep(0.5)


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
