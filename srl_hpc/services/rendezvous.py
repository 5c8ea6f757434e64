"""Rendezvous: every worker publishes {worker, host, ports} once and receives everyone's entry.

Two implementations of one call, `exchange(entry) -> table`:
- FileRendezvous (local mode): one JSON file per worker under RUN/rendezvous/, written atomically.
- MpiRendezvous (Slurm mode): a single MPI allgather over MPI_COMM_WORLD (srun --mpi=pmix or pmi2). Ranks
  meet at a FileBarrier before MPI starts, so that no rank waits long inside MPI, and a worker that exits
  before it arrives ends the others' wait within seconds (inside MPI_Init's fence they could not tell).
- FileRendezvous with a FileBarrier (Slurm mode, slurm.mpi: none): the files, once everyone has arrived.
After rendezvous all data moves over ZMQ.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import time
from collections.abc import Callable, Iterator

from srl_hpc.rundir import RunDir, file_stem, tail


class RendezvousError(RuntimeError):
    pass


class FileRendezvous:
    """Local mode: each worker polls for the others' entries. Under Slurm without MPI (slurm.mpi: none) the
    workers first meet at a FileBarrier, then each reads the table once."""

    def __init__(self, run: RunDir, n_workers: int, timeout: float = 120.0, barrier: FileBarrier | None = None) -> None:
        self.run = run
        self.n_workers = n_workers
        self.timeout = timeout
        self.barrier = barrier
        self.done = False
        if barrier is not None:
            barrier.before_go = self._write_table
            atexit.register(self.abandon)

    def exchange(self, entry: dict, expected: list[str]) -> dict:
        _write_atomically(self.run.rendezvous_entry(entry["worker"]), json.dumps(entry))
        if self.barrier is not None:
            self.barrier.wait()  # every entry is written before its worker arrives; the leader merged them
            self.done = True
            table = json.loads(self.run.rendezvous_table.read_text())
            if sorted(table) != sorted(expected):
                raise RendezvousError(f"rendezvous: no entry from {sorted(set(expected) - set(table))}")
            return table
        deadline = time.monotonic() + self.timeout
        while True:
            table = self._read(expected)
            if len(table) == len(expected):
                return table
            if time.monotonic() > deadline:
                missing = sorted(set(expected) - set(table))
                raise RendezvousError(f"rendezvous timed out after {self.timeout:.0f}s; never heard from {missing}")
            time.sleep(0.05)

    def _read(self, expected: list[str]) -> dict:
        table = {}
        for name in expected:
            p = self.run.rendezvous_entry(name)
            if p.exists():
                table[name] = json.loads(p.read_text())
        return table

    def _write_table(self) -> None:
        """The leader, once everyone has arrived: one file of all entries, so that each of N workers reads
        one file, not N (N x N opens on the metadata server)."""
        assert self.barrier is not None  # (the barrier's before_go)
        _write_atomically(self.run.rendezvous_table, json.dumps(self._read(self.barrier.names)))

    def abandon(self) -> None:
        """At an exit before the barrier (also at exit): the others stop waiting for this worker."""
        if not self.done:
            assert self.barrier is not None  # (registered with a barrier only)
            self.barrier.abandon()


class FileBarrier:
    """Workers wait for each other asleep, on files in the shared run directory, before the rendezvous.

    In a collective, Open MPI waits for late ranks by spinning: with many ranks to a core, the ranks that
    were ready first took the CPU of those still starting (256 actors on 2 cores: the first waited up to 178 s
    in the allgather). Each worker writes its arrival file and sleeps; the plan's first worker, the leader,
    lists the arrivals and writes the go file when all are in, which the others look for. A worker that
    exits before the rendezvous says so (abandon), and the leader passes its name on through the go file, so
    that nobody waits for it until the timeout.

    The run directory is on a shared filesystem whose one metadata server every worker of the run uses
    (Lustre, GPFS, NFS), so the barrier's load on it is bounded, whatever the number of workers N: the
    waiting workers look at (stat) the go file POLL_RATE times a second in all, each every N / POLL_RATE
    seconds (at least 0.1 s) from a phase set by its place in the plan, so that workers arriving together
    do not look together; the leader lists the arrivals at most once a second. At N = 10,000: 200 stats
    and one listing a second, and the go reaches every worker within 50 s of the last arrival (25 s on
    average), against a start-up of 10,000 processes that takes minutes.
    """

    TIMEOUT = 600.0  # seconds without a new arrival (not in all): workers still arriving are progress
    POLL_RATE = 200.0  # looks at the go file per second, all waiting workers together
    LEAD_INTERVAL = 1.0  # seconds between the leader's listings of the arrivals, at most

    def __init__(self, run: RunDir, names: list[str], me: str, timeout: float = TIMEOUT) -> None:
        self.run = run
        self.names = names
        self.me = me
        self.leader = me == names[0]
        self.timeout = timeout
        self.interval = max(0.1, len(names) / self.POLL_RATE)  # seconds between a worker's looks
        self.lead_interval = min(self.interval, self.LEAD_INTERVAL)
        self.phase = self.interval * (names.index(me) if me in names else 0) / len(names)  # its first look
        # the leader calls it once everyone has arrived, before it says go
        self.before_go: Callable[[], None] | None = None

    def wait(self) -> None:
        arrivals = self.run.barrier_arrivals
        arrivals.mkdir(parents=True, exist_ok=True)
        (arrivals / file_stem(self.me)).touch()
        deadline = time.monotonic() + self.timeout
        pause = 0.0 if self.leader else self.phase
        while True:
            time.sleep(max(0.0, min(pause, deadline - time.monotonic())))
            quitter = self._lead() if self.leader else self._go()
            if quitter is not None:
                if quitter:
                    raise RendezvousError(
                        f"rendezvous abandoned: {quitter} exited before it; the last lines of "
                        f"{self.run.log(quitter)}:\n{tail(self.run.log(quitter))}"
                    )
                return
            if time.monotonic() >= deadline:
                deadline = self._last_arrival() + self.timeout  # one more look, only at the deadline
                if time.monotonic() >= deadline:
                    raise RendezvousError(self._timed_out())
            pause = self.lead_interval if self.leader else self.interval

    def _last_arrival(self) -> float:
        """When the last worker arrived, on this process's monotonic clock (the arrivals directory's change time,
        which the shared filesystem's clock sets: a skew of seconds matters little against the timeout)."""
        changed = os.stat(self.run.barrier_arrivals).st_mtime
        return time.monotonic() - max(0.0, time.time() - changed)

    def _go(self) -> str | None:
        """The go file's text (empty: go; else who gave up), None while there is none: one stat a look."""
        go = self.run.barrier_go
        return go.read_text() if go.exists() else None

    def _lead(self) -> str | None:
        """Write the go file once every worker has arrived (empty), or with the name of the first that gave up;
        returns what it wrote, None while it waits. One directory listing a look."""
        present = [f for f in os.listdir(self.run.barrier_arrivals) if not f.startswith(".")]  # no tmp files
        failed = sorted(f for f in present if f.endswith(".failed"))
        if failed:
            quitter = (self.run.barrier_arrivals / failed[0]).read_text()
        elif len(present) >= len(self.names):
            quitter = ""
            if self.before_go is not None:
                self.before_go()
        else:
            return None
        _write_atomically(self.run.barrier_go, quitter)
        return quitter

    def _timed_out(self) -> str:
        if not self.leader:
            return (
                f"rendezvous timed out after {self.timeout:.0f}s: {self.names[0]}, which waits for every "
                f"worker, never said go (its log names the workers that never arrived)"
            )
        present = set(os.listdir(self.run.barrier_arrivals))
        missing = [n for n in self.names if file_stem(n) not in present]
        shown = ", ".join(missing[:10]) + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
        return (
            f"rendezvous timed out after {self.timeout:.0f}s: {len(missing)} of {len(self.names)} workers "
            f"never arrived: {shown}"
        )

    def abandon(self) -> None:
        """This worker will not arrive: the others stop waiting for it."""
        if self.run.barrier_go.exists():
            return
        if self.leader:
            _write_atomically(self.run.barrier_go, self.me)
        else:
            _write_atomically(self.run.barrier_arrivals / f"{file_stem(self.me)}.failed", self.me)


