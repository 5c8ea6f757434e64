"""Every path of a run directory, in one place (workers, the launcher, status and srl-trace all ask here).

    RUN/experiment.yaml       the resolved experiment (every default filled in)
    RUN/summary.json          the controller's outcome and frame accounting
    RUN/metrics.csv           one row per progress line
    RUN/workers.json          where each worker ran (host, node, ports, pid)
    RUN/logs/<worker>.log     each worker's output ("actor/3" -> actor-3.log)
    RUN/traces/<worker>.h5    each worker's HDF5 trace
    RUN/checkpoints/latest.pt the trainer's checkpoint, replaced atomically
    RUN/rendezvous/<worker>.json   local mode's rendezvous table
    RUN/launcher.pid          the local launcher running this run
    RUN/job.sbatch, RUN/slurm.json, RUN/slurm-<id>.out   Slurm runs: the script, the job id, srun's output
    RUN/sweep.json            a sweep's directory: its members
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


def file_stem(worker: str) -> str:
    """'actor/3' -> 'actor-3' (worker names hold a slash, file names cannot)."""
    return worker.replace("/", "-")


@dataclass(frozen=True)
class RunDir:
    root: Path

    def __post_init__(self):
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

    def trace(self, worker: str) -> Path:
        return self.traces / f"{file_stem(worker)}.h5"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def checkpoint(self) -> Path:
        return self.checkpoints / "latest.pt"

    @property
    def rendezvous(self) -> Path:
        return self.root / "rendezvous"

    def rendezvous_entry(self, worker: str) -> Path:
        return self.rendezvous / f"{file_stem(worker)}.json"

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

    @property
    def sweep(self) -> Path:
        return self.root / "sweep.json"
