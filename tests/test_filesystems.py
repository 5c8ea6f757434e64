"""Run directories on shared filesystems (Lustre, GPFS, NFS): no working locks, one metadata server for all.

The traces are written and read without HDF5's file locks, and a worker's trace costs the metadata server
one open for the whole run, not one per flush. A real local run under tests/nolock_shim.c, an LD_PRELOAD
shim that refuses every lock on the files of the test's directory (ENOLCK, as NFS without lockd does),
shows both: it succeeds and srl-trace reads it. The shim is proven to refuse first: h5py with its default
locking fails under it.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap

import h5py
import pytest

from conftest import ROOT, script, srl
from srl_hpc.trace import reader, writer
from srl_hpc.trace.writer import TraceWriter

CARTPOLE = ROOT / "experiments" / "cartpole_ppo.yaml"


def python_under(env, code: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=60, **kwargs
    )


# ----------------------------------------------------------------------------------------------- the writer


def test_a_trace_writer_opens_its_file_once_and_never_stats_it(tmp_path, monkeypatch):
    path = tmp_path / "actor-0.h5"
    opens, stats = [], []
    real_file, real_stat = h5py.File, os.stat
    monkeypatch.setattr(h5py, "File", lambda *a, **k: opens.append(a) or real_file(*a, **k))
    monkeypatch.setattr(
        os, "stat", lambda p, *a, **k: (stats.append(p) if str(p) == str(path) else None) or real_stat(p, *a, **k)
    )
    trace = TraceWriter(path, "actor/0", flush_interval=0.0)  # flushes at every look at the clock
    for i in range(10 * writer.CHECK_EVERY):
        trace.record("env_step", seconds=0.001, step=i)
    trace.close()
    monkeypatch.undo()
    assert len(opens) == 1, f"{len(opens)} opens for 9 flushes: a metadata-server operation per flush"
    assert stats == []
    worker, problems = reader.read_file(path)
    assert problems == [] and worker.table("env_step")["step"].tolist() == list(range(10 * writer.CHECK_EVERY))
    trace.record("env_step", seconds=0.0, step=-1)  # after close: ignored, no error
    trace.flush()


def test_a_live_trace_reads_up_to_its_last_flush_and_after_a_sigkill(tmp_path):
    """srl-trace on a running run, and on one whose worker was killed, while the writer keeps its file open."""
    path = tmp_path / "actor-0.h5"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import sys, time
        from srl_hpc.trace.writer import TraceWriter
        trace = TraceWriter({str(path)!r}, "actor/0")
        for i in range(300):
            trace.record("env_step", step=i)
        trace.flush()
        print("flushed", flush=True)
        for i in range(300, 400):  # recorded, never flushed: lost at the kill
            trace.record("env_step", step=i)
        time.sleep(60)
        """),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline() == "flushed\n"
        for _ in range(2):  # while it runs, then after a SIGKILL
            worker, problems = reader.read_file(path)
            assert problems == [] and worker.notes == []
            assert worker.table("env_step")["step"].tolist() == list(range(300))
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
    finally:
        proc.kill()
        proc.wait(timeout=60)


# ----------------------------------------------------------------------------------------------- no locks


def test_the_shim_refuses_locks_so_hdf5s_default_fails_under_it(nolock_env, tmp_path):
    proc = python_under(
        nolock_env,
        f"""
        import errno, fcntl, h5py
        with open({str(tmp_path / "plain")!r}, "w") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX)
            except OSError as e:
                assert e.errno == errno.ENOLCK, e
            else:
                raise SystemExit("flock succeeded under the shim")
        h5py.File({str(tmp_path / "locked.h5")!r}, "w")  # h5py's default: locking=True
        """,
    )
    assert proc.returncode != 0 and "unable to lock file" in proc.stderr, proc.stderr


def test_traces_are_written_and_read_where_locks_are_refused(nolock_env, tmp_path):
    path = tmp_path / "traces" / "actor-0.h5"
    proc = python_under(
        nolock_env,
        f"""
        from srl_hpc.trace import reader
        from srl_hpc.trace.writer import TraceWriter
        trace = TraceWriter({str(path)!r}, "actor/0")
        for i in range(100):
            trace.record("env_step", step=i)
        trace.close()
        worker, problems = reader.read_file(trace.path)
        assert not problems, problems
        print(len(worker.table("env_step")["step"]))
        """,
    )
    assert proc.returncode == 0 and proc.stdout.split() == ["100"], proc.stderr


def test_the_parameter_database_works_where_locks_are_refused(nolock_env, tmp_path):
    proc = python_under(
        nolock_env,
        f"""
        import numpy as np
        from srl_hpc.services.parameter_db import ParameterDB
        db = ParameterDB({str(tmp_path / "parameters" / "default")!r})
        for v in range(5):
            db.put(v, {{"w": np.full(3, v)}})
        db.tag("latest", 4)
        db.tag("snapshot-2", 2)
        db.collect(keep_newest=1)
        print(db.versions(), db.get(tag="snapshot-2")[1]["w"].tolist())
        """,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "[2, 4] [2, 2, 2]", proc.stderr


@pytest.mark.e2e
def test_a_local_run_succeeds_where_locks_are_refused_and_srl_trace_reads_it(nolock_env, tmp_path):
    run_dir = tmp_path / "run"
    sets = ["stop.wall_time=6", "stop.target_return=null", "monitor.status_interval=2"]
    proc = srl(
        CARTPOLE, "--run-dir", run_dir, *(arg for s in sets for arg in ("--set", s)), timeout=120, env=nolock_env
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "succeeded" and summary["policy_version"] > 1, summary
    assert (run_dir / "parameters" / "default" / "tags" / "latest").exists()  # the parameter database too
    assert sorted(p.name for p in (run_dir / "traces").iterdir()) == [
        "actor-0.h5",
        "actor-1.h5",
        "controller-0.h5",
        "policy-0.h5",
        "trainer-0.h5",
    ]

    data = subprocess.run(
        [script("srl-trace"), str(run_dir), "--json"], env=nolock_env, capture_output=True, text=True, timeout=60
    )
    assert data.returncode == 0, data.stderr
    read = json.loads(data.stdout)
    assert read["problems"] == []
    assert {w["name"] for w in read["workers"]} == {"controller/0", "trainer/0", "policy/0", "actor/0", "actor/1"}
    assert read["throughput"]["trainer"]["per_second"] > 0
