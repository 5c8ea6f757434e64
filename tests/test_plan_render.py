"""Plan and render are pure: golden script, group layout, and errors that name the group and resource."""
import os
from pathlib import Path

import pytest

from launcher import plan, render
from srl_hpc import config

GOLDEN = Path(__file__).parent / "golden" / "cartpole_hetjob.sbatch"
EXPERIMENT = """\
name: golden
workers:
  actor: {count: 5, ring_size: 4, inference_splits: 2}
  policy: {count: 2, device: cuda}
  trainer: {device: cuda}
stop: {target_return: 475}
slurm:
  time: "02:00:00"
  account: rl-lab
  trainer: {partition: gpu, cpus_per_task: 4, mem_per_task: 8G}
  policy: {partition: gpu, cpus_per_task: 2, mem_per_task: 4G, tasks_per_node: 2, constraint: a100}
  actor: {partition: cpu, mem_per_task: 512M, tasks_per_node: 3}
  sbatch_options: ["--exclusive"]
  setup: ["module load openmpi", "source /opt/venv/bin/activate"]
  env: {OMP_NUM_THREADS: 1}
  requeue: {signal_seconds: 90, max_requeues: 2}
"""
SINFO = "\n".join([
    "g1|gpu|32|256000|gpu:a100:4(S:0-1)", "g2|gpu|32|256000|gpu:a100:4(S:0-1)",
    "c1|cpu*|64|128000|(null)", "c2|cpu*|64|128000|(null)", "c3|cpu*|64|128000|(null)",
])


def make(text=EXPERIMENT):
    return plan.make_plan(config.loads(text), "/scratch/runs/golden", "/opt/venv/bin/python")


def test_groups_are_contiguous_ranges_of_the_worker_list():
    p = make()
    assert [g.name for g in p.groups] == ["trainer", "policy", "actor"]
    assert p.groups[0].workers == ("controller/0", "trainer/0")
    assert p.groups[1].workers == ("policy/0", "policy/1")
    assert p.groups[2].workers == tuple(f"actor/{i}" for i in range(5))
    assert p.ntasks == 2 + 2 + 5


def test_resources_per_group():
    trainer, policy, actor = make().groups
    assert (trainer.nodes, trainer.gpus_per_node, trainer.mem_mb) == (1, 1, 2 * 8192)
    assert (policy.nodes, policy.gpus_per_node, policy.mem_mb, policy.constraint) == (1, 2, 2 * 4096, "a100")
    assert (actor.nodes, actor.gpus_per_node, actor.mem_mb) == (2, 0, 3 * 512)


def test_cpu_devices_ask_for_no_gpus():
    text = EXPERIMENT.replace("device: cuda", "device: cpu")
    assert all(g.gpus_per_node == 0 for g in make(text).groups)


def test_rendered_script_matches_golden_file():
    text = render.render(make(), "srl-launch golden.yaml --slurm --dry-run", version="0.0.0-test")
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_requeue_renders_the_signal_the_trap_and_the_self_requeue_and_the_script_parses(tmp_path):
    import subprocess

    text = render.render(make(), "cmd")
    assert "#SBATCH --requeue" in text and "#SBATCH --signal=B:USR1@90" in text
    assert "trap on_time_limit USR1" in text and '-lt 2 ]; then' in text and 'scontrol requeue "$SLURM_JOB_ID"' in text
    assert "-m srl_hpc.rundir /scratch/runs/golden --next-attempt" in text
    # a run that ended by itself as the signal came is not requeued: its outcome is the job's
    assert "-m srl_hpc.rundir /scratch/runs/golden --outcome)" in text and "    succeeded) exit 0 ;;" in text
    (tmp_path / "job.sbatch").write_text(text)
    assert subprocess.run(["bash", "-n", str(tmp_path / "job.sbatch")]).returncode == 0
    plain = render.render(make(EXPERIMENT.replace("  requeue: {signal_seconds: 90, max_requeues: 2}\n", "")), "cmd")
    assert "#SBATCH --requeue" not in plain and "trap on_time_limit" not in plain
    assert "--next-attempt" in plain  # a job requeued by hand or by preemption resumes too


def test_rendered_script_structure():
    text = render.render(make(), "cmd")
    assert text.splitlines().count("#SBATCH hetjob") == 2
    assert "srun --mpi=pmix --het-group=0,1,2" in text
    assert "-m srl_hpc.worker --run-dir /scratch/runs/golden --rendezvous mpi" in text
    assert text.count("#SBATCH --exclusive") == 3
    assert "export OMP_NUM_THREADS=1" in text and "module load openmpi" in text


def test_plan_fits_a_cluster_that_has_room():
    plan.check_fits(make(), plan.parse_sinfo(SINFO))


