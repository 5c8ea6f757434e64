"""`srl-launch doctor --probe`: the probe job's script, the cluster's settings and limits, and every judgement
of what the probe's tasks wrote, from a recording of a real probe job on the local Slurm (RECORDED) changed
one thing at a time; then the probe's tasks themselves, as real processes on this machine (real ZMQ with the
run's keys, a real gloo group), judged. The job on the local Slurm: tests/test_doctor.py."""

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, srl
from launcher import accounting, probe, probe_network, slurm_jobs
from launcher import plan as planning
from launcher import probe_findings as findings
from launcher import probe_settings as settings
from launcher.doctor import line
from srl_hpc import config
from srl_hpc import probe as tasks
from srl_hpc.probe import facts as probe_facts
from srl_hpc.probe import task as probe_task

CARTPOLE = ROOT / "experiments" / "cartpole_ppo.yaml"
NAMES = ["controller/0", "trainer/0", "policy/0", "actor/0", "actor/1"]

# srl_hpc.probe.collect() of job 273 on the local Slurm (`srl-launch doctor --probe experiments/cartpole_ppo.yaml
# --profile clusters/local.yaml`): 3 groups on n1, n2, n3 over ib0, bound by task/cgroup+affinity, soft nofile 1024
RECORDED = r"""
{
 "facts": {
  "controller/0": {
   "worker": "controller/0",
   "group": "trainer",
   "kind": "controller",
   "device": "cpu",
   "task": 0,
   "local_id": 0,
   "node": "n1",
   "hostname": "n1",
   "pid": 21639,
   "python": "/work/main/.venv/bin/python3",
   "python_version": "3.11.7",
   "cpus": [0],
   "node_cpus": 2,
   "nofile": {"soft": 1024, "hard": 20000, "needed": 72, "workers": 5},
   "address": {"ip": "10.250.1.11", "interface": "ib0", "source": "slurm.network: ib0", "loopback": false},
   "address_error": null,
   "gpus": {"env": {"CUDA_VISIBLE_DEVICES": null, "SLURM_STEP_GPUS": null, "SLURM_JOB_GPUS": null}, "torch": null},
   "gpu_pick": null
  },
  "trainer/0": {
   "worker": "trainer/0",
   "group": "trainer",
   "kind": "trainer",
   "device": "cpu",
   "task": 1,
   "local_id": 1,
   "node": "n1",
   "hostname": "n1",
   "pid": 21640,
   "python": "/work/main/.venv/bin/python3",
   "python_version": "3.11.7",
   "cpus": [1],
   "node_cpus": 2,
   "nofile": {"soft": 1024, "hard": 20000, "needed": 71, "workers": 5},
   "address": {"ip": "10.250.1.11", "interface": "ib0", "source": "slurm.network: ib0", "loopback": false},
   "address_error": null,
   "gpus": {
    "env": {"CUDA_VISIBLE_DEVICES": null, "SLURM_STEP_GPUS": null, "SLURM_JOB_GPUS": null},
    "torch": {
     "version": "2.13.0+cpu",
     "cuda_build": null,
     "devices": [],
     "why_none": "Torch not compiled with CUDA enabled"
    }
   },
   "gpu_pick": null
  },
  "policy/0": {
   "worker": "policy/0",
   "group": "policy",
   "kind": "policy",
   "device": "cpu",
   "task": 2,
   "local_id": 0,
   "node": "n2",
   "hostname": "n2",
   "pid": 21643,
   "python": "/work/main/.venv/bin/python3",
   "python_version": "3.11.7",
   "cpus": [0, 1],
   "node_cpus": 2,
   "nofile": {"soft": 1024, "hard": 20000, "needed": 73, "workers": 5},
   "address": {"ip": "10.250.1.12", "interface": "ib0", "source": "slurm.network: ib0", "loopback": false},
   "address_error": null,
   "gpus": {"env": {"CUDA_VISIBLE_DEVICES": null, "SLURM_STEP_GPUS": null, "SLURM_JOB_GPUS": null}, "torch": null},
   "gpu_pick": null
  },
  "actor/0": {
   "worker": "actor/0",
   "group": "actor",
   "kind": "actor",
   "device": "cpu",
   "task": 3,
   "local_id": 0,
   "node": "n3",
   "hostname": "n3",
   "pid": 21644,
   "python": "/work/main/.venv/bin/python3",
   "python_version": "3.11.7",
   "cpus": [0],
   "node_cpus": 2,
   "nofile": {"soft": 1024, "hard": 20000, "needed": 71, "workers": 5},
   "address": {"ip": "10.250.1.13", "interface": "ib0", "source": "slurm.network: ib0", "loopback": false},
   "address_error": null,
   "gpus": {"env": {"CUDA_VISIBLE_DEVICES": null, "SLURM_STEP_GPUS": null, "SLURM_JOB_GPUS": null}, "torch": null},
   "gpu_pick": null
  },
  "actor/1": {
   "worker": "actor/1",
   "group": "actor",
   "kind": "actor",
   "device": "cpu",
   "task": 4,
   "local_id": 1,
   "node": "n3",
   "hostname": "n3",
   "pid": 21645,
   "python": "/work/main/.venv/bin/python3",
   "python_version": "3.11.7",
   "cpus": [1],
   "node_cpus": 2,
   "nofile": {"soft": 1024, "hard": 20000, "needed": 71, "workers": 5},
   "address": {"ip": "10.250.1.13", "interface": "ib0", "source": "slurm.network: ib0", "loopback": false},
   "address_error": null,
   "gpus": {"env": {"CUDA_VISIBLE_DEVICES": null, "SLURM_STEP_GPUS": null, "SLURM_JOB_GPUS": null}, "torch": null},
   "gpu_pick": null
  }
 },
 "results": {
  "controller/0": {
   "worker": "controller/0",
   "rendezvous": {"seconds": 0.9041660359998787},
   "pings": {
    "policy/0": {"ms": 3.8452089993370464},
    "actor/0": {"ms": 4.422206000526785},
    "actor/1": {"ms": 5.010969999602821}
   },
   "collective": null,
   "mpi": {
    "state": "done",
    "seconds": 0.4047416860003068,
    "library": "Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4, May 26, 2022",
    "ranks": 5
   },
   "answered": 2
  },
  "trainer/0": {
   "worker": "trainer/0",
   "rendezvous": {"seconds": 0.12185079099981522},
   "pings": null,
   "collective": {
    "peers": ["trainer/0"],
    "rank": 0,
    "gloo": {"seconds": 0.0019397799997022958, "sum": 1.0, "expected": 1.0},
    "nccl": null
   },
   "mpi": {
    "state": "done",
    "seconds": 0.513497414000085,
    "library": "Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4, May 26, 2022",
    "ranks": 5
   },
   "answered": 2
  },
  "policy/0": {
   "worker": "policy/0",
   "rendezvous": {"seconds": 1.0463180679998914},
   "pings": {
    "controller/0": {"ms": 4.065590999744018},
    "trainer/0": {"ms": 4.66530599987891},
    "actor/0": {"ms": 4.652967999390967},
    "actor/1": {"ms": 5.16717200025596}
   },
   "collective": null,
   "mpi": {
    "state": "done",
    "seconds": 0.4074847290003163,
    "library": "Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4, May 26, 2022",
    "ranks": 5
   },
   "answered": 2
  },
  "actor/0": {
   "worker": "actor/0",
   "rendezvous": {"seconds": 0.9634567850007443},
   "pings": {
    "policy/0": {"ms": 3.196014999957697},
    "trainer/0": {"ms": 3.509210000629537},
    "controller/0": {"ms": 3.955893000238575}
   },
   "collective": null,
   "mpi": {
    "state": "done",
    "seconds": 0.5757168610007284,
    "library": "Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4, May 26, 2022",
    "ranks": 5
   },
   "answered": 2
  },
  "actor/1": {
   "worker": "actor/1",
   "rendezvous": {"seconds": 1.0865963789992747},
   "pings": null,
   "collective": null,
   "mpi": {
    "state": "done",
    "seconds": 0.3640815940007087,
    "library": "Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4, May 26, 2022",
    "ranks": 5
   },
   "answered": 2
  }
 }
}
"""


