"""Plan and render are pure: golden script, group layout, and errors that name the group and resource."""

import os
import subprocess
import sys
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
SINFO = "\n".join(
    [
        "g1|gpu|32|256000|gpu:a100:4(S:0-1)",
        "g2|gpu|32|256000|gpu:a100:4(S:0-1)",
        "c1|cpu*|64|128000|(null)",
        "c2|cpu*|64|128000|(null)",
        "c3|cpu*|64|128000|(null)",
    ]
)


def make(text=EXPERIMENT):
    return plan.make_plan(config.loads(text), "/scratch/runs/golden", "/opt/venv/bin/python")


def test_groups_are_contiguous_ranges_of_the_worker_list():
    p = make()
    assert [g.name for g in p.groups] == ["trainer", "policy", "actor"]
    assert p.groups[0].workers == ("controller/0", "trainer/0")
    assert p.groups[1].workers == ("policy/0", "policy/1")
    assert p.groups[2].workers == tuple(f"actor/{i}" for i in range(5))
    assert p.ntasks == 2 + 2 + 5


def test_each_het_group_asks_for_its_nodes_gpus_and_memory_the_controller_riding_with_the_trainer():
    trainer, policy, actor = make().groups
    assert (trainer.nodes, trainer.gpus_per_node, trainer.mem_mb) == (1, 1, 8192 + 1024)  # + slurm.controller_mem
    assert (trainer.rider, trainer.allocated_tasks, trainer.ntasks) == ("controller/0", 1, 2)
    assert (policy.nodes, policy.gpus_per_node, policy.mem_mb, policy.constraint) == (1, 2, 2 * 4096, "a100")
    assert (actor.nodes, actor.gpus_per_node, actor.mem_mb) == (2, 0, 3 * 512)


def test_a_slurm_run_without_curve_is_refused_in_one_problem_that_says_why():
    with pytest.raises(plan.PlanError) as info:
        make(EXPERIMENT + "curve: false\n")
    (problem,) = info.value.problems
    assert problem.startswith("curve: false is for measuring its cost") and "sockets private" in problem


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
    assert "trap on_time_limit USR1" in text and "-lt 2 ]; then" in text and 'scontrol requeue "$SLURM_JOB_ID"' in text
    assert "-m srl_hpc.rundir /scratch/runs/golden --next-attempt" in text
    # a run that ended by itself as the signal came is not requeued: its outcome is the job's
    assert "-m srl_hpc.rundir /scratch/runs/golden --outcome)" in text and "    succeeded) exit 0 ;;" in text
    (tmp_path / "job.sbatch").write_text(text)
    assert subprocess.run(["bash", "-n", str(tmp_path / "job.sbatch")], timeout=60).returncode == 0
    plain = render.render(make(EXPERIMENT.replace("  requeue: {signal_seconds: 90, max_requeues: 2}\n", "")), "cmd")
    assert "#SBATCH --requeue" not in plain and "trap on_time_limit" not in plain
    assert "--next-attempt" in plain  # a job requeued by hand or by preemption resumes too


def test_the_script_has_one_het_component_per_group_and_one_srun_line_for_all():
    text = render.render(make(), "cmd")
    assert text.splitlines().count("#SBATCH hetjob") == 2
    assert "srun --het-group=0 --mpi=pmix --cpus-per-task=4 --ntasks=2 --overcommit --mem=9216M" in text
    assert "\n    : --het-group=2 --mpi=pmix --cpus-per-task=1 --mem=1536M \\\n" in text  # 5 tasks: 3 + 2
    assert "-m srl_hpc.worker --run-dir /scratch/runs/golden --slurm --rendezvous mpi" in text
    assert text.count("#SBATCH --exclusive") == 3
    assert "export OMP_NUM_THREADS=1" in text and "module load openmpi" in text


def test_plan_fits_a_cluster_that_has_room():
    plan.check_fits(make(), plan.parse_sinfo(SINFO))


def test_sinfo_is_read_into_partitions_and_their_nodes_gpus():
    facts = plan.parse_sinfo(SINFO)
    assert facts.default_partition == "cpu"
    assert [n.gpus for n in facts.partition_nodes("gpu")] == [4, 4]
    assert [n.name for n in facts.partition_nodes(None)] == ["c1", "c2", "c3"]


