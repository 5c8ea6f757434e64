"""Creating a run: choosing its directory and writing the resolved experiment into it.
(Every path inside a run directory is srl_hpc.rundir.RunDir's.)"""
from __future__ import annotations

import time
from pathlib import Path

from srl_hpc import config
from srl_hpc.rundir import RunDir


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
    return exp, run


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"
