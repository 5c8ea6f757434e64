"""Workers in a container image: what the batch script's own steps run in, and a guard that says where it cannot
work (images without Slurm's commands)."""

import os
import subprocess
import sys

from launcher import plan, render, slurm
from srl_hpc import config

RUN = "/scratch/runs/boxed"
EXPERIMENT = (
    "stop: {wall_time: 60}\nworkers: {trainer: {device: cuda}}\nslurm:\n  python: /usr/bin/python3\n  container: "
)


def boxed(container: str) -> plan.Plan:
    return plan.make_plan(config.loads(EXPERIMENT + container + "\n"), RUN, "/opt/venv/bin/python")


def test_a_continuation_job_moves_the_attempt_on_with_the_batch_scripts_own_python():
    apptainer = boxed("{image: /images/srl.sif}")
    lines = slurm.continuation_lines(apptainer)
    in_image = f"apptainer exec --nv --bind {RUN} /images/srl.sif /usr/bin/python3 -m srl_hpc.rundir {RUN}"
    assert f'case "$({in_image} --outcome)" in' in "\n".join(lines)
    assert f"    {in_image} --next-attempt" in lines
    text = render.render(apptainer, "cmd")
    assert f"    {in_image} --next-attempt" in text  # as the requeued job's line has it
    pyxis = "\n".join(slurm.continuation_lines(boxed("{runtime: pyxis, image: 'nvcr.io#nvidia/pytorch:24.05-py3'}")))
    assert f"/opt/venv/bin/python -m srl_hpc.rundir {RUN} --next-attempt" in pyxis and "/usr/bin/python3" not in pyxis


def test_the_srun_guard_says_once_that_it_cannot_work_without_squeue_and_leaves_the_status_to_srun(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text('{"status": "succeeded"}')  # the run has ended: the guard would be on watch
    srun = subprocess.Popen(["sleep", "60"])  # stands in for a hung srun
    try:
        env = {**os.environ, "PATH": str(tmp_path), "SLURM_JOB_ID": "7"}  # as in an image without squeue
        guard = subprocess.run(
            [sys.executable, "-m", "srl_hpc.srun_guard", str(run), str(srun.pid), "--grace", "0"],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
        )
        assert srun.poll() is None  # left alone
    finally:
        srun.kill()
        srun.wait()
    assert guard.returncode == 1, guard.stdout + guard.stderr  # the job script's "srun ended by itself"
    assert guard.stdout.count("\n") == 1 and "cannot end a hung srun: `squeue` is not found here" in guard.stdout
