"""The shipped experiments carry no cluster's settings: partitions, the network, workers per node, accounts and
the like live in a cluster's profile (clusters/local.yaml for the project's local Slurm, clusters/example.yaml
for a site), so that `srl-launch EXPERIMENT --slurm --profile clusters/mine.yaml` runs every shipped experiment
unchanged. The experiments keep what the run needs: its time, each group's CPUs and memory, GPU sharing."""

import re
import typing
from pathlib import Path

import pytest
import yaml

from conftest import LOCAL_PROFILE, ROOT
from launcher import slurm
from srl_hpc import config
from srl_hpc.config.slurm import SlurmConfig, SlurmGroupConfig

EXPERIMENTS = ROOT / "experiments"
SHIPPED = sorted(EXPERIMENTS.rglob("*.yaml"))
# another site's, whose names no shipped experiment could have guessed
ANOTHER_CLUSTER = """\
slurm:
  network: 10.7.0.0/16
  trainer: {partition: accel, tasks_per_node: 1}
  policy: {partition: accel, tasks_per_node: 4}
  buffer: {partition: batch}
  actor: {partition: batch, tasks_per_node: 16}
  eval: {partition: batch}
  sweep: {partition: short}
"""
PROFILES = {
    "local": LOCAL_PROFILE.read_text(),
    "example": (ROOT / "clusters" / "example.yaml").read_text(),
    "another": ANOTHER_CLUSTER,
}
GROUPS = [name for name, kind in typing.get_type_hints(SlurmConfig).items() if kind is SlurmGroupConfig]

# What a cluster decides, not an experiment: its partitions, accounts, QOS and node features, how its nodes are
# reached (network, ports, MPI plugin, software set-up, container, python), how big they are (workers and
# GPUs per node, hardware threads) and whether they take het jobs (layout)
CLUSTER_KEYS = {
    "partition",
    "account",
    "qos",
    "constraint",
    "network",
    "ports",
    "mpi",
    "setup",
    "node_setup",
    "python",
    "container",
    "template",
    "threads_per_core",
    "layout",
}
GROUP_CLUSTER_KEYS = {"partition", "account", "qos", "constraint", "tasks_per_node", "gpus_per_node"}
SWEEP_CLUSTER_KEYS = {"partition"}
# the same, as sbatch or srun options written into sbatch_options / srun_options
CLUSTER_OPTIONS = {
    "-p",
    "--partition",
    "-A",
    "--account",
    "-q",
    "--qos",
    "-C",
    "--constraint",
    "-w",
    "--nodelist",
    "-x",
    "--exclude",
    "--reservation",
    "-M",
    "--clusters",
    "--ntasks-per-node",
    "--gres",
    "--gpus-per-node",
    "--threads-per-core",
}


def cluster_settings(document: dict, path: Path) -> list[str]:
    """The keys of one experiment file, as written (before any profile), that hold a cluster's settings."""
    found = [
        f"defaults: {entry}"
        for entry in document.get("defaults") or []
        if (path.parent / entry).resolve().is_relative_to(ROOT / "clusters")
    ]  # a profile pulled in
    sections = {"slurm": document.get("slurm") or {}}
    sections.update({f"slurm.{g}": sections["slurm"].get(g) or {} for g in GROUPS})
    for where, keys in (("slurm", CLUSTER_KEYS), *((f"slurm.{g}", GROUP_CLUSTER_KEYS) for g in GROUPS)):
        found += [f"{where}.{key}" for key in sections[where] if key in keys]
        found += [
            f"{where}.{key}: {option}"
            for key in ("sbatch_options", "srun_options")
            for option in sections[where].get(key) or []
            if str(option).split("=")[0] in CLUSTER_OPTIONS
        ]
    found += [f"slurm.sweep.{key}" for key in sections["slurm"].get("sweep") or {} if key in SWEEP_CLUSTER_KEYS]
    return found


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(EXPERIMENTS)))
def test_no_shipped_experiment_carries_a_cluster_setting(path):
    found = cluster_settings(yaml.safe_load(path.read_text()), path)
    assert found == [], (
        f"{path.relative_to(ROOT)} sets {', '.join(found)}: a cluster's settings, which belong in "
        f"its profile (clusters/local.yaml for the project's local Slurm; docs/clusters.md)"
    )


