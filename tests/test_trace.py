"""srl-trace: reading, analysis and the verdict, on constructed tables and on real local runs.

Three real runs (about 30 s each on two cores): the env-bound and trainer-bound testing experiments,
and one whose actor is SIGKILLed mid-run.
"""

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest

from conftest import ROOT, script, srl, srl_started, wait_until
from srl_hpc import config, graph
from srl_hpc.streams.shm import shm_name
from srl_hpc.trace import analysis, cli, reader, verdict, writer
from srl_hpc.trace.reader import RunTrace, WorkerTrace

SLOW_ENV = ROOT / "experiments" / "testing" / "slow_env.yaml"
SLOW_TRAINER = ROOT / "experiments" / "testing" / "slow_trainer.yaml"


def launch(experiment: Path, run_dir: Path) -> subprocess.CompletedProcess:
    proc = srl(experiment, "--run-dir", run_dir, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.fixture(scope="module")
def slow_env_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("trace") / "slow_env"
    launch(SLOW_ENV, run_dir)
    return run_dir


@pytest.fixture(scope="module")
def slow_trainer_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("trace") / "slow_trainer"
    launch(SLOW_TRAINER, run_dir)
    return run_dir


# ----------------------------------------------------------------------------------------------- constructed


def test_percentiles_of_a_known_sample():
    stats = analysis.percentiles(np.arange(1, 101))
    assert stats["n"] == 100 and stats["max"] == 100 and stats["mean"] == 50.5
    assert [stats["p50"], stats["p90"], stats["p99"]] == pytest.approx([50.5, 90.1, 99.01])
    assert analysis.percentiles([])["p50"] is None


def test_busy_time_splits_intervals_across_bins():
    # [0, 1) and [1.5, 3.5) over bins of 1 s
    busy = analysis.busy_time([0.0, 1.5], [1.0, 3.5], [0, 1, 2, 3, 4])
    assert busy == pytest.approx([1.0, 0.5, 1.0, 0.5])
    # with weights: 10 units spread over [0, 2), 4 over the instant 3
    units = analysis.busy_time([0.0, 3.0], [2.0, 3.0], [0, 1, 2, 3, 4], weights=[10, 4])
    assert units == pytest.approx([5, 5, 0, 4])


def trainer_worker(rows: int, wait: float, compute: float, publish: float = 0.0) -> WorkerTrace:
    """A trainer that repeats wait -> compute -> publish `rows` times, starting at t=100."""
    cycle = wait + compute + publish
    t = 100.0 + cycle * np.arange(1, rows + 1)
    table = {
        "t": t,
        "wait_seconds": np.full(rows, wait),
        "compute_seconds": np.full(rows, compute),
        "publish_seconds": np.full(rows, publish),
        "frames": np.full(rows, 1000),
    }
    return WorkerTrace(
        "trainer/0", Path("trainer-0.h5"), {"started": 100.0}, {"train_step": table}, handlers=("trainer",)
    )


def test_busy_fraction_and_throughput_of_a_constructed_trainer():
    worker = trainer_worker(rows=10, wait=0.2, compute=0.7, publish=0.1)
    shares = analysis.time_shares(worker)
    assert shares["computing"] + shares["publishing"] == pytest.approx(0.8)
    assert shares["waiting"] == pytest.approx(0.2) and shares["other"] == pytest.approx(0.0)
    run = RunTrace(Path("."), [worker], [], {})
    assert analysis.throughput(run)["trainer"]["per_second"] == pytest.approx(1000.0)  # 10,000 frames in 10 s
    assert analysis.summarize(run)["trainer_busy_fraction"] == pytest.approx(0.8)


def shares(kind: str, **values) -> dict:
    out = {activity: 0.0 for activity, *_ in analysis.ACTIVITIES[kind]}
    out.update(values)
    out["other"] = 1.0 - sum(out.values())
    return out


@pytest.mark.parametrize(
    "actor, policy, trainer, stage",
    [
        ({"stepping": 0.9, "waiting_inference": 0.05}, {"computing": 0.1}, {"computing": 0.2, "waiting": 0.8}, "env"),
        ({"stepping": 0.1, "sending": 0.8}, {"computing": 0.1}, {"computing": 0.7, "waiting": 0.3}, "trainer"),
        (
            {"stepping": 0.6, "waiting_inference": 0.3},
            {"computing": 0.2},
            {"computing": 0.95, "waiting": 0.05},
            "trainer",
        ),
        ({"stepping": 0.1, "sending": 0.8}, {"computing": 0.1}, {"computing": 0.2, "waiting": 0.8}, "transport"),
        (
            {"stepping": 0.2, "waiting_inference": 0.7},
            {"computing": 0.6, "replying": 0.2},
            {"computing": 0.3},
            "inference",
        ),
        ({"stepping": 0.2, "waiting_inference": 0.7}, {"computing": 0.1}, {"computing": 0.3}, "transport"),
    ],
)
def test_the_verdict_names_the_stage_that_bounds_throughput(actor, policy, trainer, stage):
    found = verdict.verdict(shares("actor", **actor), shares("policy", **policy), shares("trainer", **trainer))
    assert found.stage == stage
    assert "actors spend" in found.evidence


def test_verdict_without_actor_traces_is_unknown():
    assert verdict.verdict(None, None, shares("trainer", computing=0.5)).stage == "unknown"


def test_histogram_is_exact_for_small_values_and_power_of_two_beyond():
    assert analysis.histogram([1, 2, 2]) == [
        {"bucket": "0", "count": 0},
        {"bucket": "1", "count": 1},
        {"bucket": "2", "count": 2},
    ]
    assert [h["bucket"] for h in analysis.histogram([0, 40])][-2:] == ["16-31", "32-63"]


def write_trace(path: Path, tables: dict, **attrs):
    with h5py.File(path, "w") as f:
        f.attrs.update({"worker": "actor/0", "pid": 1, "started": 0.0, "format": reader.FORMAT, **attrs})
        for name, fields in tables.items():
            for field, values in fields.items():
                f.create_dataset(f"{name}/{field}", data=np.asarray(values))


def test_reader_cuts_a_table_to_its_shortest_field_and_notes_it(tmp_path):
    write_trace(
        tmp_path / "actor-0.h5", {"episode": {"t": [1.0, 2.0, 3.0], "episode_return": [10.0, 20.0]}}, flushed=3.0
    )
    worker, problems = reader.read_file(tmp_path / "actor-0.h5")
    assert problems == []
    assert len(worker.tables["episode"]["t"]) == 2 and len(worker.tables["episode"]["episode_return"]) == 2
    assert any("cut to 2 rows" in note for note in worker.notes)


def test_a_resumed_runs_attempts_are_read_as_one_trace_in_attempt_order(tmp_path):
    from srl_hpc.rundir import RunDir

    run = RunDir(tmp_path)
    run.traces.mkdir()
    assert run.trace("actor/0", 2).name == "actor-0.attempt-2.h5"
    for attempt, times in ((10, [30.0, 31.0]), (2, [20.0]), (1, [1.0, 2.0])):  # 10 sorts after 2, not before
        write_trace(run.trace("actor/0", attempt), {"episode": {"t": times, "episode_return": times}}, flushed=1.0)
    trace = reader.read_run(tmp_path)
    (worker,) = trace.workers
    assert worker.attempts == 3 and worker.tables["episode"]["t"].tolist() == [1.0, 2.0, 20.0, 30.0, 31.0]
    assert analysis.summarize(trace)["attempts"] == 3


def test_frames_are_accounted_for_from_the_traces_and_a_killed_actors_count_where_they_arrived(tmp_path):
    traces = tmp_path / "traces"
    traces.mkdir()
    sent = {"t": [1.0, 2.0, 3.0], "frames": [100, 100, 100]}
    write_trace(traces / "actor-0.h5", {"segment": sent}, worker="actor/0", flushed=3.0, closed=3.0)
    # actor/1 killed: its trace ends at its last flush (one of the two segments it sent)
    write_trace(traces / "actor-1.h5", {"segment": {"t": [1.0], "frames": [100]}}, worker="actor/1", flushed=1.0)
    write_trace(traces / "actor-2.h5", {}, worker="actor/2")  # killed before its first flush
    received = {"t": [1.5, 2.5, 2.6, 3.5, 3.6, 3.7], "frames": [100] * 6, "actor": [0, 1, 0, 1, 0, 2]}
    received["dropped"] = [False, False, True, False, False, False]
    trainer = {
        "segment": received,
        "train_step": {"t": [3.0, 3.8], "frames": [300, 100]},
        "dropped_at_stop": {"t": [4.0], "frames": [100]},
    }
    write_trace(traces / "trainer-0.h5", trainer, worker="trainer/0", flushed=4.0, closed=4.0)

    frames = analysis.summarize(reader.read_run(tmp_path))["frames"]
    assert (frames["sent"], frames["received"], frames["consumed"], frames["dropped"]) == (400, 600, 400, 200)
    assert frames["by_actor"] == {
        "actor/0": {"sent": 300, "received": 300},
        "actor/1": {"sent": 100, "received": 200},
        "actor/2": {"sent": 0, "received": 100},
    }
    assert frames["incomplete"] == ["actor/1", "actor/2"] and frames["mismatches"] == []

    received["frames"][0] = 90  # the trainer recorded a segment of actor/0 short
    write_trace(traces / "trainer-0.h5", trainer, worker="trainer/0", flushed=4.0, closed=4.0)
    frames = analysis.summarize(reader.read_run(tmp_path))["frames"]
    assert frames["mismatches"] == [
        "received 590 != trained 400 + dropped 200",
        "actor/0 sent 300, the trainers received 290 from it",
    ]
    assert "MISMATCH: actor/0 sent 300" in cli.format_summary(analysis.summarize(reader.read_run(tmp_path)))


def test_complete_traces_are_held_against_the_counters_of_summary_json(tmp_path):
    traces = tmp_path / "traces"
    traces.mkdir()
    write_trace(traces / "actor-0.h5", {"segment": {"t": [1.0, 2.0], "frames": [64, 64]}}, flushed=2.0, closed=2.0)
    trainer = {
        "segment": {"t": [1.5, 2.5], "frames": [64, 64], "actor": [0, 0], "dropped": [False, True]},
        "train_step": {"t": [2.0], "frames": [64]},
    }
    write_trace(traces / "trainer-0.h5", trainer, worker="trainer/0", flushed=3.0, closed=3.0)
    counted = {"frames_sent": 128, "frames_received": 128, "frames_consumed": 64, "frames_dropped": 64}
    (tmp_path / "summary.json").write_text(json.dumps(counted))
    summary = analysis.summarize(reader.read_run(tmp_path))
    assert summary["frames"]["mismatches"] == [] and len(summary["frames"]["checked_against_summary"]) == 4
    assert "as the workers counted them (summary.json)" in cli.format_summary(summary)

    (tmp_path / "summary.json").write_text(json.dumps({**counted, "frames_consumed": 0, "frames_dropped": 128}))
    frames = analysis.summarize(reader.read_run(tmp_path))["frames"]
    assert frames["mismatches"] == [
        "frames_consumed: the traces record 64, the workers counted 0 (summary.json)",
        "frames_dropped: the traces record 64, the workers counted 128 (summary.json)",
    ]


def test_reader_rejects_a_foreign_hdf5_file(tmp_path):
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f["x"] = [1, 2, 3]
    worker, problems = reader.read_file(tmp_path / "other.h5")
    assert worker is None and "not an srl-hpc trace" in problems[0].reason


def test_cli_errors_on_a_missing_dir_and_a_run_without_traces(tmp_path, capsys):
    assert cli.main([str(tmp_path / "nowhere")]) == 2
    assert "no such run directory" in capsys.readouterr().err
    assert cli.main([str(tmp_path)]) == 2
    assert "no trace files" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------- real runs


@pytest.mark.e2e
def test_a_run_leaves_one_trace_per_worker_and_srl_trace_reports_it(slow_trainer_run, tmp_path):
    exp = config.load(slow_trainer_run / "experiment.yaml")
    expected = sorted(name.replace("/", "-") + ".h5" for name in graph.build(exp).names)
    assert sorted(p.name for p in (slow_trainer_run / "traces").iterdir()) == expected

    plots = tmp_path / "plots"
    text = subprocess.run(
        [script("srl-trace"), str(slow_trainer_run), "--plot", str(plots)], capture_output=True, text=True, timeout=60
    )
    assert text.returncode == 0, text.stderr
    for words in (
        "throughput",
        "latency (ms)",
        "trainer busy fraction",
        "inference batch size",
        "policy lag",
        "episode return",
        "VERDICT",
    ):
        assert words in text.stdout
    for name in ("throughput.png", "latency.png", "timeline.png", "returns.png", "distributions.png"):
        png = (plots / name).read_bytes()
        assert png.startswith(b"\x89PNG") and len(png) > 10_000, name

    data = subprocess.run(
        [script("srl-trace"), str(slow_trainer_run), "--json"], capture_output=True, text=True, timeout=60
    )
    assert data.returncode == 0, data.stderr
    summary = json.loads(data.stdout)
    assert {
        "throughput",
        "latency",
        "time_shares",
        "trainer_busy_fraction",
        "batch_size",
        "policy_lag",
        "returns",
        "verdict",
        "problems",
        "workers",
    } <= summary.keys()
    assert {w["name"] for w in summary["workers"]} == set(graph.build(exp).names)
    assert summary["problems"] == []
    assert set(summary["throughput"]) == {"actor", "policy", "trainer"}
    for stage in (
        "env_step",
        "inference_latency",
        "policy_queue_wait",
        "policy_compute",
        "trainer_wait",
        "trainer_compute",
        "sample_send_wait",
    ):
        stats = summary["latency"][stage]
        assert stats["n"] > 0 and stats["p99"] >= stats["p50"], stage


@pytest.mark.e2e
def test_verdicts_of_the_constructed_runs(slow_env_run, slow_trainer_run, capsys):
    env = analysis.summarize(reader.read_run(slow_env_run))
    trainer = analysis.summarize(reader.read_run(slow_trainer_run))
    assert env["verdict"]["stage"] == "env", env["verdict"]
    assert trainer["verdict"]["stage"] == "trainer", trainer["verdict"]
    assert cli.main(["compare", str(slow_env_run), str(slow_trainer_run)]) == 0
    verdict_row = [line for line in capsys.readouterr().out.splitlines() if line.startswith("verdict")]
    assert verdict_row and verdict_row[0].split()[1:] == ["env", "trainer"]


@pytest.mark.e2e
def test_truncated_and_non_hdf5_files_are_named_and_the_rest_is_analysed(slow_env_run, tmp_path, capsys):
    run = tmp_path / "damaged"
    shutil.copytree(slow_env_run, run)
    truncated = run / "traces" / "actor-1.h5"
    os.truncate(truncated, truncated.stat().st_size // 2)
    (run / "traces" / "notes.h5").write_text("not a trace\n")

    assert cli.main([str(run)]) == 0
    out = capsys.readouterr().out
    assert "actor-1.h5: truncated" in out and "notes.h5: not an HDF5 file" in out
    assert cli.main([str(run), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert {p["file"] for p in summary["problems"]} == {"actor-1.h5", "notes.h5"}
    assert {w["name"] for w in summary["workers"]} == {"controller/0", "trainer/0", "policy/0", "actor/0"}
    assert summary["throughput"]["actor"]["workers"] == 1 and summary["verdict"]["stage"] == "env"


@pytest.mark.e2e
def test_a_sigkilled_worker_trace_is_read_up_to_its_last_flush(tmp_path):
    run_dir = tmp_path / "killed"
    # not replaced: the run fails
    proc, output = srl_started(SLOW_ENV, "--run-dir", run_dir, "--set", "workers.actor.max_restarts=0")
    victim = run_dir / "traces" / "actor-0.h5"

    def flushed():  # a few flushes in: the first one holds a single row
        assert proc.poll() is None, "the run ended before the actor flushed 100 env steps"
        worker = reader.read_file(victim)[0] if victim.exists() else None  # a read racing a flush may fail
        return worker if worker is not None and len(worker.table("env_step")["t"]) >= 100 else None

    try:
        worker = wait_until(flushed, 60, "the actor to flush 100 env steps", interval=0.2)
        rows = len(worker.table("env_step")["t"])
        os.kill(worker.attrs["pid"], signal.SIGKILL)
        out = output.finish(90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, out
    assert "actor/0" in out and "SIGKILL" in out

    run = reader.read_run(run_dir)
    killed = next(w for w in run.workers if w.name == "actor/0")
    env_steps = killed.table("env_step")
    assert len(env_steps["t"]) >= rows
    assert all(len(v) == len(tab["t"]) for tab in killed.tables.values() for v in tab.values())
    assert env_steps["t"].max() <= killed.attrs["flushed"]
    survivor = next(w for w in run.workers if w.name == "actor/1")
    assert survivor.table("env_step")["t"].max() > env_steps["t"].max()  # it kept going after the kill
    assert not [p for p in run.problems if p.path.name == "actor-0.h5"]
    assert not (Path("/dev/shm") / shm_name(run_dir, "actor/0")).exists()  # its shared memory was removed
    summary = json.loads((run_dir / "summary.json").read_text())  # the local launcher told the controller
    assert summary["status"] == "failed"
    assert summary["failed_workers"]["actor/0"] == "process was killed by SIGKILL"  # max_restarts 0: no supervisor
    assert cli.main([str(run_dir)]) == 0


def test_a_worker_that_records_little_is_flushed_at_its_heartbeat_not_after_many_rows(tmp_path):
    path = tmp_path / "eval-0.h5"
    trace = writer.TraceWriter(path, "eval/0", flush_interval=0.0)
    for round_ in range(3):  # far fewer than record() counts before it looks at the clock
        trace.record("eval_round", version=round_)
    trace.flush_if_due()  # (the first look starts the clock)
    assert reader.read_file(path)[0].tables == {}
    trace.flush_if_due()
    assert list(reader.read_file(path)[0].table("eval_round")["version"]) == [0, 1, 2]
    trace.close()
