"""`python -m srl_hpc.probe` (task.py): one task of `srl-launch doctor --probe`'s job, started by the very srun line a
worker of the experiment would be (same het group, CPUs, memory, container, node setup, environment), with
the worker's own arguments (with `slurm.layout: jobs`, its group's job's srun line and `--first-task`).
Instead of working it measures what the worker would meet on its node and writes it as JSON into the probe's
directory, where the launcher judges it (launcher/probe.py).

Why a job of its own: what a login node sees (its interfaces, limits, GPUs) is not what a task inside the
allocation sees; binding, limits propagation, GPU visibility and the network between het groups are only
known there.

Each task, in order (a phase that fails is recorded and the next ones still run):
  1. its facts: node, the address `slurm.network` picks (srl_hpc.services.network.resolve), the CPUs it is
     bound to, the GPUs it sees (and torch's UUIDs for them where torch sees CUDA), its open-files limits
     against what its worker would need (srl_hpc.services.limits) -> PROBE/probe/facts/<worker>.json;
  2. a ZMQ REP socket bound as a worker binds (its address, slurm.ports, the run's CURVE keys), then the
     workers' file rendezvous (FileBarrier + FileRendezvous, as under `slurm.mpi: none`);
  3. the first task of each group sends a request to every task of every other group and times the replies;
  4. the trainers of each policy join a gloo group through their first trainer's TCPStore (as the
     trainers' DDP does) and all-reduce; NCCL too where each of them sees a GPU of its own;
  5. once every group's pings are done (the REP sockets stay up until then): the results so far ->
     PROBE/probe/results/<worker>.json;
  6. with `--rendezvous mpi`: the workers' MPI rendezvous (MPI_Init and an allgather across every task of
     every group, as MpiRendezvous does), bounded in time, then the results again.
The first task writes summary.json at the end: the job script's srun guard then ends an srun that hangs
after the step (srl_hpc/srun_guard.py), and each group's watch of the jobs layout stops, as for a run.
This package's own module holds the probe directory's layout and what the launcher reads back (collect);
facts.py measures a task's node, network.py the ZMQ pings and the trainers' collectives, task.py runs the
phases in order.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from srl_hpc.rundir import RunDir, file_stem

PORT = "probe"  # the REP socket's entry in the rendezvous table's ports
BARRIER_TIMEOUT = 120.0  # seconds without a new arrival: the tasks start together under one srun
PING_TIMEOUT = 5.0  # seconds a task has to answer a ping
PING_BATCH = 256  # requests in flight at once from one pinger
SERVE_TIMEOUT = 180.0  # the longest a task keeps answering while pingers are still at work
COLLECTIVE_TIMEOUT = 60.0  # seconds for the trainers to form a group and all-reduce
MPI_BOUND = 90.0  # MPI_Init waits for every rank without a timeout of its own: past this the task exits
FINISH_TIMEOUT = 60.0  # how long the first task waits for the others' last results before summary.json


@dataclass(frozen=True)
class ProbeDir:
    """Where a probe job's tasks write, under its run directory (PROBE/probe/...)."""

    root: Path

    @property
    def base(self) -> Path:
        return Path(self.root) / "probe"

    def facts(self, worker: str) -> Path:
        return self.base / "facts" / f"{file_stem(worker)}.json"

    def results(self, worker: str) -> Path:
        return self.base / "results" / f"{file_stem(worker)}.json"

    def pinged(self, group: str) -> Path:
        """Written by a group's pinger when it has pinged every other group: the others may stop answering."""
        return self.base / "pinged" / group

    @property
    def done(self) -> Path:
        """One empty file per task that has ended every phase (the launcher lists it, not N results files)."""
        return self.base / "done"

    @property
    def mpi_run(self) -> RunDir:
        """A run directory of its own for the MPI rendezvous' barrier (the file rendezvous used RUN's)."""
        return RunDir(self.base / "mpi")


def collect(root: Path, names: list[str]) -> dict:
    """What the tasks wrote: {"facts": {worker: ...}, "results": {worker: ...}} for the workers that wrote."""
    where = ProbeDir(Path(root))
    found: dict[str, dict] = {"facts": {}, "results": {}}
    for kind, path_of in (("facts", where.facts), ("results", where.results)):
        for name in names:
            try:
                found[kind][name] = json.loads(path_of(name).read_text())
            except (OSError, ValueError):
                continue
    return found


def write_json(path: Path, data: dict) -> None:
    """Atomically: the launcher may read while a task writes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".strip()