def recorded() -> dict:
    return copy.deepcopy(json.loads(RECORDED))


def cartpole(*overrides: str) -> config.Experiment:
    exp = config.load(CARTPOLE)
    return config.with_overrides(exp, ["slurm.network=ib0", *overrides])


def plan_of(exp: config.Experiment) -> planning.Plan:
    return planning.make_plan(exp, "/shared/probe", "/venv/bin/python")


def statuses(results) -> list[str]:
    return [r[0] for r in results]


def only(results, status: str):
    found = [r for r in results if r[0] == status]
    assert len(found) == 1, "\n".join(map(line, results))
    return found[0]


# ---------------------------------------------------------------------------------------------- the job


def test_the_probe_job_is_the_runs_request_with_the_probe_module_a_short_limit_and_no_requeue():
    exp = cartpole(
        "slurm.requeue={signal_seconds: 120, max_requeues: 2}",
        "slurm.node_setup=['ulimit -n 4096']",
        "slurm.env={OMP_NUM_THREADS: '1'}",
        "slurm.container={image: /images/srl.sif}",
    )
    run_plan = plan_of(exp)
    job = probe.probe_plan(run_plan)
    text = probe.probe_script(job, "srl-launch doctor --probe")
    assert "srl_hpc.worker" not in text and text.count(" -m srl_hpc.probe ") == len(run_plan.groups) == 3
    assert "#SBATCH --time=00:05:00" in text and "#SBATCH --job-name=srl-probe-cartpole_ppo" in text
    assert "--requeue" not in text and "USR1" not in text
    assert "export OMP_NUM_THREADS=1" in text and "ulimit -n 4096" in text
    assert text.count("/images/srl.sif /venv/bin/python -m srl_hpc.probe ") == 3  # each srun line in the container
    # everything else is the run's own script (launcher.render)
    from launcher import render

    plain = plan_of(cartpole("slurm.node_setup=['ulimit -n 4096']", "slurm.container={image: /images/srl.sif}"))
    own = render.render(plain, "srl-launch doctor --probe")
    swapped = probe.probe_script(probe.probe_plan(plain), "srl-launch doctor --probe")
    assert swapped.replace(" -m srl_hpc.probe ", " -m srl_hpc.worker ") == own.replace(
        "--job-name=srl-cartpole_ppo", "--job-name=srl-probe-cartpole_ppo"
    ).replace("--time=00:15:00", "--time=00:05:00")
    assert [g.ntasks for g in job.groups] == [2, 1, 2]  # the tasks as planned


def test_a_template_that_does_not_start_the_workers_through_its_srun_lines_is_refused(tmp_path):
    template = tmp_path / "mine.sbatch"
    template.write_text("#!/bin/bash\n${sbatch_lines}\nsrun python -m my.worker\n")
    with pytest.raises(probe.ProbeError, match="names the worker module .* 0 times, not once per het group"):
        probe.probe_script(plan_of(cartpole(f"slurm.template={template}")), "x")


