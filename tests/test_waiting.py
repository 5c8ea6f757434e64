"""The launcher against a busy or forgetful cluster, without one: Slurm commands that do not answer, and a
job Slurm no longer knows (no accounting, and MinJobAge has passed). The Slurm commands are small fake
executables put first on PATH; the real ones are test_slurm_waiting's."""
import json
import os
import time

import pytest

from conftest import ROOT
from launcher import cli, runs, slurm, slurm_jobs, status
from launcher.commands import run as run_command
from srl_hpc import config
from srl_hpc.rundir import RunDir


@pytest.fixture
def fake_bin(tmp_path, monkeypatch):
    """fake_bin(name, body): an executable `name` running the shell `body`, found before the real one."""
    directory = tmp_path / "bin"
    directory.mkdir()
    monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ['PATH']}")

    def make(name, body):
        path = directory / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
        return path
    return make


@pytest.fixture
def forgotten(fake_bin):
    """A cluster without accounting whose slurmctld no longer knows any job (MinJobAge has passed)."""
    fake_bin("squeue", 'echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1')
    fake_bin("sacct", 'echo "Slurm accounting storage is disabled" >&2; exit 1')


def slurm_run(tmp_path, status_="succeeded", job_id="100", chain=()) -> RunDir:
    """A submitted run directory (its experiment, slurm.json, a controller log and, unless None, a summary)."""
    exp, run = runs.create(config.load(ROOT / "experiments" / "cartpole_ppo.yaml"), tmp_path / "run")
    run.slurm.write_text(json.dumps({"job_id": job_id, "command": "test", **({"chain": list(chain)} if chain else {})}))
    run.log("controller/0").write_text("progress line\n")
    if status_ is not None:
        run.summary.write_text(json.dumps({"status": status_, "reason": "wall time reached: 5s", "wall_time": 5.0,
                                           "env_frames": 1000, "frames_consumed": 900, "policy_version": 3}))
    return run


# ------------------------------------------------------------------------------------ a job Slurm forgot

def test_follow_and_status_of_a_finished_run_whose_job_slurm_no_longer_knows_end_with_its_outcome(tmp_path, forgotten,
                                                                                                   capsys):
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
