"""Creating a run: choosing its directory and writing the resolved experiment into it.
(Every path inside a run directory is srl_hpc.rundir.RunDir's.)"""
from __future__ import annotations

import time
from pathlib import Path

from srl_hpc import config
from srl_hpc.rundir import RunDir
from srl_hpc.streams.security import write_run_keys


def resolve(exp: config.Experiment, run_dir: str | Path | None = None, suffix: str = "") -> Path:
    """The run directory's absolute path: --run-dir, else the experiment's run_dir, else runs/<name>-<time>."""
    return Path(run_dir or exp.run_dir or f"runs/{exp.name}{suffix}-{time.strftime('%Y%m%d-%H%M%S')}").resolve()


def create(exp: config.Experiment, run_dir: str | Path | None = None) -> tuple[config.Experiment, RunDir]:
    """Make the run directory and write the resolved experiment into it; returns both with run_dir set."""
    run = RunDir(resolve(exp, run_dir))
    if run.experiment.exists():
        raise FileExistsError(f"run directory {run.root} already holds a run; choose another --run-dir")
    run.logs.mkdir(parents=True, exist_ok=True)
    exp = config.replace(exp, run_dir=str(run.root))
    run.experiment.write_text(config.dump(exp))
    write_run_keys(run)
    return exp, run


def reopen(run_dir: str | Path) -> tuple[config.Experiment, RunDir]:
    """A run directory to resume: its experiment, with the attempt counter advanced. The previous attempt's
    summary is kept as summary.attempt-N.json; the trainer's checkpoint is what the next attempt starts from."""
    run = RunDir(Path(run_dir).resolve())
    if not run.experiment.exists():
        raise FileNotFoundError(f"{run.root} holds no run (no {run.experiment.name})")
    if not run.checkpoint.exists():
        raise FileNotFoundError(f"{run.root}: no checkpoint to resume from (no {run.checkpoint})")
    exp = config.load(run.experiment)
    write_run_keys(run)  # (a run made before runs had keys)
    run.begin_next_attempt()
    return exp, run


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"