def test_with_the_jobs_layout_each_groups_script_is_the_runs_with_the_probe_module_and_its_first_task():
    exp = cartpole(
        "slurm.layout=jobs", "slurm.node_setup=['ulimit -n 4096']", "slurm.container={image: /images/srl.sif}"
    )
    job = probe.probe_plan(plan_of(exp))
    scripts = probe.probe_scripts(job, "srl-launch doctor --probe")
    assert [group for group, _ in scripts] == ["trainer", "policy", "actor"]
    for (group, text), first in zip(scripts, (0, 2, 3)):  # controller/0 + trainer/0, policy/0, actor/0-1
        assert "srl_hpc.worker" not in text and text.count(" -m srl_hpc.probe ") == 1
        assert f" --first-task {first} " in text and "--rendezvous file" in text and "srun --mpi=none " in text
        assert f"#SBATCH --job-name=srl-probe-cartpole_ppo-{group}\n" in text and "#SBATCH --time=00:05:00" in text
        assert "#SBATCH hetjob" not in text and "ulimit -n 4096" in text and "/images/srl.sif" in text
        assert "-m srl_hpc.srun_guard " in text and f"--group {group}" in text  # the group watch, as in a run
    # everything else is the run's own scripts (launcher.render.render_groups)
    from launcher import render

    own = render.render_groups(job, "srl-launch doctor --probe")
    assert [(g, s.replace(" -m srl_hpc.probe ", " -m srl_hpc.worker ")) for g, s in scripts] == own


def test_a_groups_template_that_does_not_start_the_workers_through_its_srun_line_is_refused(tmp_path):
    template = tmp_path / "mine.sbatch"
    template.write_text("#!/bin/bash\n${sbatch_lines}\nsrun python -m my.worker\n")
    with pytest.raises(probe.ProbeError, match="group trainer's job script names the worker module .* 0 times"):
        probe.probe_scripts(plan_of(cartpole("slurm.layout=jobs", f"slurm.template={template}")), "x")


def test_a_probe_task_of_a_groups_job_is_its_first_task_plus_its_place_in_the_groups_srun(tmp_path, monkeypatch):
    from launcher import runs

    _, run = runs.create(cartpole("slurm.layout=jobs"), tmp_path / "probe")
    seen = []
    monkeypatch.setattr(probe_task, "probe", lambda exp, graph, name, run_dir, mpi: seen.append((name, mpi)))
    monkeypatch.setenv("SLURM_PROCID", "1")  # the second task of the actor group's srun
    assert probe_task.main(["--run-dir", str(run.root), "--slurm", "--rendezvous", "file", "--first-task", "3"]) == 0
    assert probe_task.main(["--run-dir", str(run.root), "--slurm"]) == 0  # a het job's one srun: SLURM_PROCID alone
    assert seen == [("actor/1", False), ("trainer/0", False)]


def test_the_probe_directory_is_never_a_runs_own(tmp_path):
    assert probe.probe_dir(cartpole(), tmp_path / "p") == tmp_path / "p"
    beside = probe.probe_dir(config.replace(cartpole(), run_dir=str(tmp_path / "run")), None)
    assert beside.parent == tmp_path and beside.name.startswith("run-probe-")
    assert probe.probe_dir(cartpole(), None).name.startswith("cartpole_ppo-probe-")


def test_gpu_variables_are_the_models_own():
    from srl_hpc.models import devices

    assert probe_facts.GPU_VARIABLES == devices.GPU_VARIABLES


# ------------------------------------------------------------------------------ the cluster's settings

CONFIG = """Configuration data as of 2026-12-06T03:00:00
AccountingStorageEnforce = associations,limits,qos
AccountingStorageType   = accounting_storage/slurmdbd
MpiDefault              = pmix
ProctrackType           = proctrack/cgroup
PropagateResourceLimits = (null)
PropagateResourceLimitsExcept = NOFILE
TaskPlugin              = task/cgroup,task/affinity
TaskPluginParam         = (null type)
"""


def test_the_settings_that_matter_are_read_and_judged():
    cfg = accounting.parse_config(CONFIG)
    assert cfg["TaskPlugin"] == "task/cgroup,task/affinity" and cfg["TaskPluginParam"] == "(null type)"
    assert settings.judge_task_plugin(cfg)[0] == "ok" and settings.binds(cfg)
    status, message, fix = settings.judge_task_plugin(dict(cfg, TaskPlugin="task/none"))
    assert status == "warn" and "not bound" in message and "torch_threads" in fix
    assert settings.judge_proctrack(cfg)[0] == "ok"
    assert settings.judge_proctrack(dict(cfg, ProctrackType="proctrack/linuxproc"))[0] == "warn"
    assert settings.judge_mpi_default(cfg, "none") == (
        "ok",
        "MpiDefault=pmix; the job's srun lines say --mpi=none (slurm.mpi) themselves",
        "",
    )
    status, message, _ = settings.judge_propagation(cfg, (1024, 4096))
    assert status == "ok" and "PropagateResourceLimitsExcept=NOFILE" in message and "nodes' own" in message
    assert not settings.nofile_propagated(cfg)
    assert settings.nofile_propagated({})  # Slurm's default: ALL
    assert settings.nofile_propagated({"PropagateResourceLimits": "NOFILE,CORE"})
    assert not settings.nofile_propagated({"PropagateResourceLimits": "NONE"})
    assert not settings.nofile_propagated({"PropagateResourceLimits": "ALL", "PropagateResourceLimitsExcept": "ALL"})
    assert "this shell's open-files limits (soft 1024, hard unlimited)" in settings.judge_propagation({}, (1024, -1))[1]
    assert "enforced" in settings.judge_enforce(cfg)[1]
    assert "no association or QOS limit" in settings.judge_enforce({"AccountingStorageEnforce": "(null)"})[1]