def test_parse_sinfo():
    facts = plan.parse_sinfo(SINFO)
    assert facts.default_partition == "cpu"
    assert [n.gpus for n in facts.partition_nodes("gpu")] == [4, 4]
    assert [n.name for n in facts.partition_nodes(None)] == ["c1", "c2", "c3"]


def test_too_many_gpus_names_group_and_resource():
    text = EXPERIMENT.replace("tasks_per_node: 2, constraint", "tasks_per_node: 8, constraint").replace(
        "policy: {count: 2, device: cuda}", "policy: {count: 5, device: cuda}")
    with pytest.raises(plan.PlanError) as info:
        plan.check_fits(make(text), plan.parse_sinfo(SINFO))
    assert any("'policy'" in p and "5 GPUs per node" in p and "has 4" in p for p in info.value.problems)


def test_too_much_memory_and_cpus():
    text = EXPERIMENT.replace("cpus_per_task: 4, mem_per_task: 8G", "cpus_per_task: 64, mem_per_task: 300G")
    with pytest.raises(plan.PlanError) as info:
        plan.check_fits(make(text), plan.parse_sinfo(SINFO))
    msgs = " ".join(info.value.problems)
    assert "'trainer'" in msgs and "CPUs per node" in msgs and "MB of memory per node" in msgs


def test_unknown_partition():
    text = EXPERIMENT.replace("actor: {partition: cpu", "actor: {partition: bigmem")
    with pytest.raises(plan.PlanError, match="'actor'.*'bigmem' does not exist"):
        plan.check_fits(make(text), plan.parse_sinfo(SINFO))


def test_not_enough_nodes():
    text = EXPERIMENT.replace("tasks_per_node: 3}", "tasks_per_node: 1}")  # 5 actor nodes, 3 exist
    with pytest.raises(plan.PlanError, match="'actor'.*needs 5 nodes"):
        plan.check_fits(make(text), plan.parse_sinfo(SINFO))


def test_slurm_section_errors_have_lines():
    with pytest.raises(config.ConfigError) as info:
        config.loads("name: x\nstop: {wall_time: 5}\nslurm:\n  time: soon\n  actor: {mem_per_task: lots}\n")
    found = {(p, line) for p, line, _ in info.value.problems}
    assert ("slurm.time", 4) in found and ("slurm.actor.mem_per_task", 5) in found


def test_no_policy_group_when_inference_runs_elsewhere():
    text = EXPERIMENT.replace("policy: {count: 2, device: cuda}", "policy: {count: 0, device: cuda}").replace(
        "workers:\n", "workers:\n  placement: seed\n")
    p = make(text)
    assert [g.name for g in p.groups] == ["trainer", "actor"]
    assert "--het-group=0,1 " in render.render(p, "cmd")


def test_a_non_editable_install_renders_from_its_package_data(tmp_path):
    """pip install . (not -e): the sbatch template ships inside the launcher package."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", str(root), "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "wheel")],
                   check=True, capture_output=True, cwd=tmp_path)
    wheel = next((tmp_path / "wheel").glob("*.whl"))
    subprocess.run([*pip, "install", "--no-deps", "--target", str(tmp_path / "site"), str(wheel)], check=True,
                   capture_output=True)
    exp = tmp_path / "exp.yaml"
    exp.write_text("stop: {wall_time: 5}\n")  # (fits any cluster it may be checked against)
    proc = subprocess.run([sys.executable, "-c", "import sys, launcher.cli, launcher.render as r; print(r.TEMPLATES); "
                           "sys.exit(launcher.cli.main(sys.argv[1:]))", str(exp), "--slurm", "--dry-run", "--run-dir",
                           str(tmp_path / "run")], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(tmp_path / "site")})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(str(tmp_path / "site" / "launcher" / "job_templates"))
    assert "\n#SBATCH hetjob\n" in proc.stdout and "srun --mpi=pmix" in proc.stdout


def test_rundir_outcome_is_the_attempts_status_or_nothing(tmp_path, capsys):
    from srl_hpc import rundir

    rundir.main([str(tmp_path), "--outcome"])
    assert capsys.readouterr().out == "\n"  # no summary: the controller never concluded
    (tmp_path / "summary.json").write_text('{"status": "succeeded", "reason": "wall time reached: 100s"}')
    rundir.main([str(tmp_path), "--outcome"])
    assert capsys.readouterr().out == "succeeded\n"
    rundir.main([str(tmp_path), "--next-attempt"])  # the summary becomes attempt 1's
    rundir.main([str(tmp_path), "--outcome"])
    assert capsys.readouterr().out.splitlines()[-1] == ""
