"""The start-up barrier of Slurm mode (srl_hpc.services.rendezvous.FileBarrier), on real files: each worker
in its own thread, as each rank is its own process under Slurm."""

import threading
import time

import pytest

from srl_hpc.rundir import RunDir
from srl_hpc.services.rendezvous import FileBarrier, FileRendezvous, RendezvousError, abandoned_by

NAMES = ["controller", "trainer/0", "actor/0", "actor/1", "actor/2"]


def _run_all(run, names, work):
    """work(name) in a thread per worker; returns {name: the exception it raised, or None}."""
    outcome = {}

    def target(name):
        try:
            work(name)
            outcome[name] = None
        except RendezvousError as exc:
            outcome[name] = exc

    threads = [threading.Thread(target=target, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "a worker is still waiting at the barrier"
    return outcome


def test_every_worker_passes_once_all_arrived(tmp_path):
    run = RunDir(tmp_path)
    passed_before_last_arrived = []
    last = threading.Event()

    def work(name):
        if name == "actor/2":  # the straggler: arrives after the others are already waiting
            threading.Timer(0.5, last.set).start()
            last.wait()
        FileBarrier(run, NAMES, name).wait()
        if not last.is_set():
            passed_before_last_arrived.append(name)

    assert _run_all(run, NAMES, work) == {n: None for n in NAMES}
    assert passed_before_last_arrived == []
    assert run.barrier_go.read_text() == ""
    assert abandoned_by(run) is None


def test_a_worker_that_gives_up_stops_everyone_naming_it_and_quoting_its_log(tmp_path):
    run = RunDir(tmp_path)
    run.logs.mkdir()
    run.log("actor/1").write_text("starting\nOSError: [Errno 19] No such device: 'ib0'\n")

    def work(name):
        barrier = FileBarrier(run, NAMES, name, timeout=20)
        if name == "actor/1":
            barrier.abandon()
            return
        barrier.wait()

    outcome = _run_all(run, NAMES, work)
    assert outcome.pop("actor/1") is None
    assert all(
        f"rendezvous abandoned: actor/1 exited before it; the last lines of {run.log('actor/1')}:\n"
        f"starting\nOSError: [Errno 19] No such device: 'ib0'" in str(exc)
        for exc in outcome.values()
    ), outcome
    assert abandoned_by(run) == "actor/1"


def test_the_leader_abandoning_stops_everyone(tmp_path):
    run = RunDir(tmp_path)
    FileBarrier(run, NAMES, "controller").abandon()
    with pytest.raises(RendezvousError, match="controller exited before it"):
        FileBarrier(run, NAMES, "actor/0", timeout=5).wait()


@pytest.mark.slow  # (4 s of waiting)
def test_the_timeout_counts_from_the_last_arrival_not_from_the_start(tmp_path):
    """Workers still arriving are progress: with a timeout of 3 s, a worker that arrives after about 1 s gives
    the others another full timeout; the wait ends at the timeout after that last arrival, naming who never
    came. (The late arrival has 2 s of slack before the others' first deadline, for a loaded machine.)"""
    run = RunDir(tmp_path)
    late_arrival = threading.Event()
    arrived = {}

    def work(name):
        if name == "actor/0":
            late_arrival.wait()  # set by the timer below, well inside the others' first timeout
            arrived[name] = time.monotonic()
        FileBarrier(run, NAMES, name, timeout=3.0).wait()

    threading.Timer(1.0, late_arrival.set).start()
    started = time.monotonic()
    outcome = _run_all(run, NAMES[:3], work)
    waited = time.monotonic() - started
    assert "2 of 5 workers never arrived: actor/1, actor/2" in str(outcome["controller"])
    late = arrived["actor/0"] - started
    assert late < 3.0, late  # (else the others' first deadline came before it: the test proves nothing)
    assert late + 3.0 - 0.2 <= waited < late + 8, (late, waited)  # the count restarted at the late arrival


def test_a_timeout_names_the_workers_that_never_arrived(tmp_path):
    run = RunDir(tmp_path)
    outcome = _run_all(run, NAMES[:3], lambda name: FileBarrier(run, NAMES, name, timeout=0.5).wait())
    assert "2 of 5 workers never arrived: actor/1, actor/2" in str(outcome["controller"])
    assert "controller, which waits for every worker, never said go" in str(outcome["actor/0"])


def test_at_ten_thousand_workers_the_metadata_load_stays_bounded(tmp_path):
    names = ["controller/0"] + [f"actor/{i}" for i in range(9_999)]
    barriers = [FileBarrier(RunDir(tmp_path), names, name) for name in names[:100]]
    worker = barriers[1]
    assert len(names) / worker.interval <= 200  # stats of the go file a second, all workers together
    assert barriers[0].lead_interval <= 1.0  # the leader's listings: one a second
    assert worker.interval <= 60  # the go reaches the last worker within a minute
    phases = [b.phase for b in barriers]  # workers arriving together look at different moments
    assert len(set(phases)) == len(phases) and all(0 <= p < worker.interval for p in phases)


@pytest.mark.slow
def test_many_waiting_workers_stat_the_go_file_at_a_bounded_rate(tmp_path, monkeypatch):
    """300 workers wait for one that never comes: the stats of the go file and the leader's listings,
    counted per second of the wait. Looking every N / 1000 s, as before, was 1,000 stats a second."""
    import os
    import time

    run = RunDir(tmp_path)
    names = ["controller/0"] + [f"actor/{i}" for i in range(300)]
    go, arrivals = str(run.barrier_go), str(run.barrier_arrivals)
    stats, listings = [], []
    real_stat, real_listdir, real_scandir = os.stat, os.listdir, os.scandir

    def stat(path, *args, **kwargs):
        if str(path) == go:
            stats.append(time.monotonic())
        return real_stat(path, *args, **kwargs)

    def listing(real):
        def call(path=".", *args, **kwargs):
            if str(path) == arrivals:
                listings.append(time.monotonic())
            return real(path, *args, **kwargs)

        return call

    monkeypatch.setattr(os, "stat", stat)
    monkeypatch.setattr(os, "listdir", listing(real_listdir))
    monkeypatch.setattr(os, "scandir", listing(real_scandir))
    timeout = 4.0
    start = time.monotonic()
    outcome = _run_all(run, names[:-1], lambda name: FileBarrier(run, names, name, timeout=timeout).wait())
    monkeypatch.undo()
    assert "1 of 301 workers never arrived: actor/299" in str(outcome["controller/0"])
    assert all(isinstance(exc, RendezvousError) for exc in outcome.values())
    window = (start + 0.5, start + timeout - 0.5)  # the wait, without its start and its end at the timeout
    seconds = window[1] - window[0]
    in_window = [t for t in stats if window[0] <= t < window[1]]
    assert 0 < len(in_window) / seconds <= 250, f"{len(in_window) / seconds:.0f} stats of the go file a second"
    assert sum(window[0] <= t < window[1] for t in listings) <= seconds + 1, f"{len(listings)} listings"


def test_without_mpi_each_worker_reads_one_table_the_leader_wrote_not_every_entry(tmp_path, monkeypatch):
    """slurm.mpi: none: the entries meet behind the barrier; N workers reading N files each would be N x N
    opens on the metadata server, so the leader merges them once, before it says go."""
    run, tables, merges = RunDir(tmp_path), {}, []
    read = FileRendezvous._read
    monkeypatch.setattr(FileRendezvous, "_read", lambda self, names: merges.append(1) or read(self, names))

    def work(name):
        rendezvous = FileRendezvous(run, len(NAMES), barrier=FileBarrier(run, NAMES, name))
        tables[name] = rendezvous.exchange({"worker": name, "host": "10.0.0.1", "ports": {}}, NAMES)

    assert _run_all(run, NAMES, work) == {n: None for n in NAMES}
    assert all(sorted(t) == sorted(NAMES) for t in tables.values()) and len(merges) == 1