def test_het_steps_disabled_fail_the_hetjob_layout_only():
    cfg = accounting.parse_config(CONFIG)
    assert settings.judge_het_steps(cfg, "hetjob") == (
        "ok",
        "SchedulerParameters=(null): het steps allowed (no disable_hetero_steps)",
        "",
    )
    off = dict(cfg, SchedulerParameters="bf_interval=1,disable_hetero_steps")
    status, message, fix = settings.judge_het_steps(off, "hetjob")
    assert status == "FAIL" and "SchedulerParameters=bf_interval=1,disable_hetero_steps" in message
    assert "one srun over every group" in message and fix.startswith("set slurm.layout: jobs")
    status, message, _ = settings.judge_het_steps(off, "jobs")
    assert status == "ok" and "not needed" in message
    assert settings.judge_mpi_default(cfg, "pmix", "jobs") == (
        "ok",
        "MpiDefault=pmix; each group's srun line says --mpi=none itself (slurm.layout: jobs: MPI cannot span jobs)",
        "",
    )


# sacctmgr -nP show user me withassoc format=accounting.ASSOC_FORMAT; sacctmgr -nP show qos format=QOS_FORMAT
ASSOCIATIONS = "me|rl|srl-local|rl||normal,small|||\nme|rl|srl-local|root||normal,small|||\n"
QOS = "normal||\nsmall|2|3\n"


def limits(associations=ASSOCIATIONS, qos=QOS, queue="") -> accounting.Limits:
    """What the probe reads (accounting.ask_limits), from recorded sacctmgr and squeue text."""
    return accounting.Limits(
        "me",
        "srl-local",
        tuple(accounting.parse_associations(associations)),
        accounting.parse_qos(qos),
        tuple(accounting.parse_queue(queue)),
    )


def test_a_het_job_counts_one_job_per_component_against_qos_and_association_limits():
    cfg = accounting.parse_config(CONFIG)
    three = plan_of(cartpole())  # three het groups
    assert settings.jobs_counted(three) == 3
    results = settings.judge_limits(three, cfg, limits())
    assert statuses(results) == ["ok", "ok"], results
    assert "association me/rl: MaxJobs unlimited, MaxSubmit unlimited; this run's het job counts 3" in results[0][1]
    assert results[1][1].startswith("QOS 'normal'")

    status, message, fix = only(settings.judge_limits(plan_of(cartpole("slurm.qos=small")), cfg, limits()), "FAIL")
    assert "QOS 'small': MaxJobsPerUser 2, MaxSubmitJobsPerUser 3; this run's het job counts 3" in message
    assert "can never start (it pends with QOSMaxJobsPerUserLimit)" in message and "slurm.qos" in fix
    tight = limits(qos="normal||\nsmall||2\n")
    status, message, _ = only(settings.judge_limits(plan_of(cartpole("slurm.qos=small")), cfg, tight), "FAIL")
    assert "sbatch refuses it" in message
    busy = limits(
        qos="normal||\nsmall|4|5\n", queue="70|RUNNING|small|rl|cpu\n71|PENDING|small|rl|cpu\n72|PENDING|small|rl|cpu\n"
    )
    status, message, fix = only(settings.judge_limits(plan_of(cartpole("slurm.qos=small")), cfg, busy), "warn")
    assert "over MaxSubmitJobsPerUser with your 3 queued and MaxJobsPerUser with your 3 queued" in message
    one_group = cartpole("slurm.qos=small", "slurm.policy.qos=normal", "slurm.actor.qos=normal")  # 1 of 3 on small
    assert statuses(settings.judge_limits(plan_of(one_group), cfg, limits())) == ["ok", "ok", "ok"]

    assoc_limited = limits("me|rl|srl-local|rl||normal,small||2|\n")  # MaxJobs 2
    status, message, _ = only(settings.judge_limits(three, cfg, assoc_limited), "FAIL")
    assert message.startswith("association me/rl: MaxJobs 2") and "AssocMaxJobsLimit" in message


def test_the_jobs_layout_counts_one_job_per_group():
    cfg = accounting.parse_config(CONFIG)
    jobs = plan_of(cartpole("slurm.layout=jobs"))
    results = settings.judge_limits(jobs, cfg, limits())
    assert statuses(results) == ["ok", "ok"] and "this run's jobs count 3 job(s) there (one per group)" in results[0][1]
    status, message, _ = only(
        settings.judge_limits(plan_of(cartpole("slurm.layout=jobs", "slurm.qos=small")), cfg, limits()), "FAIL"
    )
    assert "QOS 'small': MaxJobsPerUser 2" in message and "this run's jobs count 3" in message
    none = dict(cfg, AccountingStorageType="accounting_storage/none")
    assert settings.judge_limits(jobs, none, "")[0][1].endswith("counts this run's 3 jobs (one per group)")


def test_accounting_absent_unreadable_or_without_the_user(monkeypatch):
    from launcher import slurm

    cfg = accounting.parse_config(CONFIG)
    three = plan_of(cartpole())
    none = dict(cfg, AccountingStorageType="accounting_storage/none")
    assert settings.judge_limits(three, none, "") == [
        (
            "ok",
            "no accounting (AccountingStorageType=accounting_storage/none): no QOS or association limit counts "
            "this run's 3 het components",
            "",
        )
    ]
    monkeypatch.setattr(slurm, "_answer", lambda cmd: None if cmd[0] == "squeue" else "")
    status, message, _ = settings.judge_limits(three, cfg, settings.read_limits(cfg))[0]
    assert status == "warn" and message.startswith("accounting exists, but its limits could not be read: `squeue")
    status, message, fix = settings.judge_limits(three, cfg, limits(associations=""))[0]
    assert status == "FAIL" and "no association" in message and "sacctmgr add user me" in fix
    status, message, fix = only(settings.judge_limits(plan_of(cartpole("slurm.account=other")), cfg, limits()), "FAIL")
    assert message.startswith("het group(s) trainer, policy, actor: user me has no association with account 'other'")
    assert "rl, root" in fix
    status, message, _ = only(settings.judge_limits(plan_of(cartpole("slurm.qos=fast")), cfg, limits()), "FAIL")
    assert "ask for QOS 'fast', which account 'rl' may not use (it may: normal, small)" in message