def test_too_many_gpus_names_group_and_resource():
    text = EXPERIMENT.replace("tasks_per_node: 2, constraint", "tasks_per_node: 8, constraint").replace(
        "policy: {count: 2, device: cuda}", "policy: {count: 5, device: cuda}"
    )
    with pytest.raises(plan.PlanError) as info:
        plan.check_fits(make(text), plan.parse_sinfo(SINFO))
    assert any("'policy'" in p and "5 GPUs per node" in p and "has 4" in p for p in info.value.problems)


def test_a_group_asking_more_cpus_or_memory_than_a_node_has_is_refused():
    text = EXPERIMENT.replace("cpus_per_task: 4, mem_per_task: 8G", "cpus_per_task: 64, mem_per_task: 300G")
    with pytest.raises(plan.PlanError) as info:
        plan.check_fits(make(text), plan.parse_sinfo(SINFO))
    msgs = " ".join(info.value.problems)
    assert "'trainer'" in msgs and "CPUs per node" in msgs and "MB of memory per node" in msgs


def test_a_partition_the_cluster_lacks_is_refused_naming_the_group():
    text = EXPERIMENT.replace("actor: {partition: cpu", "actor: {partition: bigmem")
    with pytest.raises(plan.PlanError, match="'actor'.*'bigmem' does not exist"):
        plan.check_fits(make(text), plan.parse_sinfo(SINFO))


def test_a_group_needing_more_nodes_than_its_partition_has_is_refused():
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
        "workers:\n", "workers:\n  placement: seed\n"
    )
    p = make(text)
    assert [g.name for g in p.groups] == ["trainer", "actor"]
    assert "--het-group=1 " in render.render(p, "cmd") and "--het-group=2" not in render.render(p, "cmd")


# ----------------------------------------------------------------------------------------------- GPU layouts

TRAINERS = """\
name: gpus
workers:
  trainer: {{count: {count}, device: cuda}}
stop: {{wall_time: 5}}
slurm:
  trainer: {{partition: gpu, tasks_per_node: {per_node}{more}}}
"""
TWO_GPU_NODES = "g1|gpu|32|256000|gpu:2\ng2|gpu|32|256000|gpu:2\nc1|cpu*|32|64000|(null)\nc2|cpu*|32|64000|(null)"


def trainers(count, per_node, more=""):
    return make(TRAINERS.format(count=count, per_node=per_node, more=more))


def test_four_trainers_two_per_node_are_three_plus_two_tasks_each_node_two_gpus():
    group = trainers(4, 2).groups[0]
    assert group.layout == [("controller/0", "trainer/0", "trainer/1"), ("trainer/2", "trainer/3")]
    assert (group.nodes, group.gpus_per_node) == (2, 2)
    plan.check_fits(trainers(4, 2), plan.parse_sinfo(TWO_GPU_NODES))


def test_trainers_that_would_share_a_gpu_are_refused_unless_declared():
    with pytest.raises(plan.PlanError) as info:  # five trainers over two nodes, 3 + 2, the controller on the first
        trainers(5, 4, ", gpus_per_node: 2")
    message = " ".join(info.value.problems)
    assert "node 1 of 2 would hold 3 CUDA workers (trainer/0, trainer/1, trainer/2) on 2 GPU(s)" in message
    assert "slurm.trainer.share_gpu" in message and "tasks_per_node to at most 2" in message
    shared = trainers(5, 4, ", gpus_per_node: 2, share_gpu: true").groups[0]
    assert [len(node) for node in shared.layout] == [4, 2] and shared.gpus_per_node == 2


def test_without_gpus_per_node_the_plan_asks_for_what_the_fullest_node_needs_and_the_cluster_check_says_if_none_can():
    group = trainers(5, 4).groups[0]  # controller + 5 trainers over 2 nodes: 3 CUDA workers on the second
    assert group.gpus_per_node == 3
    with pytest.raises(plan.PlanError, match="'trainer'.*3 GPUs per node.*has 2"):
        plan.check_fits(trainers(5, 4), plan.parse_sinfo(TWO_GPU_NODES))