def test_the_check_names_each_cluster_setting_wherever_an_experiment_writes_it():
    written = yaml.safe_load("""\
defaults: [../clusters/local.yaml]
slurm:
  time: "00:15:00"
  network: ib0
  account: rl-lab
  sbatch_options: [--exclusive, --partition=big]
  trainer: {partition: gpu, cpus_per_task: 4, mem_per_task: 8G, constraint: a100}
  policy: {share_gpu: true, gpus_per_node: 1}
  actor: {mem_per_task: 1G, tasks_per_node: 2, qos: low, srun_options: [-w, n1]}
  sweep: {partition: cpu, cpus: 4, mem: 3G}
""")
    assert sorted(cluster_settings(written, EXPERIMENTS / "written.yaml")) == sorted(
        [
            "defaults: ../clusters/local.yaml",
            "slurm.network",
            "slurm.account",
            "slurm.sbatch_options: --partition=big",
            "slurm.trainer.partition",
            "slurm.trainer.constraint",
            "slurm.policy.gpus_per_node",
            "slurm.actor.tasks_per_node",
            "slurm.actor.qos",
            "slurm.actor.srun_options: -w",
            "slurm.sweep.partition",
        ]
    )
    what_the_run_needs = {
        "slurm": {
            "time": "1:00:00",
            "trainer": {"cpus_per_task": 4, "share_gpu": True},
            "sweep": {"cpus": 4, "mem": "3G", "gpus": 1},
            "sbatch_options": ["--exclusive"],
        }
    }
    assert cluster_settings(what_the_run_needs, EXPERIMENTS / "needs.yaml") == []


def no_cluster():
    raise slurm.SlurmError("no cluster here: a dry run plans and renders only")


@pytest.mark.parametrize("cluster", PROFILES)
@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(EXPERIMENTS)))
def test_every_shipped_experiment_plans_as_shipped_with_a_clusters_profile(path, cluster, tmp_path, monkeypatch):
    """What `srl-launch EXPERIMENT --slurm --dry-run --profile PROFILE` does away from the cluster: validate, plan,
    render; every group on the profile's partition, the workers on its network, no more per node than it says."""
    monkeypatch.syspath_prepend(str(ROOT / "examples"))  # user_algorithm.yaml's my_a2c, as its comment says
    monkeypatch.setattr(slurm, "cluster_facts", no_cluster)
    profile = tmp_path / f"{cluster}.yaml"
    profile.write_text(PROFILES[cluster])
    exp = config.load(path, profiles=[profile])
    request = slurm.prepare(
        exp, tmp_path / "run", "/opt/venv/bin/python", "srl-launch EXPERIMENT --slurm --dry-run", require_cluster=False
    )
    cluster = yaml.safe_load(profile.read_text())["slurm"]
    assert exp.slurm.network == cluster["network"] and exp.slurm.sweep.partition == cluster["sweep"]["partition"]
    blocks = request.script.split("\n#SBATCH hetjob\n")
    assert len(blocks) == len(request.plan.groups) > 0
    for group, block in zip(request.plan.groups, blocks):
        profile_group = cluster.get(group.name) or {}
        assert group.partition == profile_group["partition"], group
        assert f"\n#SBATCH --partition={group.partition}\n" in block
        most = profile_group.get("tasks_per_node", getattr(SlurmConfig(), group.name).tasks_per_node)
        workers = [[w for w in node if not w.startswith("controller/")] for node in group.layout]
        assert max(len(node) for node in workers) <= most, (group.name, group.layout)


def test_the_local_profile_names_the_local_slurms_partitions_and_fast_interface():
    cluster = yaml.safe_load(LOCAL_PROFILE.read_text())["slurm"]
    script = (ROOT / "scripts" / "local_slurm.sh").read_text()
    partitions = set(re.findall(r"PartitionName=(\w+)", script))
    named = {cluster[g]["partition"] for g in [*GROUPS, "sweep"]}
    assert named <= partitions and len(named) == len(partitions) == 2, (named, partitions)  # cpu and gpu, both used
    assert cluster["network"] == "ib0" and re.search(r"dev=\(eth0 ib0\)", script)  # each node's second interface
