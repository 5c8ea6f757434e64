"""As an ordinary user, as on every real cluster: the local Slurm's user `srl-user` (scripts/local_slurm.sh) submits
from its own home with a site-wide install of srl-hpc it cannot write (`make user-install`), and its tasks run as
that user on the nodes. What only root could do fails here first."""

import json
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import ROOT, assert_every_frame_accounted_for

pytestmark = pytest.mark.slurm

USER = "srl-user"
USER_VENV = Path(os.environ.get("SRL_USER_VENV", "/opt/srl-hpc-user"))


@pytest.fixture
def home(tmp_path):
    """A fresh directory in the user's home, the shipped CartPole experiment and the local profile in it."""
    try:
        account = pwd.getpwnam(USER)
    except KeyError:
        pytest.fail(f"no user {USER}: scripts/local_slurm.sh start creates it")
    if not (USER_VENV / "bin" / "srl-launch").exists():
        pytest.fail(f"no {USER_VENV}/bin/srl-launch: make user-install")
    where = Path(tempfile.mkdtemp(prefix=f"{tmp_path.name}-", dir=account.pw_dir))
    for source in (ROOT / "experiments" / "cartpole_ppo.yaml", ROOT / "clusters" / "local.yaml"):
        shutil.copy(source, where / source.name)
    shutil.chown(where, USER, USER)
    for f in where.iterdir():
        shutil.chown(f, USER, USER)
    yield where
    shutil.rmtree(where, ignore_errors=True)


def as_user(*args, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """srl-launch ARGS run by the ordinary user from `cwd`, with a login environment of its own."""
    command = [
        "runuser",
        "-u",
        USER,
        "--",
        "env",
        "-i",
        f"HOME={cwd.parent}",
        f"USER={USER}",
        "PATH=/usr/local/bin:/usr/bin:/bin",
        str(USER_VENV / "bin" / "srl-launch"),
        *map(str, args),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=cwd)


@pytest.mark.parametrize("layout", ["hetjob", "jobs"])
def test_the_shipped_cartpole_runs_as_an_ordinary_user_whose_jobs_and_files_it_is(home, layout):
    proc = as_user(
        "cartpole_ppo.yaml",
        "--slurm",
        "--follow",
        "--profile",
        "local.yaml",
        "--run-dir",
        "run",
        "--set",
        f"slurm.layout={layout}",
        "--set",
        "stop.target_return=null",  # what running as the user changes, not learning: a stop of its own
        "--set",
        "stop.wall_time=10",
        cwd=home,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    run_dir = home / "run"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "succeeded" and summary["reason"].startswith("wall time"), summary
    assert summary["policy_version"] > 1
    assert_every_frame_accounted_for(summary)
    uid = pwd.getpwnam(USER).pw_uid
    written = [run_dir / "summary.json", *(run_dir / "traces").iterdir(), *(run_dir / "checkpoints").iterdir()]
    assert {p.stat().st_uid for p in written} == {uid}  # the workers ran as the user on the nodes
    record = json.loads((run_dir / "slurm.json").read_text())
    jobs = list(record["groups"].values()) if layout == "jobs" else [record["job_id"]]
    assert len(jobs) == (3 if layout == "jobs" else 1), record
    for job in jobs:
        shown = subprocess.run(["scontrol", "show", "job", str(job)], capture_output=True, text=True).stdout
        assert f"UserId={USER}(" in shown, shown


@pytest.mark.parametrize("layout", ["hetjob", "jobs"])
def test_a_qos_too_small_for_the_run_is_refused_before_anything_is_submitted(home, layout):
    queued = ["squeue", "-h", "-u", USER, "-o", "%i"]
    before = subprocess.run(queued, capture_output=True, text=True, timeout=60).stdout.split()
    proc = as_user(
        "cartpole_ppo.yaml",
        "--slurm",
        "--profile",
        "local.yaml",
        "--run-dir",
        "run",
        "--set",
        f"slurm.layout={layout}",
        "--set",
        "slurm.qos=small",
        cwd=home,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert (
        "QOS 'small' runs at most 2 of your jobs at once (MaxJobsPerUser), and this run needs 3 jobs" in proc.stderr
    ), proc.stderr
    assert not (home / "run").exists()
    assert subprocess.run(queued, capture_output=True, text=True, timeout=60).stdout.split() == before


def test_a_run_directory_the_user_cannot_write_is_refused_before_submission(home):
    proc = as_user(
        "cartpole_ppo.yaml", "--slurm", "--profile", "local.yaml", "--run-dir", "/var/lib/srl-run", cwd=home, timeout=60
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "/var/lib/srl-run" in proc.stderr and "ermission denied" in proc.stderr, proc.stderr
    assert not Path("/var/lib/srl-run").exists()
