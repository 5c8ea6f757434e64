"""The run directory: everything a run leaves behind (resolved config, logs, checkpoints, metrics, summary)."""
from __future__ import annotations

import time
from pathlib import Path

from launcher import config


def resolve(exp: config.Experiment, run_dir: str | Path | None = None, suffix: str = "") -> Path:
    """The run directory's absolute path: --run-dir, else the experiment's run_dir, else runs/<name>-<time>."""
    return Path(run_dir or exp.run_dir or f"runs/{exp.name}{suffix}-{time.strftime('%Y%m%d-%H%M%S')}").resolve()


def create(exp: config.Experiment, run_dir: str | Path | None = None) -> tuple[config.Experiment, Path]:
    """Make the run directory and write the resolved experiment into it; returns both with run_dir set."""
    path = resolve(exp, run_dir)
    if (path / "experiment.yaml").exists():
        raise FileExistsError(f"run directory {path} already holds a run; choose another --run-dir")
    (path / "logs").mkdir(parents=True, exist_ok=True)
    exp = config.replace(exp, run_dir=str(path))
    (path / "experiment.yaml").write_text(config.dump(exp))
    return exp, path


def log_path(run_dir: Path, worker: str) -> Path:
    return Path(run_dir) / "logs" / (worker.replace("/", "-") + ".log")


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"
