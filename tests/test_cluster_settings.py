"""A cluster's settings in one file (--cluster or $SRL_CLUSTER), shared by every experiment: its slurm:
section is the base, an experiment's own slurm: keys win, and its problems are named with its own lines."""
import pytest

from conftest import ROOT
from launcher import cli
from srl_hpc import config

CLUSTER = """\
slurm:
  network: ib0
  mpi: none
  account: rl-lab
  actor: {partition: cpu, cpus_per_task: 1, tasks_per_node: 2}
  trainer: {partition: gpu, gpus_per_node: 1}
"""
EXPERIMENT = """\
name: mine
stop: {wall_time: 60}
slurm:
  time: "00:30:00"
  actor: {cpus_per_task: 2}
"""


def files(tmp_path, cluster=CLUSTER, experiment=EXPERIMENT):
    (tmp_path / "cluster.yaml").write_text(cluster)
    (tmp_path / "exp.yaml").write_text(experiment)
    return tmp_path / "exp.yaml", tmp_path / "cluster.yaml"


def test_the_cluster_file_is_the_base_and_the_experiments_own_keys_win(tmp_path):
    exp_path, cluster = files(tmp_path)
    exp = config.load(exp_path, cluster=cluster)
    s = exp.slurm
    assert (s.network, s.mpi, s.account, s.time) == ("ib0", "none", "rl-lab", "00:30:00")
    assert (s.actor.partition, s.actor.cpus_per_task, s.actor.tasks_per_node) == ("cpu", 2, 2)  # merged per group
    assert (s.trainer.partition, s.trainer.gpus_per_node) == ("gpu", 1)
    assert config.load(exp_path).slurm.network != "ib0"  # without it, the experiment alone


def test_a_problem_in_the_cluster_file_is_named_with_its_file_and_line(tmp_path):
    exp_path, cluster = files(tmp_path, cluster="slurm:\n  network: ib0\n  actor: {cpus_per_tsk: 1}\nworkers: {}\n")
    with pytest.raises(config.ConfigError) as info:
        config.load(exp_path, cluster=cluster)
    text = str(info.value)
    assert f"{cluster}:3: slurm.actor.cpus_per_tsk" in text and f"{cluster}:4: workers: a cluster settings file" in text


def test_the_cli_takes_the_cluster_file_from_the_flag_or_the_environment(tmp_path, monkeypatch, capsys):
    exp_path, cluster = files(tmp_path)
    args = cli._run_parser().parse_args([str(exp_path), "--cluster", str(cluster)])
    assert cli._experiment(args).slurm.account == "rl-lab"
    monkeypatch.setenv("SRL_CLUSTER", str(cluster))
    assert cli._experiment(cli._run_parser().parse_args([str(exp_path)])).slurm.account == "rl-lab"
    monkeypatch.setenv("SRL_CLUSTER", str(tmp_path / "missing.yaml"))
    assert cli.main(["validate", str(ROOT / "experiments" / "cartpole_ppo.yaml")]) == 2
    assert "missing.yaml" in capsys.readouterr().err
