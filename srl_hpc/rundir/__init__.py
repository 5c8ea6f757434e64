"""Every path of a run directory, in one place (workers, the launcher, status and srl-trace all ask here).

RUN/experiment.yaml       the resolved experiment (every default filled in)
RUN/summary.json          the controller's outcome and frame accounting
RUN/metrics.csv           one row per progress line
RUN/tb/                   TensorBoard event files, one scalar set per progress line (monitor.tensorboard)
RUN/wandb/                the W&B run (monitor.wandb), written by wandb itself
RUN/workers.json          where each worker ran (host, node, ports, pid)
RUN/logs/<worker>.log     each worker's output ("actor/3" -> actor-3.log)
RUN/traces/<worker>.h5    each worker's HDF5 trace (<worker>.attempt-N.h5 from a resumed attempt N,
                          <worker>[.attempt-N].restart-K.h5 from a restarted worker's K-th replacement)
RUN/attempt               which attempt is running: 1, then +1 per resume or Slurm requeue
RUN/summary.attempt-N.json   the outcome of an earlier attempt N of a resumed run
RUN/checkpoints/latest.pt the trainer's checkpoint, replaced atomically (several policies: <policy>.pt each)
RUN/parameters/<policy>/  the parameter database: stored versions and their tags (services/parameter_db.py)
RUN/population/lineage.jsonl   a population's copies (exploit and explore), one JSON record per line
RUN/rendezvous/<worker>.json   local mode's rendezvous table
RUN/rendezvous/barrier/<worker>, barrier.go   Slurm mode: the barrier before the MPI allgather
RUN/launcher.pid          the local launcher running this run
RUN/keys/run.key          the run's CURVE key pair (directory 0700, file 0600)
RUN/job.sbatch, RUN/slurm.json, RUN/slurm-<id>.out   Slurm runs: the script, the job id, srun's output
RUN/sweep.json            a sweep's directory: its members
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING


def tail(path: Path, lines: int = 15) -> str:
    """The last lines of a log, or a line saying it is not there."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"


def file_stem(worker: str) -> str:
    """'actor/3' -> 'actor-3' (worker names hold a slash, file names cannot)."""
    return worker.replace("/", "-")


def task_id_of(args, environ) -> int:
    """--task-id, else this task's place in its srun (SLURM_PROCID) after the group's first (--first-task): with
    slurm.layout: jobs each group's srun counts its tasks from 0. Here, not in srl_hpc.worker, so that the probe's
    tasks (srl_hpc.probe) count as the workers do without importing the worker's handlers."""
    if args.task_id is not None:
        return args.task_id
    return (args.first_task or 0) + int(environ["SLURM_PROCID"])


def redirect_output(path: Path) -> None:
    """Under srun all tasks share one output; each task (a worker, a probe task) keeps its own file instead."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = os.fdopen(1, "w", buffering=1)  # line-buffered: `srl-launch logs -f` sees lines as they come


@dataclass(frozen=True)
class RunDir:
    root: Path

    if TYPE_CHECKING:  # the root may be given as a str; __post_init__ makes it a Path

        def __init__(self, root: str | Path) -> None: ...

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @property
    def experiment(self) -> Path:
        return self.root / "experiment.yaml"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.csv"

    @property
    def controller_state(self) -> Path:
        """What the controller had summed at its last progress line (a replacement starts from it)."""
        return self.root / "controller.json"

    @property
    def tensorboard(self) -> Path:
        return self.root / "tb"

    @property
    def workers(self) -> Path:
        return self.root / "workers.json"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def log(self, worker: str) -> Path:
        return self.logs / f"{file_stem(worker)}.log"

    @property
    def traces(self) -> Path:
        return self.root / "traces"

    def trace(self, worker: str, attempt: int = 1, incarnation: int = 0) -> Path:
        suffix = ("" if attempt == 1 else f".attempt-{attempt}") + (f".restart-{incarnation}" if incarnation else "")
        return self.traces / f"{file_stem(worker)}{suffix}.h5"

    @property
    def attempt_file(self) -> Path:
        return self.root / "attempt"

    @property
    def attempt(self) -> int:
        try:
            return int(self.attempt_file.read_text())
        except (OSError, ValueError):
            return 1

    def attempt_summary(self, attempt: int) -> Path:
        return self.root / f"summary.attempt-{attempt}.json"

    def begin_next_attempt(self) -> int:
        """Make the directory ready for the next attempt of its run (a resume or a Slurm requeue): the last
        attempt's summary is kept as summary.attempt-N.json, the rendezvous starts afresh, the counter
        moves on. Returns the new attempt number."""
        attempt = self.attempt
        if self.summary.exists():
            self.summary.replace(self.attempt_summary(attempt))
        shutil.rmtree(self.rendezvous, ignore_errors=True)
        self.attempt_file.write_text(f"{attempt + 1}\n")
        return attempt + 1

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def checkpoint(self) -> Path:
        return self.checkpoint_of("")

    def checkpoint_of(self, policy: str) -> Path:
        """A policy's checkpoint (the experiment's `policies`); "" is the one policy of a run without them."""
        return self.checkpoints / f"{policy or 'latest'}.pt"

    def replay_of(self, buffer: str) -> Path:
        """A buffer worker's replay, saved beside the checkpoints (algorithm.checkpoint_replay_mb)."""
        return self.checkpoints / f"replay-{file_stem(buffer)}.npz"

    def parameters_of(self, policy: str) -> Path:
        """A policy's parameter database; "" is the one policy of a run without `policies` ("default")."""
        return self.root / "parameters" / (policy or "default")

    @property
    def lineage(self) -> Path:
        """A population's lineage: which member copied which, when, and with what hyper-parameters."""
        return self.root / "population" / "lineage.jsonl"

    @property
    def rendezvous(self) -> Path:
        return self.root / "rendezvous"

    def rendezvous_entry(self, worker: str) -> Path:
        return self.rendezvous / f"{file_stem(worker)}.json"

    @property
    def rendezvous_table(self) -> Path:
        """Every entry in one file, written by the barrier's leader (slurm.mpi: none): each worker reads one file."""
        return self.rendezvous / "table.json"

    @property
    def barrier_arrivals(self) -> Path:
        """Slurm mode's start-up barrier: a file per worker that arrived (<worker>.failed: one that gave up)."""
        return self.rendezvous / "barrier"

    @property
    def barrier_go(self) -> Path:
        """Written by the barrier's leader when every worker arrived (empty), or the name of one that gave up."""
        return self.rendezvous / "barrier.go"

    @property
    def keys(self) -> Path:
        return self.root / "keys" / "run.key"

    @property
    def launcher_pid(self) -> Path:
        return self.root / "launcher.pid"

    @property
    def job_script(self) -> Path:
        return self.root / "job.sbatch"

    @property
    def slurm(self) -> Path:
        return self.root / "slurm.json"

    def slurm_outputs(self) -> list[Path]:
        return sorted(self.root.glob("slurm-*.out"))

    def slurm_output(self, job_id: str) -> Path:
        """The job script's own output (#SBATCH --output=RUN/slurm-%j.out): it appears as the job starts."""
        return self.root / f"slurm-{job_id}.out"

    @property
    def sweep(self) -> Path:
        return self.root / "sweep.json"