def abandoned_by(run: RunDir) -> str | None:
    """The worker whose exit before the rendezvous ended a Slurm run's start-up, if one did."""
    try:
        return run.barrier_go.read_text() or None
    except OSError:
        return None


def _write_atomically(path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)  # readers never see a half-written file


PR_SET_TIMERSLACK = 29  # prctl(2)


@contextlib.contextmanager
def coarse_timer_slack(seconds: float = 0.01) -> Iterator[None]:
    """While MPI starts, this thread's sleeps may end up to `seconds` late. Open MPI's MPI_Init waits for the
    other ranks by polling with 100 us sleeps: with many ranks on few cores (hundreds of actors on one node,
    the local Slurm) the waiting ranks' wake-ups, and the kernel's switching among them, starve the ranks
    still importing, and a large rendezvous never completes. A coarse slack lets the kernel batch those
    wake-ups (docs/benchmarks.md, "Figures behind choices in the code"). MPI_Init is at most a few polls
    later for it. Threads MPI starts meanwhile inherit the slack; they wait on events."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_TIMERSLACK, ctypes.c_ulong(int(seconds * 1e9)), 0, 0, 0)
    try:
        yield
    finally:
        libc.prctl(PR_SET_TIMERSLACK, ctypes.c_ulong(0), 0, 0, 0)  # 0: this thread's default again


class MpiRendezvous:
    def __init__(self, barrier: FileBarrier) -> None:
        self.barrier = barrier
        self.done = False
        # One tiny allgather needs no shared-memory transport, and every rank uses the same PML: groups on nodes
        # with and without InfiniBand would otherwise pick ucx and ob1 and fail to meet. Users can override.
        os.environ.setdefault("OMPI_MCA_btl", "self,tcp")
        os.environ.setdefault("OMPI_MCA_pml", "ob1")
        # PMIx's shared-memory datastore (gds ds21) segfaulted in MPI start-up now and then with many ranks on
        # one host (a known PMIx issue, whose maintainers give this workaround): the hash datastore takes the
        # job's data from the local PMIx server instead. Users can override.
        os.environ.setdefault("PMIX_MCA_gds", "hash")
        waited, cpu = time.monotonic(), time.process_time()
        with coarse_timer_slack():
            from mpi4py import MPI  # imported here (MPI starts at import): local mode never needs it

            self.comm = MPI.COMM_WORLD
        # MPI_Init waits for every rank to reach it: part of a worker's start-up that grows with the others'
        self.start_cost = {
            "mpi_init_seconds": time.monotonic() - waited,
            "mpi_init_cpu_seconds": time.process_time() - cpu,
        }
        atexit.register(self.abandon)

    def exchange(self, entry: dict, expected: list[str]) -> dict:
        if self.comm.Get_size() != len(expected):
            raise RendezvousError(
                f"MPI world has {self.comm.Get_size()} ranks but the plan has "
                f"{len(expected)} workers; was srun started with --mpi=pmix over all het groups?"
            )
        self.barrier.wait()
        entries = self.comm.allgather(json.dumps(entry))
        self.done = True
        # MPI's work is done: finalize now, while every rank is here, not at exit, where MPI_Finalize waits
        # for every rank and held finished jobs to their time limit when some ranks exited early or failed
        from mpi4py import MPI

        MPI.Finalize()
        table = {e["worker"]: e for e in map(json.loads, entries)}
        if sorted(table) != sorted(expected):
            raise RendezvousError(f"MPI rendezvous got workers {sorted(table)}, expected {sorted(expected)}")
        return table

    def abandon(self) -> None:
        """At an exit before the allgather (also at exit): the others stop waiting for this worker, and MPI is
        finalized here, within the worker's exit bound. mpi4py would do it after the interpreter's teardown,
        which nothing bounds: a rank that hung there held a failed job to its time limit."""
        if self.done:
            return
        self.barrier.abandon()
        from mpi4py import MPI

        if not MPI.Is_finalized():
            MPI.Finalize()  # waits for every rank: they are all on their way out too