def test_layout_gives_every_node_a_task_and_fills_in_order():
    group = trainers(4, 1).groups[0]  # one trainer per node, the controller rides along on the first
    assert [len(node) for node in group.layout] == [2, 1, 1, 1]
    first_line = render.srun_lines(trainers(4, 1)).split("\n")[0]
    assert group.tasks_per_node == 1 and "--ntasks=5 --overcommit" in first_line
    assert "--ntasks-per-node" not in first_line  # srun would ignore it and warn


def test_the_controller_takes_no_cpus_of_the_trainer_group_only_its_memory():
    four = trainers(4, 4, ", cpus_per_task: 8, mem_per_task: 16G, gpus_per_node: 4")  # a 32-CPU node, 4 GPUs
    group = four.groups[0]
    assert (group.nodes, group.allocated_tasks, group.tasks_per_node) == (1, 4, 4)
    assert group.mem_mb == 4 * 16384 + 1024 and group.gpus_per_node == 4
    nodes = "g1|gpu|32|80000|gpu:4\n" + "\n".join(f"c{k}|cpu*|32|80000|(null)" for k in range(3))
    plan.check_fits(four, plan.parse_sinfo(nodes))  # fits: no error
    script = render.render(four, "cmd")
    assert "#SBATCH --nodes=1\n#SBATCH --ntasks=4\n#SBATCH --cpus-per-task=8\n" in script
    assert "--het-group=0 --mpi=pmix --cpus-per-task=8 --ntasks=5 --overcommit --mem=66560M" in script
    bigger = make(TRAINERS.format(count=4, per_node=4, more="") + "  controller_mem: 4G\n").groups[0]
    assert bigger.mem_mb == 4 * 1024 + 4096


def test_a_workers_gpu_is_its_index_among_the_cuda_workers_before_it_on_its_node():
    from srl_hpc import graph as wiring

    exp = config.loads(TRAINERS.format(count=4, per_node=2, more=""))
    g = wiring.build(exp)
    # node 1: controller (local id 0), trainer/0 (1), trainer/1 (2); node 2: trainer/2 (0), trainer/3 (1)
    assert [g.gpu_index(f"trainer/{i}", local) for i, local in enumerate((1, 2, 0, 1))] == [0, 1, 0, 1]
    assert [g.gpu_index(f"trainer/{i}", None) for i in range(4)] == [0, 1, 2, 3]  # local mode: one node


# ----------------------------------------------------------------------------------------------- the cluster's ways


def custom(slurm_lines: str):
    return make(EXPERIMENT.replace("slurm:\n", "slurm:\n" + slurm_lines))


def test_group_options_account_and_qos_land_on_their_group_only():
    p = make(
        EXPERIMENT.replace(
            "trainer: {partition: gpu, cpus_per_task: 4, mem_per_task: 8G}",
            "trainer: {partition: gpu, cpus_per_task: 4, mem_per_task: 8G, account: gpu-alloc, "
            "qos: high, sbatch_options: [--gpus-per-task=1]}",
        )
    )
    text = render.render(p, "cmd")
    groups = text.split("\n#SBATCH hetjob\n")
    assert "--gpus-per-task=1" in groups[0] and "--gpus-per-task=1" not in groups[1] + groups[2]
    assert "#SBATCH --account=gpu-alloc" in groups[0] and "#SBATCH --qos=high" in groups[0]
    assert "#SBATCH --account=rl-lab" in groups[1] and "--qos" not in groups[1]


def test_srun_options_mpi_plugin_and_python_command_words():
    p = custom('  srun_options: ["--cpu-bind=cores"]\n  mpi: pmi2\n  python: "/opt/env/bin/python -X faulthandler"\n')
    lines = render.srun_lines(p)
    assert lines.count("--mpi=pmi2 ") == 3 and lines.count("--cpu-bind=cores") == 3
    assert "/opt/env/bin/python -X faulthandler -m srl_hpc.worker" in lines
    none = render.srun_lines(custom("  mpi: none\n"))
    assert "--mpi=none" in none and "--rendezvous file" in none and "--rendezvous mpi" not in none


