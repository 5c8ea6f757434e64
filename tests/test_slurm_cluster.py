"""What a real cluster differs in, on the project's local Slurm whose nodes are hosts of their own (network,
hostname, /tmp and /dev/shm; scripts/local_slurm.sh): the interface workers use, CPU binding, data-parallel
trainers across hosts, MPI or none, containers, and a script sbatch'ed by hand."""

import json
import os
import signal
import stat
import subprocess

import pytest

from conftest import (
    ROOT,
    assert_every_frame_accounted_for,
    experiment,
    het_nodes,
    no_process_left,
    script,
    srl,
    srl_started,
    wait_until,
)
from srl_hpc import srun_guard
from srl_hpc.trace.reader import read_run

pytestmark = pytest.mark.slurm


def summary_of(run_dir):
    return json.loads((run_dir / "summary.json").read_text())


def startup(run_dir) -> dict[str, dict]:
    """Each worker's startup row: the CPUs it may run on, its torch threads, MPI's share of its start."""
    return {w.name: {k: v[0] for k, v in w.table("startup").items()} for w in read_run(run_dir).workers}


def test_a_hostname_that_resolves_to_loopback_is_refused_at_start_naming_slurm_network(tmp_path):
    run_dir = tmp_path / "run"
    proc = srl(experiment(tmp_path), "--slurm", "--follow", "--run-dir", run_dir, "--set", "slurm.network=null")
    assert proc.returncode == 1
    out = srl("status", run_dir).stdout
    assert "would advertise 127.0.1.1" in out and "Set slurm.network to the interface" in out, out
    assert "ib0 10.250.1." in out  # the node's interfaces, to choose from
    assert not (run_dir / "workers.json").exists()  # nobody got as far as the rendezvous
    no_process_left(run_dir)


