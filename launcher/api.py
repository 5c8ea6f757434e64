"""The Python API, for notebooks and scripts: `submit` returns a Run handle.

run = launcher.submit("experiments/cartpole_ppo.yaml", slurm=True, overrides=["seed=3"])
run.state(); run.wait(); run.logs("actor/0"); run.cancel(); run.summary()
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from launcher import runs, slurm_jobs, status
from launcher import slurm as scheduler
from launcher.settings import profile_files
from srl_hpc import config
from srl_hpc import graph as wiring
from srl_hpc.config import spaces_check
from srl_hpc.config.loader import key_lines
from srl_hpc.rundir import RunDir


class Run:
    """A submitted (Slurm) or started (local process) run, known by its run directory."""

    def __init__(self, run_dir: Path, job_id: str | None = None, process: subprocess.Popen | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.run = RunDir(run_dir)
        self.job_id = job_id
        self._process = process

    def __repr__(self) -> str:
        return f"Run({str(self.run_dir)!r}, job_id={self.job_id!r})"

    def state(self) -> str:
        """pending / running / completed / failed / cancelled / timeout (Slurm's states, via one table); the
        run's own outcome once Slurm no longer knows the job (no accounting, after MinJobAge)."""
        if self.job_id is not None:
            # slurm.layout: jobs: the groups' jobs together (slurm_jobs.current)
            state = (
                slurm_jobs.run_job(self.run)[1].state
                if scheduler.group_jobs(self.run)
                else slurm_jobs.job_state(self.job_id)[0]
            )
            return status.describe(self.run)[0] if state == "unknown" else state
        if self._process is not None and self._process.poll() is None:
            return "running"
        return status.describe(self.run)[0]

    def wait(self, timeout: float | None = None) -> str:
        if self.job_id is not None:
            slurm_jobs.wait(self.job_id, timeout=timeout, run=self.run)
        elif self._process is not None:
            self._process.wait(timeout=timeout)
        return self.state()

    def cancel(self) -> None:
        """Stop the run; workers wind down and the trainer keeps its checkpoint."""
        if self.job_id is not None:
            slurm_jobs.cancel_run(self.run)  # continuation jobs queued by resume --chain too
        elif self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)

    def logs(self, worker: str = wiring.CONTROLLER) -> str:
        path = self.run.log(worker)
        return path.read_text(errors="replace") if path.exists() else ""

    def summary(self) -> dict | None:
        path = self.run.summary
        return json.loads(path.read_text()) if path.exists() else None


def submit(
    experiment,
    *,
    slurm: bool = False,
    run_dir: str | Path | None = None,
    overrides: Sequence[str] = (),
    profiles: Sequence[str | Path] = (),
) -> Run:
    """Start an experiment (a YAML path or an Experiment) locally in the background, or submit it to Slurm.
    `profiles`: as --profile (default: $SRL_PROFILE's), composed under a YAML path's own keys."""
    exp = (
        experiment
        if isinstance(experiment, config.Experiment)
        else config.load(experiment, profiles=profile_files(profiles))
    )
    if overrides:
        exp = config.with_overrides(exp, list(overrides))
    source = "<experiment>" if isinstance(experiment, config.Experiment) else str(experiment)
    lines = {} if isinstance(experiment, config.Experiment) else key_lines(experiment)
    spaces_check.check(exp, source, lines, list(overrides))  # before anything starts or is queued
    if slurm:
        command = f"launcher.submit({experiment!r})"
        path = runs.resolve(exp, run_dir)
        request = scheduler.prepare(exp, path, sys.executable, command)
        exp, run = runs.create(exp, path)
        return Run(run.root, job_id=scheduler.submit(request, run, command))
    exp, run = runs.create(exp, run_dir)
    log = open(run.logs / "launcher.log", "wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "launcher.local", str(run.root)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return Run(run.root, process=process)
