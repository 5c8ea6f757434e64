"""Waiting and chains against the project's real local Slurm (scripts/local_slurm.sh start): a held job's
pending reason and expected start in `--follow` and `status`, and continuation jobs that carry a run on
after its job was stopped (resume --chain)."""

import json
import subprocess

import pytest

import launcher
from conftest import ROOT, srl, srl_started, wait_until
from launcher import slurm, slurm_jobs
from srl_hpc.rundir import RunDir

pytestmark = pytest.mark.slurm

SHORT = ["stop.target_return=null", "stop.wall_time=5", "monitor.status_interval=1"]


def sets(overrides):
    return [arg for o in overrides for arg in ("--set", o)]


def test_a_held_job_shows_its_reason_and_expected_start_in_follow_and_status_then_runs_to_its_end(tmp_path):
    run_dir = tmp_path / "run"
    follow, out = srl_started(
        ROOT / "experiments" / "cartpole_ppo.yaml",
        "--slurm",
        "--follow",
        "--run-dir",
        run_dir,
        *sets([*SHORT, "slurm.sbatch_options=[--hold]"]),
    )
    try:
        job_id = out.next_matching(lambda line: line.startswith("submitted job "), 60).split()[2].rstrip(";")
        # the first look is at once: held, and Slurm has no start time for a held job
        assert (
            out.next_matching(lambda line: " pending (" in line, 30)
            == f"job {job_id} pending (JobHeldUser), expected start unknown"
        )
        status = srl("status", run_dir)
        assert status.returncode == 0 and "state: pending" in status.stdout, status.stdout + status.stderr
        assert f"slurm job {job_id}: PENDING (JobHeldUser), expected start unknown" in status.stdout
        subprocess.run(["scontrol", "release", job_id], check=True, timeout=30)
        # it runs; its summary makes the follower look again at once, not a minute after its last look
        out.next_matching(lambda line: line == f"job {job_id} ended: completed", 150)
        assert follow.wait(timeout=30) == 0
        assert sum(" pending (" in line for line in out.seen) == 1  # said once, not at every look
    finally:
        if follow.poll() is None:
            follow.kill()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "succeeded" and summary["reason"].startswith("wall time")


def test_resume_chain_carries_a_stopped_run_on_in_a_continuation_job_and_the_next_one_ends_at_once(tmp_path):
    """For clusters where a job may not requeue itself: the run's job is stopped (here by scancel, on a real
    cluster by its time limit), the first continuation resumes it from its checkpoint to its stop, and the
    second finds the run succeeded and exits without training."""
    run = launcher.submit(
        ROOT / "experiments" / "cartpole_ppo.yaml",
        slurm=True,
        run_dir=tmp_path / "run",
        overrides=["stop.target_return=null", "stop.wall_time=20", "workers.trainer.checkpoint_interval=5"],
    )
    wait_until(
        lambda: " version " in run.logs() and int(run.logs().rsplit("| version", 1)[1].split()[0]) >= 5,
        120,
        "a few trained versions in the controller log",
        lambda: run.logs()[-3000:],
        interval=0.5,
    )
    chained = srl("resume", run.run_dir, "--chain", "2")
    assert chained.returncode == 0, chained.stdout + chained.stderr
    first, second = slurm.jobs_of(RunDir(run.run_dir))[1:]
    assert f"queued job {first}, {second}, after job {run.job_id}" in chained.stdout
    waiting = srl("status", run.run_dir).stdout
    assert f"slurm job {run.job_id}: RUNNING" in waiting and f"{first} PENDING (Dependency)" in waiting, waiting
    subprocess.run(["scancel", run.job_id], check=True, timeout=30)  # only the run's job: the chain goes on
    assert slurm_jobs.wait(second, run=RunDir(run.run_dir), timeout=400) == "completed"
    attempt1 = json.loads((run.run_dir / "summary.attempt-1.json").read_text())
    summary = json.loads((run.run_dir / "summary.json").read_text())
    assert attempt1["status"] == "cancelled" and attempt1["policy_version"] > 0
    assert summary["status"] == "succeeded" and summary["attempt"] == 2
    assert summary["reason"] == "wall time reached: 20s"
    assert f"version {attempt1['policy_version']}, " in (run.run_dir / "logs" / "trainer-0.log").read_text()  # resumed
    assert "the run has already succeeded: nothing to continue" in (run.run_dir / f"slurm-{second}.out").read_text()
    states = slurm_jobs.job_states([run.job_id, first, second])
    assert [states[j].state for j in (run.job_id, first, second)] == ["cancelled", "completed", "completed"]
    report = srl("status", run.run_dir).stdout
    assert "(attempt 2)" in report and f"slurm job {second}: COMPLETED" in report
