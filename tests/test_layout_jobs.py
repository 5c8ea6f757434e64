"""`slurm.layout: jobs`. Without a cluster: the plan's task offsets, every group's script (its own resources,
account and qos, one srun with no MPI, the worker's first task, the group watch), what is refused, how the
groups' jobs speak for the run, and the group watch's reading of squeue and slurm.json. Then (marked slurm)
against the project's real local Slurm: CartPole to its target with a group that starts late, a group's job
cancelled mid-run and before it started, a node lost from the actors' job, a QOS that cannot run the run's jobs,
a refused submission; the first on a cluster without het steps (turned off for that test)."""

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import launcher
from conftest import ROOT, assert_every_frame_accounted_for, no_process_left, srl, wait_until
from launcher import accounting, cli, plan, render, slurm, slurm_jobs
from srl_hpc import config, group_watch
from srl_hpc import graph as wiring
from srl_hpc.rundir import task_id_of

EXPERIMENT = """\
name: groups
workers:
  actor: {count: 5, ring_size: 4, inference_splits: 2}
  policy: {count: 2}
stop: {target_return: 475}
slurm:
  layout: jobs
  time: "02:00:00"
  account: rl-lab
  trainer: {partition: gpu, cpus_per_task: 4, mem_per_task: 8G, account: rl-gpu}
  policy: {partition: gpu, cpus_per_task: 2, mem_per_task: 4G, tasks_per_node: 2, qos: fast}
  actor: {partition: cpu, mem_per_task: 512M, tasks_per_node: 3, sbatch_options: ["--begin=now+60"]}
  setup: ["module load python"]
"""
SINFO = "\n".join(f"n{k}|{p}|16|64000|gpu:2" for k in range(1, 3) for p in ("cpu*", "gpu"))  # two nodes


def make(text=EXPERIMENT, *overrides):
    exp = config.loads(text)
    if overrides:
        exp = config.with_overrides(exp, list(overrides))
    return plan.make_plan(exp, "/shared/runs/groups", "/opt/venv/bin/python")


def test_each_group_counts_its_tasks_from_its_first_worker():
    p = make()
    assert p.layout == "jobs" and [g.name for g in p.groups] == ["trainer", "policy", "actor"]
    assert [p.first_task(g) for g in p.groups] == [0, 2, 4]  # controller/0 + trainer/0, policy/0-1, actor/0-4
    names = wiring.build(config.loads(EXPERIMENT)).names
    environ = {"SLURM_PROCID": "3"}  # the fourth task of the actor group's srun
    assert names[task_id_of(argparse.Namespace(task_id=None, first_task=4), environ)] == "actor/3"
    assert task_id_of(argparse.Namespace(task_id=None, first_task=None), environ) == 3  # a het job's one srun
    assert task_id_of(argparse.Namespace(task_id=7, first_task=4), environ) == 7  # a supervised child's own