def test_apptainer_prefix_with_nv_only_where_the_group_has_gpus_and_the_run_directory_bound():
    p = custom("  container: {image: /images/srl.sif, binds: [/datasets]}\n")
    lines = render.srun_lines(p).split("\n    : ")
    prefix = "apptainer exec --nv --bind /datasets,/scratch/runs/golden /images/srl.sif /opt/venv/bin/python -m"
    assert prefix in lines[0] and prefix in lines[1]  # trainer, policy: GPUs
    assert "apptainer exec --bind /datasets,/scratch/runs/golden /images/srl.sif /opt/venv/bin/python -m" in lines[2]
    text = render.render(p, "cmd")
    assert (
        "apptainer exec --nv --bind /datasets,/scratch/runs/golden /images/srl.sif "
        "/opt/venv/bin/python -m srl_hpc.srun_guard"
    ) in text


PYXIS_GOLDEN = Path(__file__).parent / "golden" / "pyxis_srun_lines.txt"


def test_pyxis_renders_container_options_on_every_srun_line_golden():
    p = custom(
        "  container: {runtime: pyxis, image: 'nvcr.io#nvidia/pytorch:24.05-py3', binds: [/datasets]}\n"
        "  node_setup: ['module load cuda', 'export NCCL_DEBUG=WARN']\n"
    )
    text = render.srun_lines(p)
    if os.environ.get("UPDATE_GOLDEN"):
        PYXIS_GOLDEN.write_text(text + "\n")
    assert text + "\n" == PYXIS_GOLDEN.read_text()
    assert text.count("--container-image=nvcr.io#nvidia/pytorch:24.05-py3") == 3


def test_node_setup_runs_before_each_worker_and_keeps_its_arguments(tmp_path):
    import subprocess

    p = custom("  node_setup: ['export SETUP_RAN=yes', 'cd /']\n")
    command = render.worker_command(p, p.groups[0])
    assert command[:2] == ["bash", "-c"]
    fake = [*command[:4], "sh", "-c", 'echo "$SETUP_RAN $(pwd) $1"', "x", "an argument with spaces"]
    assert subprocess.run(fake, capture_output=True, text=True, timeout=60).stdout == "yes / an argument with spaces\n"


def test_a_template_of_ones_own_gets_the_documented_variables(tmp_path):
    template = tmp_path / "mine.sbatch"
    template.write_text("#!/bin/bash\n${sbatch_lines}\n# mine\n${srun_lines}\n")
    text = render.render(custom(f"  template: {template}\n"), "cmd")
    assert text.startswith("#!/bin/bash\n# group trainer") and "# mine\nsrun --het-group=0" in text


def test_rendered_scripts_leave_no_template_variable_and_parse(tmp_path):
    import subprocess

    for extra in ("", "  container: {image: /i.sif}\n  node_setup: ['module load x']\n  mpi: none\n"):
        text = render.render(custom(extra), "cmd")
        assert "${" not in text
        script = tmp_path / "job.sbatch"
        script.write_text(text)
        assert subprocess.run(["bash", "-n", str(script)], timeout=60).returncode == 0