def test_the_probe_judges_by_the_rules_that_refuse_a_run_before_submission():
    """launcher.accounting's: a partition's own association first, the association's only QOS as the default,
    queued jobs counted where they count, and only what AccountingStorageEnforce enforces."""
    cfg = accounting.parse_config(CONFIG)
    gpu = cartpole("slurm.qos=normal", "slurm.trainer.partition=gpu")
    per_partition = limits(ASSOCIATIONS + "me|rl|srl-local|rl|gpu|normal|||1\n", queue="70|PENDING|normal|rl|gpu\n")
    results = settings.judge_limits(plan_of(gpu), cfg, per_partition)
    assert statuses(results) == ["ok", "warn", "ok"], results
    assert results[0][1].startswith("association me/rl: MaxJobs unlimited") and "counts 2 job(s)" in results[0][1]
    assert results[1][1].startswith(
        "association me/rl/gpu: MaxJobs unlimited, MaxSubmit 1; this run's het job "
        "counts 1 job(s) there (one per het component), over MaxSubmit with your 1 queued"
    )
    (refusal,) = accounting.limit_problems(plan_of(gpu), per_partition)  # the launcher refuses it until then
    assert refusal.startswith("your association with account 'rl' in partition 'gpu'")
    only_small = limits("me|rl|srl-local|rl||small|||\n")  # no default QOS, one allowed: the job runs in it
    assert "QOS 'small'" in only(settings.judge_limits(plan_of(cartpole()), cfg, only_small), "FAIL")[1]
    elsewhere = limits(qos="normal||\nsmall|4|5\n", queue="70|PENDING|normal|rl|cpu\n" * 3)  # not in small
    assert statuses(settings.judge_limits(plan_of(cartpole("slurm.qos=small")), cfg, elsewhere)) == ["ok", "ok"]
    associations_only = dict(cfg, AccountingStorageEnforce="associations")  # QOS access and limits unchecked
    (result,) = settings.judge_limits(plan_of(cartpole("slurm.qos=fast")), associations_only, limits())
    assert result[0] == "ok" and result[1].startswith("limits are not enforced (AccountingStorageEnforce=associations)")


def test_sbatchs_refusal_gets_a_fix_by_what_slurm_said():
    assert "heterogeneous jobs" in probe.refusal_fix("sbatch: error: Heterogeneous jobs are disabled")
    assert "slurm.layout: jobs" in probe.refusal_fix("sbatch: error: Heterogeneous jobs are disabled")
    assert "QOS" in probe.refusal_fix("sbatch: error: QOSMaxSubmitJobPerUserLimit")
    assert "partition" in probe.refusal_fix("sbatch: error: invalid partition specified: gpu2")
    assert "slurm.account" in probe.refusal_fix("sbatch: error: Invalid account or account/partition combination")


# ------------------------------------------------------------------------------ what the tasks found


def test_the_recorded_probe_of_cartpole_on_the_local_slurm_is_all_ok():
    exp, found = cartpole(), recorded()
    plan = plan_of(exp)
    results = [
        probe.judge_job("0", 3, "COMPLETED", found, NAMES),
        *findings.judge_reports(plan, found),
        *findings.judge_found(plan, exp, found, binds=True),
    ]
    assert statuses(results) == ["ok"] * len(results), "\n".join(map(line, results))
    text = "\n".join(map(line, results))
    for group in ("trainer", "policy", "actor"):
        assert f"ok: group {group}: " in text and f"ok: group {group} (cpus_per_task 1): bound to" in text
    for pair in ("trainer and policy", "trainer and actor", "policy and actor"):
        assert f"ok: ZMQ between {pair}: every task answered" in text
    assert "ok: gloo all-reduce among 1 trainer task(s)" in text and "ok: MPI rendezvous" in text


def test_a_loopback_address_on_a_job_of_several_nodes_fails_naming_slurm_network():
    found = recorded()
    for f in found["facts"].values():
        f["address"] = {"ip": "127.0.1.1", "interface": None, "source": f"hostname {f['node']}", "loopback": True}
    results = findings.judge_addresses(plan_of(cartpole()), None, found["facts"])
    assert statuses(results) == ["FAIL"] * 3
    assert "127.0.1.1" in results[0][1] and "loopback" in results[0][1] and "slurm.network" in results[0][2]
    found["facts"]["actor/1"]["address"] = None
    found["facts"]["actor/1"]["address_error"] = "slurm.network is 'ib0', but that interface does not exist on node n4"
    status, message, fix = findings.judge_addresses(plan_of(cartpole()), "ib0", found["facts"])[2]
    assert status == "FAIL" and message.startswith("group actor: actor/1: slurm.network is 'ib0'") and "network" in fix


