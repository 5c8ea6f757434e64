"""A Slurm run directory the job's nodes cannot see (each node has its own /tmp and /dev/shm, and a tmpfs is
one machine's memory) is refused before anything is submitted, with what to do instead."""

import sys
from pathlib import Path

import pytest

from conftest import ROOT
from launcher import cli, plan, slurm
from srl_hpc import config

MOUNTS = "\n".join(
    [
        "/dev/vda1 / ext4 rw 0 0",
        "tmpfs /dev/shm tmpfs rw,nosuid 0 0",
        "server:/home /home nfs4 rw 0 0",
        "tmpfs /scratch tmpfs rw,size=8g 0 0",
        "/dev/vdb /var/tmp xfs rw 0 0",
    ]
)


def test_a_run_directory_under_tmp_or_dev_shm_or_on_a_tmpfs_is_node_local():
    assert slurm.node_local_problem(Path("/tmp/runs/a"), MOUNTS) == "under /tmp, which each node has its own of"
    assert slurm.node_local_problem(Path("/tmp"), MOUNTS) == "under /tmp, which each node has its own of"
    assert slurm.node_local_problem(Path("/dev/shm/a"), MOUNTS) == "under /dev/shm, which each node has its own of"
    assert (
        slurm.node_local_problem(Path("/scratch/me/run"), MOUNTS)
        == "on a tmpfs (mounted on /scratch), which lives in one machine's memory"
    )
    for shared in ("/home/me/runs/a", "/var/tmp/run", "/tmpdata/run", "/work/runs/a"):
        assert slurm.node_local_problem(Path(shared), MOUNTS) is None, shared


def test_a_symlink_into_tmp_is_followed_and_both_paths_are_named(tmp_path):
    (tmp_path / "runs").symlink_to("/tmp")
    with pytest.raises(plan.PlanError) as refused:
        slurm.check_run_dir(tmp_path / "runs" / "srl-run")
    message = str(refused.value)
    assert f"run directory {tmp_path}/runs/srl-run (that is, /tmp/srl-run) is under /tmp" in message
    assert "the nodes cannot see it" in message and "--run-dir" in message and "every node mounts" in message
    slurm.check_run_dir(tmp_path / "run")  # tmp_path itself is under /var/tmp, which every node sees


def test_the_plan_for_slurm_refuses_it_so_the_python_api_and_resume_do_too(tmp_path):
    exp = config.load(ROOT / "experiments" / "cartpole_ppo.yaml")
    with pytest.raises(plan.PlanError, match="run directory /tmp/srl-never-made is under /tmp"):
        slurm.prepare(exp, Path("/tmp/srl-never-made"), sys.executable, "test", require_cluster=False)
    assert slurm.prepare(exp, tmp_path / "run", sys.executable, "test", require_cluster=False).script


def test_a_dry_run_into_tmp_is_an_error_and_writes_nothing(capsys):
    run_dir = Path("/tmp/srl-dry-run-never-made")
    code = cli.main(
        [str(ROOT / "experiments" / "cartpole_ppo.yaml"), "--slurm", "--dry-run", "--run-dir", str(run_dir)]
    )
    out, err = capsys.readouterr()
    assert code == 2 and "#SBATCH" not in out
    assert f"run directory {run_dir} is under /tmp" in err and "--run-dir" in err
    assert not run_dir.exists()
