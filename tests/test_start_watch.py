"""The start-up watch (srl_hpc.start_watch): srun's reports of dead tasks end the barrier's wait for them. Real
files and a real barrier; srun's lines are written as srun writes them into the job's output."""

import signal
import subprocess
import threading

import pytest

from srl_hpc import config, srun_guard, start_watch
from srl_hpc import graph as wiring
from srl_hpc.rundir import RunDir
from srl_hpc.services.rendezvous import FileBarrier, RendezvousError, abandoned_by

NAMES = ["controller/0", "trainer/0", "policy/0", "actor/0", "actor/1"]


def test_srun_reports_of_tasks_that_ended_badly_are_read_task_by_task():
    text = (
        "srun: error: n2: task 2: Killed\n"
        "some worker output\n"
        "srun: error: n4: tasks 3-4,6: Exited with exit code 1\n"
        "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n"
    )
    assert start_watch.task_ends(text) == [
        (2, "n2", "Killed"),
        (3, "n4", "Exited with exit code 1"),
        (4, "n4", "Exited with exit code 1"),
        (6, "n4", "Exited with exit code 1"),
    ]


def test_a_task_srun_saw_killed_before_it_arrived_ends_the_others_wait_naming_its_worker(tmp_path):
    run = RunDir(tmp_path)
    output = tmp_path / "slurm-7.out"
    # a requeued job's output: its first attempt's report, then the marker of this attempt
    output.write_text(f"srun: error: n1: task 0: Killed\n{run.root}: attempt 2\n")
    errors = {}

    def wait(name):
        try:
            FileBarrier(run, NAMES, name, timeout=60).wait()
        except RendezvousError as e:
            errors[name] = str(e)

    waiting = [threading.Thread(target=wait, args=(n,)) for n in NAMES if n != "policy/0"]
    for t in waiting:
        t.start()
    srun_running = threading.Event()
    srun_running.set()
    watcher = threading.Thread(
        target=lambda: errors.setdefault(
            "watch", start_watch.watch(run, NAMES, output, srun_running.is_set, interval=0.05)
        )
    )
    watcher.start()
    with open(output, "a") as f:
        f.write("srun: error: n2: task 2: Killed\n")
    for t in [*waiting, watcher]:
        t.join(timeout=30)
    srun_running.clear()
    assert errors.pop("watch") == "policy/0"
    assert abandoned_by(run) == "policy/0"
    assert set(errors) == set(NAMES) - {"policy/0"}
    assert all("rendezvous abandoned: policy/0 exited before it" in e for e in errors.values()), errors


def test_the_watch_ends_with_srun_or_the_barriers_go(tmp_path):
    run = RunDir(tmp_path)
    output = tmp_path / "slurm-7.out"
    assert start_watch.watch(run, NAMES, output, lambda: False) is None  # srun has ended
    run.rendezvous.mkdir(parents=True)
    run.barrier_go.write_text("")
    assert start_watch.watch(run, NAMES, output, lambda: True, interval=0.05) is None  # everyone met


@pytest.mark.parametrize("line", ["srun: error: n2: task 9: Killed", "srun: Job step aborted"])
def test_lines_that_name_no_task_of_the_run_change_nothing(tmp_path, line):
    run = RunDir(tmp_path)
    output = tmp_path / "slurm-7.out"
    output.write_text("")
    looks = iter([True, True, True, False])
    with open(output, "a") as f:
        f.write(line + "\n")
    assert start_watch.watch(run, NAMES, output, lambda: next(looks), interval=0.01) is None
    assert abandoned_by(run) is None


def test_an_srun_still_running_after_the_grace_is_ended_and_one_that_ends_is_left_alone():
    stuck = subprocess.Popen(["sleep", "60"])  # stands for an srun whose tasks wait inside MPI_Init
    assert start_watch.end_srun_if_stuck(stuck.pid, lambda: stuck.poll() is None, grace=0.2)
    assert stuck.wait(timeout=10) == -signal.SIGTERM
    ending = subprocess.Popen(["true"])
    assert not start_watch.end_srun_if_stuck(ending.pid, lambda: ending.poll() is None, grace=5)


def test_in_a_het_step_srun_numbers_each_components_tasks_from_zero_and_the_node_says_which():
    """srun's 'n2: task 0' in a het step is the first task of the component on n2: here policy/0, task 2."""
    env = {
        "SLURM_HET_SIZE": "3",
        "SLURM_JOB_NODELIST_HET_GROUP_0": "n1",
        "SLURM_JOB_NODELIST_HET_GROUP_1": "n2",
        "SLURM_JOB_NODELIST_HET_GROUP_2": "n[3-4]",
    }
    expand = {"n1": ["n1"], "n2": ["n2"], "n[3-4]": ["n3", "n4"]}.get
    groups = start_watch.het_groups([2, 1, 2], env, expand)  # controller + trainer, policy, two actors
    assert groups == [(["n1"], 0), (["n2"], 2), (["n3", "n4"], 3)]
    assert start_watch.global_task("n2", 0, groups) == 2
    assert start_watch.global_task("n4", 1, groups) == 4
    assert start_watch.global_task("n9", 0, groups) is None
    assert start_watch.het_groups([2, 1, 2], {}, expand) == [] and start_watch.global_task("n2", 3, []) == 3


def test_a_groups_srun_in_the_jobs_layout_numbers_its_own_tasks_and_the_watch_names_the_worker(tmp_path):
    """With slurm.layout: jobs each group's job has its own srun, whose task numbers start at 0 in that group."""
    exp = config.loads("name: g\nenv: {id: CartPole-v1}\nworkers:\n  actor: {count: 3}\nstop: {wall_time: 5}\n")
    graph = wiring.build(exp)
    names, groups = srun_guard.watched_tasks(graph, "actor", {"SLURM_JOB_NODELIST": "n3"})
    assert names == ["actor/0", "actor/1", "actor/2"] and groups == []
    run, output = RunDir(tmp_path), tmp_path / "slurm-8.out"
    output.write_text("srun: error: n3: task 1: Killed\n")
    looks = iter([True, False])
    assert start_watch.watch(run, names, output, lambda: next(looks), interval=0.01, groups=groups) == "actor/1"
    assert (run.barrier_arrivals / "actor-1.failed").read_text() == "actor/1"  # for the run's leader to pass on
