"""The cluster's configuration and the user's QOS and association limits, read from recorded `scontrol`,
`sacctmgr` and `squeue` text (the project's local Slurm with accounting), and the refusal of a run whose
jobs they would not take or not run at once. The real refusal is in test_layout_jobs.py (marked slurm)."""

import os
import pwd
import sys

import pytest

from launcher import accounting, plan, slurm
from srl_hpc import config

# `scontrol show config` (the head, and the lines read), Slurm 22.05 with slurmdbd
CONFIG = """\
Configuration data as of 2026-12-06T02:59:23
AccountingStorageBackupHost = (null)
AccountingStorageEnforce = associations,limits,qos
AccountingStorageHost   = 10.250.0.1
AccountingStorageType   = accounting_storage/slurmdbd
AuthInfo                = cred_expire=15
ClusterName             = srl-local
SchedulerParameters     = batch_sched_delay=0,bf_interval=1,sched_interval=2

MPI Plugins Configuration:
PMIxDirectConn          = false
Slurmctld(primary) at n0 is UP
"""
# sacctmgr -nP show user root withassoc format=accounting.ASSOC_FORMAT
ASSOCIATIONS = "root|rl|srl-local|rl||normal,small|||\nroot|rl|srl-local|root||normal,small|||\n"
# sacctmgr -nP show qos format=accounting.QOS_FORMAT
QOS = "normal||\nsmall|2|3\n"
# squeue -u root -h -r -o accounting.QUEUE_FORMAT: one job, and a het job's three components
QUEUE = "70|RUNNING|small|rl|cpu\n81+0|PENDING|normal|rl|gpu\n81+1|PENDING|normal|rl|gpu\n81+2|PENDING|normal|rl|cpu\n"

EXPERIMENT = """\
name: limits
workers: {actor: {count: 2}}
stop: {wall_time: 60}
slurm:
  qos: small
  trainer: {partition: gpu}
  policy: {partition: gpu}
  actor: {partition: cpu}
"""


def make(text=EXPERIMENT, *overrides):
    exp = config.with_overrides(config.loads(text), list(overrides)) if overrides else config.loads(text)
    return plan.make_plan(exp, "/shared/runs/limits", "/opt/venv/bin/python")


def limits(associations=ASSOCIATIONS, qos=QOS, queue=""):
    return accounting.Limits(
        "root",
        "srl-local",
        tuple(accounting.parse_associations(associations)),
        accounting.parse_qos(qos),
        tuple(accounting.parse_queue(queue)),
    )


def test_the_config_gives_the_settings_that_decide_what_is_checked():
    settings = accounting.parse_config(CONFIG)
    assert settings["ClusterName"] == "srl-local" and settings["AuthInfo"] == "cred_expire=15"
    assert accounting.limits_enforced(settings) and not accounting.het_steps_disabled(settings)
    assert "Slurmctld(primary) at n0 is UP" not in "".join(settings)
    disabled = accounting.parse_config(CONFIG.replace("sched_interval=2", "sched_interval=2,disable_hetero_steps"))
    assert accounting.het_steps_disabled(disabled)
    for line in ("AccountingStorageEnforce = associations", "AccountingStorageType   = accounting_storage/none"):
        key = line.split()[0]
        changed = "\n".join(line if row.startswith(key + " ") else row for row in CONFIG.splitlines())
        assert not accounting.limits_enforced(accounting.parse_config(changed)), line
    # what each word implies (slurm.conf(5)): safe -> limits; limits and qos -> associations
    for words, implied in (("safe", {"limits", "associations"}), ("qos", {"associations"}), ("associations", set())):
        found = accounting.enforced({**settings, "AccountingStorageEnforce": words})
        assert found == {words, *implied}, words
    assert accounting.enforced({"AccountingStorageEnforce": "limits"}) == set()  # without slurmdbd: nothing


def test_associations_qos_and_queue_are_parsed_from_sacctmgr_and_squeue():
    rl, own = accounting.parse_associations(ASSOCIATIONS)
    assert (rl.default_account, rl.cluster, rl.account, rl.partition, rl.qos) == (
        "rl",
        "srl-local",
        "rl",
        "",
        ("normal", "small"),
    )
    assert (rl.default_qos, rl.max_jobs, rl.max_submit, own.account) == ("", None, None, "root")
    assert accounting.parse_qos(QOS) == {
        "normal": accounting.Qos("normal", None, None),
        "small": accounting.Qos("small", 2, 3),
    }
    queue = accounting.parse_queue(QUEUE + "garbage\n")
    assert [q.qos for q in queue] == ["small", "normal", "normal", "normal"]  # each het component a job


@pytest.mark.parametrize(
    "layout, counted",
    [("hetjob", "each component of the het job counts as a job"), ("jobs", "one job per group, slurm.layout: jobs")],
)
def test_a_qos_that_runs_fewer_jobs_than_the_run_has_groups_is_refused_naming_it(layout, counted):
    problems = accounting.limit_problems(make(EXPERIMENT, f"slurm.layout={layout}"), limits())
    assert len(problems) == 1
    text = problems[0]
    assert text.startswith("QOS 'small' runs at most 2 of your jobs at once (MaxJobsPerUser)"), text
    assert f"this run needs 3 jobs ({counted}: trainer, policy, actor)" in text
    assert "run fewer groups" in text and "another QOS (slurm.qos" in text