def test_every_group_is_an_ordinary_job_with_its_own_resources_and_one_srun_without_mpi():
    scripts = dict(render.render_groups(make(), "srl-launch groups.yaml --slurm"))
    assert list(scripts) == ["trainer", "policy", "actor"]
    for first, (group, script) in zip((0, 2, 4), scripts.items()):
        assert "#SBATCH hetjob" not in script and "--het-group" not in script
        assert f"#SBATCH --job-name=srl-groups-{group}\n" in script and "#SBATCH --no-requeue\n" in script
        assert "#SBATCH --output=/shared/runs/groups/slurm-%j.out\n" in script
        assert "#SBATCH --time=02:00:00\n" in script and "module load python\n" in script
        srun = next(line for line in script.splitlines() if line.startswith("srun "))
        assert srun.startswith("srun --mpi=none --cpus-per-task=") or srun.startswith(
            "srun --mpi=none --no-kill --cpus"
        )
        assert f"--rendezvous file --first-task {first} --log-dir" in script
        assert f'-m srl_hpc.srun_guard /shared/runs/groups "$srun_pid" --group {group} &\n' in script
        assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    trainer, policy, actor = scripts.values()
    assert (
        "#SBATCH --account=rl-gpu\n# controller/0 rides along without CPUs of its own: srun starts one task "
        "more (--overcommit)\n#SBATCH --nodes=1\n#SBATCH --ntasks=1\n" in trainer
    )
    assert "#SBATCH --account=rl-lab\n#SBATCH --qos=fast\n" in policy and "--gres=gpu" not in policy
    assert "#SBATCH --partition=cpu\n#SBATCH --account=rl-lab\n#SBATCH --nodes=2\n#SBATCH --ntasks=5\n" in actor
    assert "#SBATCH --begin=now+60\n" in actor and "--begin" not in trainer
    assert "workers 4 to 8" in actor
    # the actors' job spans two nodes: it and its srun go on without one that fails; the others end with theirs
    assert "#SBATCH --no-kill\n" in actor and "srun --mpi=none --no-kill " in actor
    assert "--no-kill" not in trainer + policy
    one_node = dict(render.render_groups(make(EXPERIMENT, "slurm.actor.tasks_per_node=5"), "test"))["actor"]
    assert "--no-kill" not in one_node  # (its one node lost, the job ends: the others' watches end theirs)


def test_a_het_jobs_template_is_refused_for_groups_naming_the_variable(tmp_path):
    mine = tmp_path / "mine.sbatch"
    mine.write_text((render.TEMPLATES / "hetjob.sbatch").read_text())
    with pytest.raises(plan.PlanError, match=r"slurm.template .*: \$\{\w+\} is not a variable of a group"):
        render.render_groups(make(EXPERIMENT, f"slurm.template={mine}"), "test")


def test_the_hetjob_layout_is_unchanged_by_it():
    script = render.render(make(EXPERIMENT, "slurm.layout=hetjob"), "test")
    assert script.count("\n#SBATCH hetjob\n") == 2 and "--first-task" not in script and "--no-requeue" not in script
    assert "--rendezvous mpi" in script and "--group" not in script


def test_groups_of_separate_jobs_may_share_nodes():
    two_nodes = plan.parse_sinfo(SINFO)
    plan.check_fits(make(), two_nodes)  # three groups' jobs, two nodes
    with pytest.raises(plan.PlanError, match="need 4 distinct nodes"):
        plan.check_fits(make(EXPERIMENT, "slurm.layout=hetjob"), two_nodes)


def test_requeue_and_continuations_are_refused_naming_slurm_layout(tmp_path, monkeypatch):
    with pytest.raises(plan.PlanError, match="slurm.requeue needs slurm.layout: hetjob"):
        make(EXPERIMENT, "slurm.requeue={signal_seconds: 90, max_requeues: 2}")
    monkeypatch.setattr(slurm, "cluster_facts", no_cluster)
    with pytest.raises(plan.PlanError, match="resume --after/--chain .* slurm.layout: jobs is a job per group"):
        slurm.prepare(
            config.loads(EXPERIMENT), tmp_path / "run", sys.executable, "test", require_cluster=False, continuation=True
        )


def no_cluster():
    raise slurm.SlurmError("sinfo not found")