@pytest.mark.slow
def test_a_non_editable_install_renders_from_its_package_data(tmp_path):
    """pip install . (not -e): the sbatch template ships inside the launcher package."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", str(root), "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "wheel")],
        check=True,
        capture_output=True,
        cwd=tmp_path,
        timeout=300,
    )
    wheel = next((tmp_path / "wheel").glob("*.whl"))
    subprocess.run(
        [*pip, "install", "--no-deps", "--target", str(tmp_path / "site"), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    exp = tmp_path / "exp.yaml"
    exp.write_text("stop: {wall_time: 5}\n")  # (fits any cluster it may be checked against)
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, launcher.cli, launcher.render as r; print(r.TEMPLATES); "
            "sys.exit(launcher.cli.main(sys.argv[1:]))",
            str(exp),
            "--slurm",
            "--dry-run",
            "--run-dir",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(str(tmp_path / "site" / "job_templates"))
    assert "\n#SBATCH hetjob\n" in proc.stdout and "srun --het-group=0 --mpi=pmix" in proc.stdout


def test_rundir_outcome_is_the_attempts_status_or_nothing(tmp_path):
    def rundir(action: str) -> str:  # as the job script asks it
        return subprocess.run(
            [sys.executable, "-m", "srl_hpc.rundir", str(tmp_path), action],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout

    assert rundir("--outcome") == "\n"  # no summary: the controller never concluded
    (tmp_path / "summary.json").write_text('{"status": "succeeded", "reason": "wall time reached: 100s"}')
    assert rundir("--outcome") == "succeeded\n"
    assert rundir("--next-attempt") == f"{tmp_path}: attempt 2\n"  # the summary becomes attempt 1's
    assert rundir("--outcome") == "\n"


def test_a_cuda_worker_past_its_nodes_gpus_is_an_error_unless_sharing_is_allowed(monkeypatch):
    import torch

    from srl_hpc.models.devices import resolve_device

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)  # a node that shows two GPUs
    assert resolve_device("cuda", 1, may_share=False, worker="trainer/1") == torch.device("cuda", 1)
    assert resolve_device("cuda", 3, may_share=True, worker="trainer/1") == torch.device("cuda", 1)  # round-robin
    assert resolve_device("cuda:0", 5, may_share=False, worker="trainer/1") == torch.device("cuda", 0)  # pinned
    with pytest.raises(RuntimeError, match="CUDA worker 2 of its node, which shows 2 GPU"):
        resolve_device("cuda", 2, may_share=False, worker="trainer/1")


def test_an_overcommitted_group_asks_for_no_tasks_per_node_and_fits_nodes_with_fewer_cpus_than_tasks():
    p = make(
        EXPERIMENT.replace(
            "actor: {partition: cpu, mem_per_task: 512M, tasks_per_node: 3}",
            "actor: {partition: cpu, mem_per_task: 512M, tasks_per_node: 64, sbatch_options: [--overcommit]}",
        ).replace("actor: {count: 5", "actor: {count: 64")
    )
    actor = p.groups[-1]
    assert actor.overcommit and actor.ntasks == 64 and actor.nodes == 1
    text = render.render(p, "cmd").split("\nset -eo")[0].split("\n#SBATCH hetjob\n")[-1]  # the group's lines
    assert "#SBATCH --overcommit" in text and "--ntasks-per-node" not in text  # Slurm refuses more than CPUs
    assert "--ntasks-per-node" not in render.srun_lines(p).split("\n    : ")[-1]
    plan.check_fits(p, plan.parse_sinfo(SINFO.replace("|cpu*|64|", "|cpu*|2|")))  # 2-CPU actor nodes


def test_threads_per_core_lands_on_every_groups_sbatch_lines_and_its_srun_line():
    text = render.render(custom("  threads_per_core: 1\n"), "cmd")
    groups = text.split("\n#SBATCH hetjob\n")
    assert len(groups) == 3 and all(g.count("\n#SBATCH --threads-per-core=1\n") == 1 for g in groups)
    lines = render.srun_lines(custom("  threads_per_core: 1\n")).split("\n    : ")
    assert len(lines) == 3 and all("--cpus-per-task=" in line and " --threads-per-core=1 " in line for line in lines)
    assert "threads-per-core" not in render.render(make(), "cmd")  # unset: the cluster's own


def test_with_pyxis_the_batch_scripts_own_steps_run_on_the_host_with_the_launchers_python():
    p = custom("  container: {runtime: pyxis, image: 'nvcr.io#nvidia/pytorch:24.05-py3'}\n  python: /usr/bin/python3\n")
    text = render.render(p, "cmd")
    steps = [line for line in text.splitlines() if "-m srl_hpc.rundir" in line or "-m srl_hpc.srun_guard" in line]
    assert len(steps) == 4  # --next-attempt, the guard, --outcome after the guard, --outcome before requeueing
    assert all("/opt/venv/bin/python -m srl_hpc." in line and "/usr/bin/python3" not in line for line in steps)
    assert render.srun_lines(p).count("/usr/bin/python3 -m srl_hpc.worker") == 3  # the workers: the image's