def test_the_jobs_already_queued_count_toward_max_submit():
    two_groups = make(EXPERIMENT, "workers.placement=impala", "workers.policy.count=0")  # trainer, actor: 2 jobs
    assert accounting.limit_problems(two_groups, limits()) == []
    assert accounting.limit_problems(two_groups, limits(queue=QUEUE)) == []  # 1 of small's 3 taken: 2 left
    (text,) = accounting.limit_problems(two_groups, limits(queue=QUEUE + "72|PENDING|small|rl|cpu\n"))
    assert "QOS 'small' takes at most 3 of your jobs in the queue (MaxSubmitJobsPerUser); you have 2 there" in text
    assert "needs 2 jobs" in text and "wait for (or cancel) jobs of yours" in text


def test_a_run_within_its_limits_or_without_known_ones_is_not_refused():
    assert accounting.limit_problems(make(EXPERIMENT, "slurm.qos=normal"), limits(queue=QUEUE)) == []
    # without slurm.qos: the association's default QOS (none set, two allowed: "normal", as Slurm takes)
    assert accounting.limit_problems(make(EXPERIMENT, "slurm.qos=null"), limits()) == []
    # a user without an association here: nothing to check (sbatch refuses with its own words)
    assert accounting.limit_problems(make(), limits(associations="")) == []
    # each group's own QOS: only the trainer and the policy worker in small
    assert accounting.limit_problems(make(EXPERIMENT, "slurm.actor.qos=normal"), limits()) == []


def test_the_default_qos_and_a_partitions_own_association_apply():
    default_small = "root|rl|srl-local|rl||normal,small|small||\n"
    (text,) = accounting.limit_problems(make(EXPERIMENT, "slurm.qos=null"), limits(default_small))
    assert text.startswith("QOS 'small' runs at most 2")
    per_partition = ASSOCIATIONS + "root|rl|srl-local|rl|gpu|normal|||1\n"  # MaxSubmit 1 on gpu
    (text,) = accounting.limit_problems(make(EXPERIMENT, "slurm.qos=normal"), limits(per_partition))
    assert text.startswith(
        "your association with account 'rl' in partition 'gpu' takes at most 1 of your jobs "
        "in the queue (MaxSubmitJobs); you have none there, and this run needs 2 jobs"
    )
    assert "trainer, policy)" in text
    # a queued job counts toward the association it runs under: the gpu one's, not the account's for every partition
    queued = limits(per_partition, queue=QUEUE)
    rl, _, rl_gpu = queued.associations
    assert (accounting.queued_under(queued, rl), accounting.queued_under(queued, rl_gpu)) == (2, 2)
    assert accounting.queued_in_qos(queued, "normal") == 3
    # only one QOS allowed and no default: the job runs in that one
    assert accounting.qos_of(accounting.parse_associations("root|rl|srl-local|rl||small|||\n")[0], None) == "small"


def test_limits_are_read_only_where_enforced_and_every_answer_came():
    asked = []

    def ask(cmd):
        asked.append(cmd[:3])
        return {"user": ASSOCIATIONS, "qos": QOS}.get(cmd[3] if cmd[0] == "sacctmgr" else "", QUEUE)

    settings = accounting.parse_config(CONFIG)
    read = accounting.read_limits(settings, ask)
    assert read.cluster == "srl-local" and len(read.associations) == 2 and len(read.queue) == 4
    assert [a[0] for a in asked] == ["sacctmgr", "sacctmgr", "squeue"]
    assert accounting.read_limits(settings, lambda cmd: None) is None  # sacctmgr missing or not answering
    assert accounting.read_limits({**settings, "AccountingStorageEnforce": "associations"}, ask) is None
    unenforced = accounting.ask_limits({**settings, "AccountingStorageEnforce": "associations"}, ask)  # the probe's
    assert unenforced == read and read.user == pwd.getpwuid(os.getuid()).pw_name


@pytest.fixture
def small_qos_cluster(monkeypatch):
    """prepare against recorded answers: sinfo's nodes, scontrol's config, sacctmgr's limits, an empty queue."""
    sinfo = "\n".join(f"n{k}|{p}|16|16000|gpu:2" for k in range(1, 5) for p in ("cpu*", "gpu"))
    monkeypatch.setattr(slurm, "cluster_facts", lambda: plan.parse_sinfo(sinfo))
    monkeypatch.setattr(slurm, "mpi_plugins", lambda: ["none", "pmix"])
    monkeypatch.setattr(slurm, "cluster_config", lambda: accounting.parse_config(CONFIG))
    answers = {"user": ASSOCIATIONS, "qos": QOS}
    monkeypatch.setattr(slurm, "_answer", lambda cmd: answers.get(cmd[3], "") if cmd[0] == "sacctmgr" else "")


def test_prepare_refuses_before_anything_is_submitted(tmp_path, small_qos_cluster):
    with pytest.raises(plan.PlanError, match="QOS 'small' runs at most 2 of your jobs at once"):
        slurm.prepare(config.loads(EXPERIMENT), tmp_path / "run", sys.executable, "test")
    assert not (tmp_path / "run").exists()
    ok = slurm.prepare(
        config.loads(EXPERIMENT.replace("qos: small", "qos: normal")), tmp_path / "run", sys.executable, "test"
    )
    assert ok.checked is None and "--qos=normal" in ok.script