def test_cpus_fewer_than_asked_unbound_or_shared_are_reported():
    exp, found = cartpole("slurm.policy.cpus_per_task=3"), recorded()  # it was given 2 (a whole core)
    facts = found["facts"]
    status, message, _ = findings.judge_cpus(plan_of(exp), facts, binds=True)[1]
    assert status == "FAIL" and "policy/0 may run on fewer CPUs than asked" in message
    facts["actor/0"]["cpus"] = list(range(facts["actor/0"]["node_cpus"] + 2))
    facts["actor/0"]["node_cpus"] += 2
    assert findings.judge_cpus(plan_of(cartpole()), facts, binds=None)[2][0] == "warn"
    assert "not bound" in findings.judge_cpus(plan_of(cartpole()), facts, binds=None)[2][1]
    assert "not bound" not in findings.judge_cpus(plan_of(cartpole()), facts, binds=True)[2][1]  # a whole core
    found = recorded()
    found["facts"]["actor/1"]["node"] = found["facts"]["actor/0"]["node"]
    found["facts"]["actor/1"]["cpus"] = found["facts"]["actor/0"]["cpus"]
    status, message, _ = findings.judge_cpus(plan_of(cartpole()), found["facts"], binds=True)[2]
    assert status == "warn" and "actor/0 and actor/1 on" in message


def gpu_facts(found: dict, worker: str, node: str, uuid: str, index: int = 0) -> None:
    f = found["facts"][worker]
    f["node"], f["device"] = node, "cuda"
    f["gpus"] = {
        "env": {"CUDA_VISIBLE_DEVICES": "0,1", "SLURM_STEP_GPUS": "0,1", "SLURM_JOB_GPUS": None},
        "torch": {
            "version": "2.5.1",
            "cuda_build": "12.4",
            "devices": [
                {"index": 0, "name": "H100", "uuid": "GPU-aaaa"},
                {"index": 1, "name": "H100", "uuid": "GPU-bbbb"},
            ],
        },
    }
    f["gpu_pick"] = {"index": index, "uuid": uuid, "name": "H100"}


def test_two_cuda_workers_on_one_physical_gpu_fail_unless_the_group_may_share():
    found = recorded()
    gpu_facts(found, "actor/0", "n3", "GPU-aaaa", 0)
    gpu_facts(found, "actor/1", "n3", "GPU-aaaa", 0)
    exp = cartpole()
    status, message, fix = findings.judge_gpus(plan_of(exp), exp, found["facts"])[2]
    assert status == "FAIL" and "actor/0, actor/1 would use one physical GPU (n3/GPU-aaaa)" in message
    assert "share_gpu" in fix
    sharing = cartpole("slurm.actor.share_gpu=true")
    status, message, _ = findings.judge_gpus(plan_of(sharing), sharing, found["facts"])[2]
    assert status == "ok" and "share GPUs, as share_gpu allows" in message and "GPU-aaaa" in message
    gpu_facts(found, "actor/1", "n3", "GPU-bbbb", 1)
    status, message, _ = findings.judge_gpus(plan_of(exp), exp, found["facts"])[2]
    assert status == "ok" and "actor/0 -> GPU-aaaa, actor/1 -> GPU-bbbb" in message
    found["facts"]["actor/1"]["gpu_pick"] = {"error": "actor/1 is on device cuda, but its task sees no GPU"}
    status, message, fix = findings.judge_gpus(plan_of(exp), exp, found["facts"])[2]
    assert status == "FAIL" and "actor/1 on device cuda cannot take a GPU" in message and "gpus_per_node" in fix
    assert findings.judge_gpus(plan_of(exp), exp, found["facts"])[0] == (
        "ok",
        "group trainer: no GPU asked for, none given",
        "",
    )


def test_a_hard_open_files_limit_under_the_need_fails_naming_it():
    found = recorded()
    found["facts"]["policy/0"]["nofile"].update(soft=64, hard=64)
    status, message, fix = findings.judge_nofile(plan_of(cartpole()), found["facts"])[1]
    assert status == "FAIL" and "policy/0 needs about" in message and "hard open-files limit" in message
    assert "is 64 here" in message
    found["facts"]["policy/0"]["nofile"].update(soft=64, hard=100000)
    status, message, _ = findings.judge_nofile(plan_of(cartpole()), found["facts"])[1]
    assert status == "ok" and "raise their soft limit to the hard one" in message


def test_a_group_that_cannot_reach_another_fails_naming_the_task_and_its_node():
    found = recorded()
    pings = found["results"]["controller/0"]["pings"]
    pings["actor/1"] = {"error": "no reply within 5 s from tcp://10.250.1.14:40001"}
    results = probe_network.judge_pings(plan_of(cartpole()), found)
    assert statuses(results) == ["ok", "FAIL", "ok"]
    assert results[1][1].startswith("ZMQ between trainer and actor: controller/0 -> actor/1 on ")
    assert "no reply within 5 s" in results[1][1] and "slurm.ports" in results[1][2]
    found["results"]["policy/0"]["pings"] = None
    assert "not measured: policy/0 did not ping" in probe_network.judge_pings(plan_of(cartpole()), found)[0][1]


def test_gloo_nccl_and_mpi_failures_are_reported_with_their_fix():
    exp, found = cartpole(), recorded()
    found["results"]["trainer/0"]["collective"]["gloo"] = {"error": "RuntimeError: Connection refused", "seconds": 1}
    status, message, fix = probe_network.judge_collectives(plan_of(exp), exp, found)[0]
    assert status == "FAIL" and "trainer/0: RuntimeError: Connection refused" in message and "GLOO_SOCKET_IFNAME" in fix
    found = recorded()
    found["results"]["trainer/0"]["collective"]["nccl"] = {"skipped": "trainers share a GPU (n1/GPU-a, n1/GPU-a)"}
    assert probe_network.judge_collectives(plan_of(exp), exp, found)[1][0] == "warn"
    found["results"]["trainer/0"]["collective"]["nccl"] = {"seconds": 0.2, "sum": 1.0, "expected": 1.0}
    nccl = probe_network.judge_collectives(plan_of(exp), exp, found)[1]
    assert nccl[1].startswith("NCCL all-reduce among 1 trainer GPU")

    found = recorded()
    found["results"]["actor/1"]["mpi"] = {"state": "started"}
    status, message, fix = probe_network.judge_mpi(plan_of(exp), found)
    assert status == "FAIL" and "actor/1 never finished it" in message and "srun --mpi=list" in fix
    found["results"]["actor/1"]["mpi"] = {"state": "failed", "error": "RendezvousError: MPI world has 1 ranks"}
    assert "actor/1: RendezvousError" in probe_network.judge_mpi(plan_of(exp), found)[1]
    assert probe_network.judge_mpi(plan_of(cartpole("slurm.mpi=none")), found)[0] == "ok"