def test_dry_run_prints_every_groups_script_and_prepare_refuses(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(slurm, "cluster_facts", no_cluster)
    exp = tmp_path / "groups.yaml"
    exp.write_text(EXPERIMENT)
    assert cli.main([str(exp), "--slurm", "--dry-run", "--run-dir", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert out.count("#!/bin/bash\n") == 3 and out.index("# ---- job-trainer.sbatch (group trainer)\n#!/bin/bash") == 0
    assert "# ---- job-policy.sbatch (group policy)\n" in out and "# ---- job-actor.sbatch (group actor)\n" in out
    assert not (tmp_path / "run").exists()
    assert cli.main(["prepare", str(exp), "--run-dir", str(tmp_path / "run")]) == 2
    assert "with slurm.layout: jobs a run is a job per group" in capsys.readouterr().err


def test_a_cluster_without_het_steps_refuses_the_hetjob_layout_and_says_which_to_use(tmp_path, monkeypatch):
    config_text = "SchedulerParameters     = batch_sched_delay=0,disable_hetero_steps\nClusterName = c\n"
    four_nodes = "\n".join(f"n{k}|{p}|16|64000|gpu:2" for k in range(1, 5) for p in ("cpu*", "gpu"))
    monkeypatch.setattr(slurm, "cluster_facts", lambda: plan.parse_sinfo(four_nodes))
    monkeypatch.setattr(slurm, "mpi_plugins", lambda: ["none", "pmix"])
    monkeypatch.setattr(slurm, "cluster_config", lambda: accounting.parse_config(config_text))
    hetjob = config.with_overrides(config.loads(EXPERIMENT), ["slurm.layout=hetjob"])
    with pytest.raises(plan.PlanError) as refused:
        slurm.prepare(hetjob, tmp_path / "run", sys.executable, "test")
    assert "SchedulerParameters=batch_sched_delay=0,disable_hetero_steps" in str(refused.value)
    assert "Set slurm.layout: jobs" in str(refused.value)
    request = slurm.prepare(config.loads(EXPERIMENT), tmp_path / "run", sys.executable, "test")
    assert request.checked is None and [group for group, _ in request.scripts] == ["trainer", "policy", "actor"]


def info(state, raw, reason="", start=""):
    return slurm_jobs.JobInfo(state, raw, reason, start)


def test_the_groups_jobs_speak_for_the_run_together():
    ids = ["10", "11", "12"]
    groups = dict(zip(["trainer", "policy", "actor"], ids))
    late = {
        "10": info("running", "RUNNING"),
        "11": info("running", "RUNNING"),
        "12": info("pending", "PENDING", "Priority", "N/A"),
    }
    assert slurm_jobs.current(ids, late, together=True) == ("12", late["12"])  # the run waits for it
    assert (
        slurm_jobs.groups_line(groups, late)
        == "waiting for group actor (job 12): pending, reason Priority, expected start unknown"
    )
    going = {**late, "12": info("cancelled", "CANCELLED")}  # the others still wind down: not over yet
    assert slurm_jobs.current(ids, going, together=True)[0] == "10"
    assert (
        slurm_jobs.groups_line(groups, going)
        == "group trainer (job 10) running, group policy (job 11) running, group actor (job 12) cancelled"
    )
    over = {"10": info("cancelled", "CANCELLED"), "11": info("completed", "COMPLETED"), "12": info("failed", "FAILED")}
    assert slurm_jobs.current(ids, over, together=True) == ("12", over["12"])  # the end that matters most
    assert slurm_jobs.current(ids, over) == ("12", over["12"])  # (a chain: the last job)


def test_the_group_watch_finds_the_other_groups_and_the_first_that_ended_badly(tmp_path):
    record = {"job_id": "10", "layout": "jobs", "groups": {"trainer": "10", "policy": "11", "actor": "12"}}
    assert group_watch.others(record, "11") == {"10": "trainer", "12": "actor"}
    assert group_watch.others(record, "99") is None  # not this run's (submitted by hand, or resubmitted since)
    assert group_watch.others({"job_id": "10"}, "10") is None
    jobs = {"10": "trainer", "12": "actor"}
    assert group_watch.first_ended_badly("10|RUNNING\n12|PENDING\n", jobs) is None
    assert group_watch.first_ended_badly("10|COMPLETED\n12|RUNNING\n", jobs) is None  # a clean end is no reason
    assert group_watch.first_ended_badly("12|CANCELLED by 0\n10|RUNNING\n", jobs) == ("12", "CANCELLED")
    assert group_watch.first_ended_badly("10|NODE_FAIL\n12|TIMEOUT\n", jobs) == ("10", "NODE_FAIL")
    assert group_watch.first_ended_badly("", jobs) is None
    output = tmp_path / "slurm-11.out"
    assert group_watch.said(output) is None
    output.write_text("group_watch: cannot watch the other groups' jobs\n")
    assert group_watch.said(output) is None
    output.write_text(
        "srun: error: something\ngroup_watch: ending this job: group actor's job 12 ended CANCELLED "
        "before the run did; cancelling group policy's job 11\n"
    )
    assert group_watch.said(output) == (
        "group actor's job 12 ended CANCELLED before the run did; cancelling group policy's job 11"
    )


def test_a_group_whose_srun_ended_after_another_groups_job_ended_badly_cancels_its_job_for_it(tmp_path, fake_bin):
    """Its workers left when the other group's did (the rendezvous' barrier, the controller), before the watch's
    next question: it asks once more, so that the job ends CANCELLED for the other group, not FAILED for itself."""
    from srl_hpc.rundir import RunDir

    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    run.slurm.write_text(json.dumps({"job_id": "10", "groups": {"trainer": "10", "policy": "11", "actor": "12"}}))
    cancelled = tmp_path / "scancel.args"
    fake_bin("scancel", f'echo "$@" >> {cancelled}')
    fake_bin("squeue", 'echo "10|RUNNING"; echo "12|CANCELLED"')
    said = group_watch.watch(run, "11", "policy", srun_alive=lambda: False, interval=60)
    assert said == "group actor's job 12 ended CANCELLED before the run did; cancelling group policy's job 11"
    assert cancelled.read_text().split() == ["11"]

    cancelled.unlink()
    fake_bin("squeue", 'echo "10|RUNNING"; echo "12|RUNNING"')  # srun ended for reasons of its own: its outcome
    assert group_watch.watch(run, "11", "policy", srun_alive=lambda: False, interval=60) is None
    assert not cancelled.exists()
    run.summary.write_text("{}")  # the run ended: nothing to ask
    fake_bin("squeue", 'echo "12|CANCELLED"')
    assert group_watch.watch(run, "11", "policy", srun_alive=lambda: False, interval=60) is None
    assert not cancelled.exists()


# ------------------------------------------------------------------ against the local Slurm (@pytest.mark.slurm)

LOCAL_PROFILE = ROOT / "clusters" / "local.yaml"  # the local Slurm's partitions and network, where it exists
PROFILE = ["--profile", LOCAL_PROFILE] if LOCAL_PROFILE.exists() else []
CARTPOLE = ROOT / "experiments" / "cartpole_ppo.yaml"
SCRIPT = ROOT / "scripts" / "local_slurm.sh"


def groups_of(run_dir: Path) -> dict[str, str]:
    record = json.loads((run_dir / "slurm.json").read_text())
    assert record["layout"] == "jobs" and record["job_id"] == record["groups"]["trainer"], record
    return record["groups"]


def states(groups: dict[str, str]) -> dict[str, str]:
    infos = slurm_jobs.job_states(list(groups.values()))
    return {group: infos[job].raw for group, job in groups.items()}


def queued_jobs() -> set[str]:
    return set(
        subprocess.run(
            ["squeue", "-h", "-o", "%i"], capture_output=True, text=True, check=True, timeout=60
        ).stdout.split()
    )


@pytest.fixture
def without_het_steps():
    """The local Slurm as a site without het steps (disable_hetero_steps, applied by scontrol reconfigure) for one
    test, then as it was."""
    settings = slurm.cluster_config()
    if accounting.het_steps_disabled(settings):
        yield  # started that way (SRL_SLURM_HETSTEPS=0)
        return
    if os.geteuid() != 0 or settings.get("ClusterName") != "srl-local":
        pytest.skip("turning het steps off takes root on the project's local Slurm (scripts/local_slurm.sh hetsteps)")
    subprocess.run(["bash", SCRIPT, "hetsteps", "off"], check=True, capture_output=True, timeout=120)
    try:
        yield
    finally:
        subprocess.run(["bash", SCRIPT, "hetsteps", "on"], check=True, capture_output=True, timeout=120)


@pytest.mark.slurm
def test_without_het_steps_cartpole_runs_as_one_job_per_group_waiting_for_a_late_group(tmp_path, without_het_steps):
    assert accounting.het_steps_disabled(slurm.cluster_config())
    proc = srl(CARTPOLE, "--slurm", "--run-dir", tmp_path / "het", *PROFILE)  # the default layout: refused
    assert proc.returncode == 2 and "disable_hetero_steps" in proc.stderr and "Set slurm.layout: jobs" in proc.stderr
    assert not (tmp_path / "het").exists()
    run_dir = tmp_path / "run"
    # the actor group's job may start only 15 s after the others: the others wait for it at the barrier
    proc = srl(
        CARTPOLE,
        "--slurm",
        "--follow",
        "--run-dir",
        run_dir,
        *PROFILE,
        "--set",
        "slurm.layout=jobs",
        "--set",
        "slurm.actor.sbatch_options=[--begin=now+15]",
        "--set",
        "stop.target_return=null",
        "--set",
        "stop.wall_time=10",
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    groups = groups_of(run_dir)
    assert list(groups) == ["trainer", "policy", "actor"] and len(set(groups.values())) == 3
    assert (
        f"submitted jobs {groups['trainer']} (trainer), {groups['policy']} (policy), {groups['actor']} (actor)"
        in proc.stdout
    )
    assert f"waiting for group actor (job {groups['actor']}): pending, reason " in proc.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "succeeded" and summary["reason"].startswith("wall time"), summary
    assert summary["policy_version"] > 1  # trained with the late group's samples
    assert_every_frame_accounted_for(summary)
    assert states(groups) == {"trainer": "COMPLETED", "policy": "COMPLETED", "actor": "COMPLETED"}
    table = json.loads((run_dir / "workers.json").read_text())  # met through files, each at its task id
    assert sorted(table) == ["actor/0", "actor/1", "controller/0", "policy/0", "trainer/0"]
    assert sorted(p.name for p in (run_dir / "traces").glob("*.h5")) == [
        "actor-0.h5",
        "actor-1.h5",
        "controller-0.h5",
        "policy-0.h5",
        "trainer-0.h5",
    ]
    for group in groups:
        assert (run_dir / f"job-{group}.sbatch").exists()
    out = srl("status", run_dir).stdout
    assert "state: completed" in out and f"group actor: job {groups['actor']} COMPLETED" in out
    assert "actor/1 INFO rendezvous done: 5 workers" in srl("logs", run_dir, "--worker", "actor/1").stdout
    no_process_left(run_dir)


def long_run(tmp_path, *overrides):
    """CartPole with slurm.layout: jobs and a stop on the whole run's wall time, submitted (not followed)."""
    profiles = [LOCAL_PROFILE] if LOCAL_PROFILE.exists() else []
    return launcher.submit(
        CARTPOLE,
        slurm=True,
        run_dir=tmp_path / "run",
        profiles=profiles,
        overrides=["slurm.layout=jobs", "stop.target_return=null", *overrides],
    )


@pytest.mark.slurm
def test_a_group_cancelled_mid_run_ends_the_others_promptly_status_names_it_and_the_run_resumes(tmp_path):
    run = long_run(tmp_path, "stop.wall_time=20", "workers.trainer.checkpoint_interval=5")
    wait_until(
        lambda: " version " in run.logs() and int(run.logs().rsplit("| version", 1)[1].split()[0]) >= 5,
        150,
        "a few trained versions in the controller log",
        lambda: run.logs()[-3000:],
        interval=0.5,
    )
    groups = groups_of(run.run_dir)
    subprocess.run(["scancel", groups["policy"]], check=True, timeout=60)
    cancelled = time.monotonic()
    wait_until(
        lambda: all(s not in ("RUNNING", "PENDING", "COMPLETING") for s in states(groups).values()),
        60,
        "every group's job to end",
        lambda: states(groups),
        interval=1,
    )
    assert time.monotonic() - cancelled < 30, states(groups)
    ended = states(groups)
    # the trainer's watch cancels its job; the actors' may, or the controller, cancelled, stops them first
    assert ended["trainer"] == ended["policy"] == "CANCELLED" and ended["actor"] in ("CANCELLED", "COMPLETED"), ended
    no_process_left(run.run_dir)
    proc = srl("status", run.run_dir)
    assert proc.returncode == 1 and "state: cancelled" in proc.stdout, proc.stdout
    assert (
        f"group policy's job {groups['policy']} ended CANCELLED before the run did; the other groups' jobs were "
        "cancelled for it" in proc.stdout
    )
    assert (
        f"(its group watch: group policy's job {groups['policy']} ended CANCELLED before the run did; "
        f"cancelling group trainer's job {groups['trainer']})" in proc.stdout
    )
    assert run.run_dir.joinpath("checkpoints", "latest.pt").exists()
    resumed = srl("resume", run.run_dir, "--follow")  # every group's job anew, from the checkpoint
    assert resumed.returncode == 0, resumed.stdout[-6000:] + resumed.stderr[-3000:]
    again = groups_of(run.run_dir)
    assert not set(again.values()) & set(groups.values())
    summary = json.loads((run.run_dir / "summary.json").read_text())
    assert summary["attempt"] == 2 and summary["status"] == "succeeded" and summary["reason"].startswith("wall time")
    version = re.search(r"resumed from \S+: version (\d+)", (run.run_dir / "logs" / "trainer-0.log").read_text())
    assert version and 5 <= int(version[1]) < summary["policy_version"], summary  # on from its checkpoint
    assert states(again) == {"trainer": "COMPLETED", "policy": "COMPLETED", "actor": "COMPLETED"}


@pytest.mark.slurm
def test_a_node_lost_from_the_actors_job_takes_its_actors_and_the_run_goes_on_in_the_same_jobs(tmp_path):
    """The actors' job spans two nodes of its own (--exclusive); the second loses power. That job and its srun go
    on without the node (--no-kill), the controller without its two actors once they have been silent for
    monitor.heartbeat_timeout (2 of 4 left: workers.actor.min_alive 0.5), and every group's job completes."""
    run = long_run(
        tmp_path,
        "stop.wall_time=34",
        "workers.actor.count=4",
        "monitor.heartbeat_timeout=12",
        "slurm.actor.sbatch_options=[--exclusive]",
    )
    local_slurm, host = str(ROOT / "scripts" / "local_slurm.sh"), None
    try:
        wait_until(lambda: "| sample" in run.logs(), 180, "a progress line", lambda: run.logs()[-3000:], interval=0.5)
        table = json.loads((run.run_dir / "workers.json").read_text())
        host = table["actor/2"]["node"]
        assert table["actor/3"]["node"] == host != table["actor/0"]["node"] == table["actor/1"]["node"], table
        assert host not in {table[w]["node"] for w in ("controller/0", "trainer/0", "policy/0")}, table
        subprocess.run(["bash", local_slurm, "lose", host, "--down"], check=True, timeout=30)
        assert run.wait(timeout=240) == "completed", run.logs()[-3000:]
    finally:
        if host is not None:
            subprocess.run(["bash", local_slurm, "start"], check=True, timeout=120)  # the host comes back
    assert "the run goes on with 2 of 4 actors" in run.logs()
    summary = json.loads((run.run_dir / "summary.json").read_text())
    assert summary["status"] == "succeeded" and summary["reason"].startswith("wall time"), summary
    assert sorted(summary["lost_workers"]) == ["actor/2", "actor/3"] and summary["failed_workers"] == {}, summary
    assert_every_frame_accounted_for(summary)
    assert states(groups_of(run.run_dir)) == {"trainer": "COMPLETED", "policy": "COMPLETED", "actor": "COMPLETED"}
    no_process_left(run.run_dir)


@pytest.mark.slurm
def test_a_group_cancelled_before_it_starts_ends_the_others_waiting_for_it(tmp_path):
    run = long_run(tmp_path, "stop.wall_time=60", "slurm.actor.sbatch_options=[--begin=now+300]")
    groups = groups_of(run.run_dir)
    arrivals = run.run_dir / "rendezvous" / "barrier"
    wait_until(
        lambda: arrivals.is_dir() and len(list(arrivals.iterdir())) >= 3,
        120,
        "the trainer and policy groups' workers at the barrier",
        lambda: states(groups),
        interval=0.5,
    )
    assert states(groups)["actor"] == "PENDING"
    subprocess.run(["scancel", groups["actor"]], check=True, timeout=60)
    cancelled = time.monotonic()
    wait_until(
        lambda: states(groups)["trainer"] == "CANCELLED" and states(groups)["policy"] == "CANCELLED",
        60,
        "the trainer and policy groups' jobs to be cancelled",
        lambda: states(groups),
        interval=1,
    )
    assert time.monotonic() - cancelled < 30
    no_process_left(run.run_dir)
    out = srl("status", run.run_dir).stdout
    assert "state: cancelled" in out and f"group actor's job {groups['actor']} ended CANCELLED" in out, out


@pytest.mark.slurm
def test_srl_launch_cancel_cancels_every_groups_job(tmp_path):
    run = long_run(tmp_path, "stop.wall_time=60", "slurm.actor.sbatch_options=[--begin=now+300]")
    groups = groups_of(run.run_dir)
    proc = srl("cancel", run.run_dir)
    assert proc.returncode == 0 and f"cancelled job {', '.join(groups.values())}" in proc.stdout, proc.stdout
    wait_until(
        lambda: set(states(groups).values()) == {"CANCELLED"},
        60,
        "every group's job cancelled",
        lambda: states(groups),
        interval=1,
    )
    no_process_left(run.run_dir)


@pytest.mark.slurm
@pytest.mark.parametrize("layout", ["hetjob", "jobs"])
def test_a_qos_that_cannot_run_every_group_at_once_is_refused_before_anything_is_submitted(tmp_path, layout):
    small = subprocess.run(
        ["sacctmgr", "-nP", "show", "qos", "small", "format=Name,MaxJobsPU"], capture_output=True, text=True, timeout=60
    )
    if small.stdout.strip() != "small|2":
        pytest.skip(f"the local Slurm has no QOS small with MaxJobsPerUser=2 (accounting off?): {small.stdout!r}")
    before = queued_jobs()
    proc = srl(
        CARTPOLE,
        "--slurm",
        "--run-dir",
        tmp_path / "run",
        *PROFILE,
        "--set",
        "slurm.qos=small",
        "--set",
        f"slurm.layout={layout}",
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert (
        "QOS 'small' runs at most 2 of your jobs at once (MaxJobsPerUser), and this run needs 3 jobs" in proc.stderr
        and "trainer, policy, actor" in proc.stderr
        and "another QOS (slurm.qos" in proc.stderr
    )
    assert not (tmp_path / "run").exists() and queued_jobs() <= before


@pytest.mark.slurm
@pytest.mark.parametrize("layout", ["hetjob", "jobs"])
def test_a_refused_submission_says_slurms_words_and_leaves_no_group_behind(tmp_path, layout):
    run_dir = tmp_path / "run"
    proc = srl(
        CARTPOLE,
        "--slurm",
        "--run-dir",
        run_dir,
        *PROFILE,
        "--set",
        f"slurm.layout={layout}",
        "--set",
        "slurm.actor.sbatch_options=[--gres=nosuch:1]",
    )  # sbatch refuses the actor group's
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "Invalid generic resource (gres) specification" in proc.stderr, proc.stderr
    assert not (run_dir / "slurm.json").exists()
    if layout == "hetjob":
        assert "if this cluster does not take heterogeneous jobs, set slurm.layout: jobs" in proc.stderr
        return
    first, second = re.search(
        r"group actor's job was not submitted: .* cancelled the jobs already submitted: "
        r"(\d+) \(trainer\), (\d+) \(policy\)",
        proc.stderr,
    ).groups()
    assert states({"trainer": first, "policy": second}) == {"trainer": "CANCELLED", "policy": "CANCELLED"}
