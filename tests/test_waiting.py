"""The launcher against a busy or forgetful cluster, without one: Slurm commands that do not answer, and a
job Slurm no longer knows (no accounting, and MinJobAge has passed). The Slurm commands are small fake
executables put first on PATH; the real ones are test_slurm_waiting's."""

import time

import pytest

from conftest import slurm_run
from launcher import cli, slurm, slurm_jobs, status
from launcher.commands import run as run_command


@pytest.fixture
def forgotten(fake_bin):
    """A cluster without accounting whose slurmctld no longer knows any job (MinJobAge has passed)."""
    fake_bin("squeue", 'echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1')
    fake_bin("sacct", 'echo "Slurm accounting storage is disabled" >&2; exit 1')


# ------------------------------------------------------------------------------------ a job Slurm forgot


def test_follow_and_status_of_a_finished_run_whose_job_slurm_no_longer_knows_end_with_its_outcome(
    tmp_path, forgotten, capsys
):
    run = slurm_run(tmp_path)
    started = time.monotonic()
    assert run_command.follow(run, "100") == 0  # the loop ends, with the summary's outcome
    assert time.monotonic() - started < 10
    out = capsys.readouterr().out
    assert "progress line" in out and "job 100 ended: completed" in out
    state, report = status.describe(run)
    assert state == "completed" and "slurm job 100: UNKNOWN" in report and "the run's state is its summary's" in report
    failed = slurm_run(tmp_path / "failed", status_="failed")
    assert slurm_jobs.wait("100", run=failed, timeout=10) == "failed"


def test_logs_follow_ends_once_the_run_has_ended_and_slurm_no_longer_knows_its_job(tmp_path, forgotten, capsys):
    run = slurm_run(tmp_path)
    started = time.monotonic()
    assert cli.main(["logs", str(run.root), "-f"]) == 0
    assert time.monotonic() - started < 10 and "progress line" in capsys.readouterr().out


@pytest.mark.slow
def test_a_run_that_never_concluded_is_not_given_up_at_the_first_unknown(tmp_path, forgotten):
    run = slurm_run(tmp_path, status_=None)
    with pytest.raises(TimeoutError, match="still unknown"):
        slurm_jobs.wait("100", run=run, timeout=2)


# ------------------------------------------------------------------------------- Slurm does not answer


@pytest.mark.slow
def test_a_slurm_command_that_does_not_answer_is_a_clear_error_naming_it(tmp_path, fake_bin, monkeypatch, capsys):
    monkeypatch.setattr(slurm, "TIMEOUT", 0.5)
    for name in ("squeue", "sbatch", "scancel", "sinfo", "sacct"):
        fake_bin(name, "exec sleep 30")
    started = time.monotonic()
    with pytest.raises(slurm.SlurmError, match=r"^squeue did not answer within 0.5 s: slurmctld is not answering"):
        slurm_jobs.job_state("100")
    with pytest.raises(slurm.SlurmError, match="may still have been submitted"):
        slurm.submit(slurm.Request(None, "#!/bin/sh\n", None), slurm_run(tmp_path), "test")
    with pytest.raises(slurm.SlurmError, match="^sinfo did not answer"):
        slurm.cluster_facts()
    with pytest.raises(slurm.SlurmError, match="^scancel did not answer"):
        slurm_jobs.cancel("100")
    assert time.monotonic() - started < 10
    assert cli.main(["status", str(tmp_path / "run")]) == 3  # Slurm did not answer: said, not a traceback
    err = capsys.readouterr().err
    assert err.startswith("srl-launch: squeue did not answer within 0.5 s") and "Traceback" not in err
