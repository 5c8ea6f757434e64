"""Rendezvous: every worker publishes {worker, host, ports} once and receives everyone's entry.

Two implementations of one call, `exchange(entry) -> table`:
- FileRendezvous (local mode): one JSON file per worker under RUN/rendezvous/, written atomically.
- MpiRendezvous (Slurm mode): a single MPI allgather over MPI_COMM_WORLD (srun --mpi=pmix); the
  node-local rank from Split_type(COMM_TYPE_SHARED) picks the GPU.
After rendezvous all data moves over ZMQ.
"""
from __future__ import annotations

import json
import os
import socket
import time

from srl_hpc.rundir import RunDir


class RendezvousError(RuntimeError):
    pass


def advertised_host(local: bool) -> str:
    """The address other workers use to reach this one. SRL_HOST overrides (e.g. an InfiniBand IP)."""
    if os.environ.get("SRL_HOST"):
        return os.environ["SRL_HOST"]
    if local:
        return "127.0.0.1"
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return socket.gethostname()


class FileRendezvous:
    local = True
    local_rank = 0

    def __init__(self, run: RunDir, n_workers: int, timeout: float = 120.0):
        self.run = run
        self.n_workers = n_workers
        self.timeout = timeout

    def exchange(self, entry: dict, expected: list[str]) -> dict:
        self.run.rendezvous.mkdir(parents=True, exist_ok=True)
        path = self.run.rendezvous_entry(entry["worker"])
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(entry))
        os.replace(tmp, path)  # atomic: readers never see a half-written entry
        deadline = time.monotonic() + self.timeout
        while True:
            table = {}
            for name in expected:
                p = self.run.rendezvous_entry(name)
                if p.exists():
                    table[name] = json.loads(p.read_text())
            if len(table) == len(expected):
                return table
            if time.monotonic() > deadline:
                missing = sorted(set(expected) - set(table))
                raise RendezvousError(f"rendezvous timed out after {self.timeout:.0f}s; never heard from {missing}")
            time.sleep(0.05)


class MpiRendezvous:
    local = False

    def __init__(self):
        # One tiny allgather needs no shared-memory transport, and Open MPI's (vader) crashed in
        # Split_type when several Slurm nodes share one host (the local test cluster). Users can override.
        os.environ.setdefault("OMPI_MCA_btl", "self,tcp")
        # PMIx's shared-memory datastore (gds ds21) segfaulted in MPI start-up now and then with many ranks on
        # one host (2 of ~10 64-actor jobs here; a known PMIx issue, whose maintainers give this workaround):
        # the hash datastore takes the job's data from the local PMIx server instead. Users can override.
        os.environ.setdefault("PMIX_MCA_gds", "hash")
        from mpi4py import MPI  # imported here (MPI starts at import): local mode never needs it

        self.comm = MPI.COMM_WORLD
        self.local_rank = self.comm.Split_type(MPI.COMM_TYPE_SHARED).Get_rank()

    def exchange(self, entry: dict, expected: list[str]) -> dict:
        if self.comm.Get_size() != len(expected):
            raise RendezvousError(f"MPI world has {self.comm.Get_size()} ranks but the plan has "
                                  f"{len(expected)} workers; was srun started with --mpi=pmix over all het groups?")
        entries = self.comm.allgather(json.dumps(entry))
        # MPI's work is done: finalize now, while every rank is here, not at exit, where MPI_Finalize waits
        # for every rank and held finished jobs to their time limit when some ranks exited early or failed
        # (twice in four suite runs: every worker had logged "ended", two processes never exited)
        from mpi4py import MPI
        MPI.Finalize()
        table = {e["worker"]: e for e in map(json.loads, entries)}
        if sorted(table) != sorted(expected):
            raise RendezvousError(f"MPI rendezvous got workers {sorted(table)}, expected {sorted(expected)}")
        return table
