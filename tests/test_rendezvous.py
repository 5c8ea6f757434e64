"""The start-up barrier of Slurm mode (srl_hpc.services.rendezvous.FileBarrier), on real files: each worker
in its own thread, as each rank is its own process under Slurm."""
import threading

import pytest

from srl_hpc.rundir import RunDir
from srl_hpc.services.rendezvous import FileBarrier, RendezvousError, abandoned_by

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


def test_a_worker_that_gives_up_stops_everyone_with_its_reason(tmp_path):
    run = RunDir(tmp_path)

    def work(name):
        barrier = FileBarrier(run, NAMES, name, timeout=20)
        if name == "actor/1":
            barrier.abandon()
            return
        barrier.wait()

    outcome = _run_all(run, NAMES, work)
    assert outcome.pop("actor/1") is None
    assert all("rendezvous abandoned: actor/1 exited before it (its log: " in str(exc) for exc in outcome.values()), outcome
    assert abandoned_by(run) == "actor/1"


def test_the_leader_abandoning_stops_everyone(tmp_path):
    run = RunDir(tmp_path)
    FileBarrier(run, NAMES, "controller").abandon()
    with pytest.raises(RendezvousError, match="controller exited before it"):
        FileBarrier(run, NAMES, "actor/0", timeout=5).wait()


def test_a_timeout_names_the_workers_that_never_arrived(tmp_path):
    run = RunDir(tmp_path)
    outcome = _run_all(run, NAMES[:3], lambda name: FileBarrier(run, NAMES, name, timeout=0.5).wait())
    assert "2 of 5 workers never arrived: actor/1, actor/2" in str(outcome["controller"])
    assert "controller, which waits for every worker, never said go" in str(outcome["actor/0"])