def test_two_trainers_on_two_hosts_train_in_lockstep_over_the_configured_interface(tmp_path):
    run_dir = tmp_path / "run"
    proc = srl(
        experiment(tmp_path, wall_time=10),
        "--slurm",
        "--follow",
        "--run-dir",
        run_dir,
        "--set",
        "workers.trainer.count=2",
        "--set",
        "slurm.trainer.tasks_per_node=1",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    table = json.loads((run_dir / "workers.json").read_text())
    assert table["trainer/0"]["node"] != table["trainer/1"]["node"]
    summary = summary_of(run_dir)
    assert summary["status"] == "succeeded" and summary["policy_version"] > 1
    trace = {w.name: w for w in read_run(run_dir).workers}
    steps = [trace[t].table("train_step")["version"].tolist() for t in ("trainer/0", "trainer/1")]
    checksums = [trace[t].table("final_parameters")["checksum"][0] for t in ("trainer/0", "trainer/1")]
    assert steps[0] == steps[1] == list(range(1, summary["policy_version"] + 1))
    assert checksums[0] == checksums[1]  # gloo's allreduce crossed the hosts (over ib0: GLOO_SOCKET_IFNAME)


def test_a_killed_actor_is_replaced_in_its_task_and_actors_on_a_host_cut_off_are_gone_without(tmp_path):
    """actor/0 is SIGKILLed: its supervisor, inside its Slurm task, replaces it. Then the fast network (ib0) of the
    host of actor/2 and actor/3 goes down: Slurm still reaches the host, the run does not. The controller goes on
    without the two once they have been silent for monitor.heartbeat_timeout (2 of 4 actors left:
    workers.actor.min_alive 0.5), and the job reaches its target."""
    run_dir = tmp_path / "run"
    proc, output = srl_started(
        ROOT / "experiments" / "cartpole_ppo.yaml",
        "--slurm",
        "--follow",
        "--run-dir",
        run_dir,
        *("--set", "workers.actor.count=4", "--set", "monitor.heartbeat_timeout=12"),
        *("--set", "stop.target_return=300", "--set", "stop.wall_time=200"),
    )
    host = None
    try:
        output.line_with("| sample", 180)
        table = json.loads((run_dir / "workers.json").read_text())
        os.kill(table["actor/0"]["pid"], signal.SIGKILL)  # the worker, not its task (the nodes are this machine)
        output.line_with("actor/0 is back (replacement 1)", 60)
        host = table["actor/2"]["node"]
        assert table["actor/3"]["node"] == host and host not in {table["actor/0"]["node"], table["actor/1"]["node"]}
        subprocess.run(["bash", str(ROOT / "scripts" / "local_slurm.sh"), "cut", host], check=True, timeout=30)
        output.line_with("lost: no heartbeat for 12s and not replaced", 60)
        out = output.finish(240)
    finally:
        if host is not None:
            subprocess.run(["bash", str(ROOT / "scripts" / "local_slurm.sh"), "mend", host], check=True, timeout=30)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert "the run goes on with 2 of 4 actors" in out and "ended: completed" in out, out
    summary = summary_of(run_dir)
    assert summary["reason"].startswith("target reached") and summary["failed_workers"] == {}, summary
    assert sorted(summary["lost_workers"]) == ["actor/2", "actor/3"], summary
    assert [r["error"] for r in summary["restarts"]["actor/0"]] == ["was killed by SIGKILL"], summary
    assert (run_dir / "traces" / "actor-0.restart-1.h5").exists()
    # what the killed and the lost sent after their last report is counted where it arrived: the sums meet
    assert_every_frame_accounted_for(summary)
    assert summary["frames_sent_counted_at_receivers"] > 0, summary
    no_process_left(run_dir)


def test_the_impala_placement_runs_inference_inside_actors_on_their_own_hosts(tmp_path):
    run_dir = tmp_path / "run"
    proc = srl(
        experiment(tmp_path, wall_time=10),
        "--slurm",
        "--follow",
        "--run-dir",
        run_dir,
        "--set",
        "workers.placement=impala",
        "--set",
        "workers.policy.count=0",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "# group policy" not in (run_dir / "job.sbatch").read_text()
    table = json.loads((run_dir / "workers.json").read_text())
    assert sorted(table) == ["actor/0", "actor/1", "controller/0", "trainer/0"]
    assert table["actor/0"]["node"] != table["trainer/0"]["node"]
    summary = summary_of(run_dir)
    assert summary["status"] == "succeeded" and summary["policy_version"] > 1 and summary["episodes"] > 0


def test_slurm_mpi_none_runs_without_mpi_and_each_worker_is_bound_to_the_cpus_its_group_asked_for(tmp_path):
    """No MPI: the rendezvous goes through files. task/affinity: a task gets the CPUs of its -c; the policy
    worker and the trainer ask for both of their node's CPUs and two torch threads, the others for one CPU each.
    The controller rides along on the trainer's node without CPUs of its own (srun --overcommit): the group fits
    a node of two CPUs."""
    run_dir = tmp_path / "run"
    proc = srl(
        experiment(tmp_path),
        "--slurm",
        "--follow",
        "--run-dir",
        run_dir,
        "--set",
        "slurm.mpi=none",
        "--set",
        "slurm.policy.cpus_per_task=2",
        "--set",
        "workers.policy.torch_threads=2",
        "--set",
        "slurm.trainer.cpus_per_task=2",
        "--set",
        "workers.trainer.torch_threads=2",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "--mpi=none" in (run_dir / "job.sbatch").read_text()
    assert summary_of(run_dir)["status"] == "succeeded"
    rows = startup(run_dir)
    assert len(rows) == 5 and not any("mpi_init_seconds" in row for row in rows.values())  # MPI never started
    assert len(json.loads((run_dir / "rendezvous" / "table.json").read_text())) == 5  # one file every worker read
    assert rows["policy/0"]["cpus_allowed"] == 2 and rows["policy/0"]["torch_threads"] == 2
    assert rows["trainer/0"]["cpus_allowed"] == 2 and rows["trainer/0"]["torch_threads"] == 2
    assert rows["actor/0"]["cpus_allowed"] == rows["actor/1"]["cpus_allowed"] == 1
    table = json.loads((run_dir / "workers.json").read_text())
    assert table["controller/0"]["node"] == table["trainer/0"]["node"]


def test_pmi2_is_checked_against_the_plugins_srun_has():
    """Debian's Slurm has pmi2 (its Open MPI cannot use it: `srun --mpi=pmi2` fails at MPI_Init there), so the
    check passes for pmi2 and names what exists for a plugin srun does not have."""
    from launcher import slurm

    plugins = slurm.mpi_plugins()
    assert "pmix" in plugins and "pmi2" in plugins
    slurm.check_mpi_plugin("pmi2")
    with pytest.raises(slurm.SlurmError, match="srun has no MPI plugin 'pmi1' here \\(it has: pmix, .*pmi2"):
        slurm.check_mpi_plugin("pmi1")


STAND_IN = """\
#!/bin/bash
# stands in for apptainer: logs its arguments, then runs what follows the image
echo "$@" >> {log}
shift  # exec
while [ $# -gt 0 ]; do
    case "$1" in
        --nv) shift ;;
        --bind) shift 2 ;;
        -*) shift ;;
        *) shift; break ;;  # the image
    esac
done
exec "$@"
"""


def test_workers_start_through_the_container_runtime_and_the_job_succeeds(tmp_path):
    bin_dir, log = tmp_path / "bin", tmp_path / "apptainer.log"
    bin_dir.mkdir()
    (bin_dir / "apptainer").write_text(STAND_IN.format(log=log))
    (bin_dir / "apptainer").chmod(0o755 | stat.S_IXUSR)
    run_dir = tmp_path / "run"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}  # sbatch passes it on to the job
    proc = srl(
        experiment(tmp_path),
        "--slurm",
        "--follow",
        "--run-dir",
        run_dir,
        "--set",
        "slurm.container={image: /images/srl.sif, binds: [/datasets]}",
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calls = log.read_text().splitlines()
    workers = [c for c in calls if "-m srl_hpc.worker" in c]
    assert len(workers) == 5, calls  # every worker went through it
    assert all(c.startswith(f"exec --bind /datasets,{run_dir} /images/srl.sif ") for c in workers)
    assert any("-m srl_hpc.srun_guard" in c for c in calls)  # and the batch script's own python
    assert summary_of(run_dir)["status"] == "succeeded"


def test_a_prepared_run_directory_sbatched_by_hand_runs_to_its_stop(tmp_path):
    run_dir = tmp_path / "run"
    stop = ["--set", "stop.target_return=null", "--set", "stop.wall_time=8"]  # the run's own stop, not learning
    proc = srl("prepare", ROOT / "experiments" / "cartpole_ppo.yaml", "--run-dir", run_dir, *stop)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"sbatch {run_dir / 'job.sbatch'}"
    text = (run_dir / "job.sbatch").read_text()
    assert "${" not in text and (run_dir / "keys").is_dir() and (run_dir / "experiment.yaml").exists()
    job_id = subprocess.run(
        ["sbatch", "--parsable", str(run_dir / "job.sbatch")], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()
    (run_dir / "slurm.json").write_text(json.dumps({"job_id": job_id}))  # (so that the fixture cancels it if need be)
    wait_until(
        lambda: (run_dir / "summary.json").exists(),
        240,
        "the run's summary",
        lambda: srl("status", run_dir).stdout,
        interval=0.5,
    )
    summary = summary_of(run_dir)
    assert summary["status"] == "succeeded" and summary["reason"].startswith("wall time"), summary
    assert len(set(het_nodes(job_id))) == 3
    no_process_left(run_dir)


def test_the_srl_example_script_runs_when_sbatched_as_it_is(tmp_path):
    (tmp_path / "runs").mkdir()
    env = {
        **os.environ,
        "EXPERIMENT": str(experiment(tmp_path)),
        "PATH": f"{os.path.dirname(script('srl-launch'))}:{os.environ['PATH']}",
    }  # the job takes this PATH
    job_id = subprocess.run(
        ["sbatch", "--parsable", "--chdir", str(tmp_path), str(ROOT / "job_templates" / "examples" / "srl.sbatch")],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env=env,
    ).stdout.strip()
    run_dir = tmp_path / "runs" / f"cartpole-{job_id}"
    wait_until(
        lambda: (run_dir / "summary.json").exists(),
        240,
        "the run's summary",
        lambda: "".join(p.read_text() for p in (tmp_path / "runs").glob("*.out")),
        interval=0.5,
    )
    assert summary_of(run_dir)["status"] == "succeeded"
    # srun ends with its workers, or (Slurm 22.05's het-step hang) the script's srun_guard ends it: its grace
    # (srun_guard.GRACE) and two answers from Slurm after the summary
    wait_until(
        lambda: "outcome: succeeded" in "".join(p.read_text() for p in (tmp_path / "runs").glob("*.out")),
        srun_guard.GRACE + 4 * srun_guard.INTERVAL + 30,
        "the script's own status line",
        interval=0.5,
    )
    no_process_left(run_dir)


def test_every_example_script_parses():
    for example in (ROOT / "job_templates" / "examples").glob("*.sbatch"):
        assert subprocess.run(["bash", "-n", str(example)], timeout=60).returncode == 0, example