def test_tasks_that_never_reported_are_named():
    found = recorded()
    del found["facts"]["actor/1"], found["results"]["actor/1"]
    del found["results"]["policy/0"]
    results = findings.judge_reports(plan_of(cartpole()), found)
    assert [r[1] for r in results] == [
        "1 of 5 tasks never started their probe: actor/1",
        "1 task(s) started but never finished: policy/0",
    ]
    assert probe.judge_job("9", 3, "FAILED", found, NAMES)[0] == "ok"  # every group ran, one task short:
    del found["facts"]["actor/0"]
    assert (
        probe.judge_job("9", 3, "FAILED", found, NAMES)[1]
        == "het job 9 ended FAILED with 3 of 5 tasks started (2 of 3 groups)"
    )


JOBS = {"trainer": ("10", "COMPLETED"), "policy": ("11", "COMPLETED"), "actor": ("12", "COMPLETED")}


def test_the_jobs_layout_says_each_groups_job_ran_and_met_through_files_or_which_started_no_task():
    exp, found = cartpole("slurm.layout=jobs"), recorded()
    plan = plan_of(exp)
    assert probe.judge_job("10", 3, "COMPLETED", found, NAMES, JOBS) == (
        "ok",
        "jobs 10 (trainer), 11 (policy), 12 (actor): each group's ordinary job ran and their tasks met through "
        "files in the probe directory (5 of 5 tasks started)",
        "",
    )
    assert probe_network.judge_mpi(plan, found) == (
        "ok",
        "MPI rendezvous: not used: slurm.layout: jobs meets through files (the file rendezvous above)",
        "",
    )
    results = [probe.judge_job("10", 3, "COMPLETED", found, NAMES, JOBS), *findings.judge_found(plan, exp, found, True)]
    assert statuses(results) == ["ok"] * len(results), "\n".join(map(line, results))

    found["results"]["policy/0"]["rendezvous"] = {"error": "BarrierTimeout: actor/1 never came", "seconds": 120}
    status, message, _ = probe.judge_job("10", 3, "COMPLETED", found, NAMES, JOBS)
    assert status == "ok" and "(whether their tasks met: the file rendezvous line below)" in message
    found = recorded()
    for name in ("actor/0", "actor/1"):
        del found["facts"][name], found["results"][name]
    status, message, fix = probe.judge_job(
        "10", 3, "CANCELLED", found, NAMES, dict(JOBS, actor=("12", "CANCELLED by 0"))
    )
    assert (
        status == "FAIL"
        and message
        == "jobs 10 (trainer), 11 (policy), 12 (actor): group actor's job 12 started "
        "no task (Slurm: CANCELLED by 0) (3 of 5 tasks started)"
    )
    assert "each job" in fix


def test_a_loopback_address_fails_the_jobs_layout_even_on_one_node():
    """The worker refuses a loopback address without slurm.network in a run of several jobs: its groups' jobs
    may start on other nodes next time."""
    found = recorded()
    for f in found["facts"].values():
        f["node"] = "n1"
        f["address"] = {"ip": "127.0.1.1", "interface": None, "source": "hostname n1", "loopback": True}
    assert statuses(findings.judge_addresses(plan_of(cartpole()), None, found["facts"])) == ["ok"] * 3
    results = findings.judge_addresses(plan_of(cartpole("slurm.layout=jobs")), None, found["facts"])
    assert statuses(results) == ["FAIL"] * 3 and "the other groups' jobs cannot reach" in results[0][1]
    assert "slurm.network" in results[0][2]


@pytest.fixture
def fake_cluster(monkeypatch):
    """What probe.run asks of Slurm, answered here: CONFIG's settings (changed by the test), a four-node
    sinfo, the accounting above; sbatch and scontrol recorded; the job found ended with the recorded tasks'
    files written into the probe directory (as the tasks would)."""
    from launcher import slurm

    cluster = {"cfg": accounting.parse_config(CONFIG), "sbatch": [], "commands": []}
    sinfo = "\n".join(f"n{k}|{p}|16|64000|gpu:2" for k in range(1, 5) for p in ("cpu*", "gpu"))
    monkeypatch.setattr(probe, "slurm_config", lambda: cluster["cfg"])
    answers = {"user": ASSOCIATIONS, "qos": QOS}  # sacctmgr show user/qos; an empty queue
    monkeypatch.setattr(slurm, "_answer", lambda cmd: answers.get(cmd[3], "") if cmd[0] == "sacctmgr" else "")
    monkeypatch.setattr(slurm, "cluster_facts", lambda: planning.parse_sinfo(sinfo))
    monkeypatch.setattr(slurm, "cluster_config", lambda: cluster["cfg"])
    monkeypatch.setattr(slurm, "check_mpi_plugin", lambda mpi: None)

    def sbatch(script, after=None, hold=False):
        cluster["sbatch"].append((Path(script).name, Path(script).read_text(), hold))
        return str(100 + len(cluster["sbatch"]))

    def run(cmd, check=True):
        cluster["commands"].append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    def follow(job_id, run_dir, plan, wait, say):
        where, found = tasks.ProbeDir(run_dir.root), recorded()
        for name in NAMES:
            tasks.write_json(where.facts(name), found["facts"][name])
            tasks.write_json(where.results(name), found["results"][name])
        return "COMPLETED", None

    monkeypatch.setattr(slurm, "_sbatch", sbatch)
    monkeypatch.setattr(slurm, "_run", run)
    monkeypatch.setattr(
        slurm_jobs, "job_states", lambda ids: {i: slurm_jobs.JobInfo("completed", "COMPLETED") for i in ids}
    )
    monkeypatch.setattr(probe, "follow", follow)
    return cluster


