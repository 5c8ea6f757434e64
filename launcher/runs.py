"""Creating a run: choosing its directory and writing the resolved experiment into it.
(Every path inside a run directory is srl_hpc.rundir.RunDir's.)"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from launcher import slurm, slurm_jobs
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
    try:
        run.logs.mkdir(parents=True, exist_ok=True)
    except PermissionError as e:  # (an ordinary user, a directory of someone else's)
        raise PermissionError(
            f"cannot create run directory {run.root}: {e.strerror} (at {e.filename}); choose "
            f"--run-dir where you can write"
        ) from None
    exp = config.replace(exp, run_dir=str(run.root))
    run.experiment.write_text(config.dump(exp))
    write_run_keys(run)
    return exp, run


# What a resume may change: the checkpoint holds the model and the algorithm's state, which a change of the
# env, the model, the algorithm or the policies would not fit; the workers, stop conditions, monitoring and
# Slurm resources are the run's size and shape around it
RESUMABLE = ("workers", "stop", "monitor", "slurm")


def reopen(
    run_dir: str | Path, changes: Sequence[str] = (), check: Callable[[config.Experiment], None] | None = None
) -> tuple[config.Experiment, RunDir]:
    """A run directory to resume: its experiment, with `changes` (KEY=VALUE, keys under RESUMABLE) applied and
    written back, and the attempt counter advanced, once `check` (which raises) has passed it: a refused resume
    changes nothing. The previous attempt's summary is kept as summary.attempt-N.json; the trainer's checkpoint
    is what the next attempt starts from."""
    run = RunDir(Path(run_dir).resolve())
    if not run.experiment.exists():
        raise FileNotFoundError(f"{run.root} holds no run (no {run.experiment.name})")
    if not run.checkpoint.exists():
        raise FileNotFoundError(f"{run.root}: no checkpoint to resume from (no {run.checkpoint})")
    exp = config.load(run.experiment)
    if changes:
        refused = [c.partition("=")[0] for c in changes if c.partition("=")[0].split(".")[0] not in RESUMABLE]
        if refused:
            why = f"a resume changes only {', '.join(f'{k}.*' for k in RESUMABLE)}: the checkpoint holds the rest"
            raise config.ConfigError("resume --set", [(key, None, why) for key in refused])
        exp = config.with_overrides(exp, list(changes))
    if check is not None:
        check(exp)
    if changes:
        run.experiment.write_text(config.dump(exp))
    write_run_keys(run)  # (a run made before runs had keys)
    run.begin_next_attempt()
    return exp, run


def continue_later(
    run_dir: str | Path, python: str, command: str, after: str | None = None, count: int = 1
) -> tuple[str | None, list[str]]:
    """`resume --after JOBID` / `--chain K`: queue `count` continuation jobs of a Slurm run, each the next
    attempt of the same run directory once the job before it has ended (however it ended: afterany), for
    clusters where a job may not requeue itself. The first waits for job `after`, by default for the run's
    own last job while that is still pending or running (else it may start at once). The attempt counter
    moves on inside each job as it starts (slurm.continuation_lines), not here: the job before it may still
    be writing to the directory. Returns (the job the first waits for, the queued job ids)."""
    run = RunDir(Path(run_dir).resolve())
    if not run.experiment.exists():
        raise FileNotFoundError(f"{run.root} holds no run (no {run.experiment.name})")
    if not run.slurm.exists():
        raise slurm.SlurmError(
            f"{run.root} is not a Slurm run: --after/--chain queue Slurm jobs (resume a local run without them)"
        )
    if count < 1:
        raise ValueError(f"--chain must be >= 1, got {count}")
    ids = slurm.jobs_of(run)
    infos = slurm_jobs.job_states(ids)
    if after is None:
        after = next((i for i in reversed(ids) if slurm_jobs.live(infos[i])), None)
    if after is None and not run.checkpoint.exists():
        raise FileNotFoundError(
            f"{run.root}: no checkpoint to resume from (no {run.checkpoint}), and no job "
            "of the run that could still write one"
        )
    exp = config.load(run.experiment)
    write_run_keys(run)  # (a run made before runs had keys)
    request = slurm.prepare(exp, run.root, python, command, continuation=True)
    return after, slurm.submit_chain(request, run, after, count)