def test_the_jobs_layouts_probe_submits_every_groups_probe_script_held_then_releases_them(tmp_path, fake_cluster):
    """The probe's own scripts, not the run's workers: each group's, held, recorded in slurm.json, released
    together; judged ok on a cluster whose het steps are disabled (the jobs layout needs none)."""
    fake_cluster["cfg"]["SchedulerParameters"] = "disable_hetero_steps"
    results = list(
        probe.run(cartpole("slurm.layout=jobs"), tmp_path / "probe", "srl-launch doctor --probe", say=lambda _: None)
    )
    assert statuses(results) == ["ok"] * len(results), "\n".join(map(line, results))
    submitted = fake_cluster["sbatch"]
    assert [name for name, _, _ in submitted] == ["job-trainer.sbatch", "job-policy.sbatch", "job-actor.sbatch"]
    for (_, text, hold), first in zip(submitted, (0, 2, 3)):
        assert hold and text.count(" -m srl_hpc.probe ") == 1 and "srl_hpc.worker" not in text
        assert f"--first-task {first} " in text
    assert fake_cluster["commands"] == [["scontrol", "release", "101,102,103"]]
    record = json.loads((tmp_path / "probe" / "slurm.json").read_text())
    assert record["groups"] == {"trainer": "101", "policy": "102", "actor": "103"} and record["job_id"] == "101"
    text = "\n".join(map(line, results))
    assert "ok: SchedulerParameters=disable_hetero_steps: het steps are disabled, and not needed" in text
    assert "ok: jobs 101 (trainer), 102 (policy), 103 (actor): each group's ordinary job ran" in text
    assert "ok: MPI rendezvous: not used" in text


def test_a_het_job_where_het_steps_are_disabled_is_one_clear_failure_and_nothing_is_submitted(tmp_path, fake_cluster):
    fake_cluster["cfg"]["SchedulerParameters"] = "disable_hetero_steps"
    results = list(probe.run(cartpole(), tmp_path / "probe", "srl-launch doctor --probe", say=lambda _: None))
    failed = [r for r in results if r[0] == "FAIL"]
    assert len(failed) == 1 and "disable_hetero_steps" in failed[0][1], "\n".join(map(line, results))
    assert failed[0][2].startswith("set slurm.layout: jobs")
    assert fake_cluster["sbatch"] == [] and not (tmp_path / "probe" / "slurm.json").exists()


def test_doctor_refuses_probe_options_without_probe_and_a_probe_without_an_experiment():
    proc = srl("doctor", "--probe", timeout=60)
    assert proc.returncode == 2 and "--probe needs an experiment file" in proc.stderr
    proc = srl("doctor", CARTPOLE, "--probe-wait", "5", timeout=60)
    assert proc.returncode == 2 and "--run-dir and --probe-wait go with --probe" in proc.stderr


# --------------------------------------------------------------------- the tasks, as processes here


@pytest.mark.slow
def test_the_probes_tasks_meet_ping_and_all_reduce_for_real_here(tmp_path):
    """Each task of a two-trainer CartPole started here as srun would start it (the worker's arguments, a task
    id): the file rendezvous, CURVE-keyed ZMQ pings between the groups and a gloo group of the two trainers,
    all real; then judged."""
    from launcher import runs

    exp = cartpole("slurm.network=null", "slurm.mpi=none", "workers.trainer.count=2")
    exp, run = runs.create(exp, tmp_path / "probe")
    names = [n for g in plan_of(exp).groups for n in g.workers]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "srl_hpc.probe",
                "--run-dir",
                str(run.root),
                "--task-id",
                str(i),
                "--log-dir",
                str(run.logs),
            ]
        )
        for i in range(len(names))
    ]
    for p in procs:
        assert p.wait(timeout=120) == 0
    found = tasks.collect(run.root, names)
    assert sorted(found["facts"]) == sorted(found["results"]) == sorted(names)
    plan = plan_of(exp)
    results = [*findings.judge_reports(plan, found), *findings.judge_found(plan, exp, found, binds=None)]
    text = "\n".join(map(line, results))
    cpus = [r for r in results if "cpus_per_task" in r[1]]  # here no Slurm binds the tasks
    assert statuses(cpus) == ["warn"] * 3 and all("not bound" in r[1] for r in cpus), text
    assert statuses(results) == ["ok"] * (len(results) - 3) + ["warn"] * 3 or [
        r[0] for r in results if r not in cpus
    ] == ["ok"] * (len(results) - 3), text
    assert "ok: gloo all-reduce among 2 trainer task(s)" in text
    assert all(found["results"][n]["answered"] >= 1 for n in names)  # every REP answered a pinger
    assert len(list(tasks.ProbeDir(run.root).done.iterdir())) == len(names)  # what the launcher counts
    assert json.loads((run.root / "summary.json").read_text())["probe"] is True  # the srun guard's cue
    assert Path(run.log("actor/1")).read_text().rstrip().endswith("probe task done")
