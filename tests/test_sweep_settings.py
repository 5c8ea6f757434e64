"""What a sweep hands submitit: the slurm section's setup, env, python and sbatch options (submitit writes
the script without submitting it)."""

import pytest
import submitit

from launcher import sweep
from srl_hpc import config

SWEEP = """\
name: sweepy
stop: {wall_time: 5}
slurm:
  python: /opt/venv/bin/python
  setup: ["module load openmpi", "source /opt/venv/bin/activate"]
  env: {OMP_NUM_THREADS: 1, WANDB_MODE: offline}
  sbatch_options: ["--exclusive", "--constraint=a100", "--mail-type END", "-A lab", "--cpus-per-task=8"]
  sweep: {partition: cpu, cpus: 4, mem: 3G, time: "00:15:00"}
"""


def test_a_sweep_hands_submitit_the_slurm_sections_setup_env_python_and_sbatch_options(tmp_path, monkeypatch):
    monkeypatch.setattr(submitit.SlurmExecutor, "affinity", classmethod(lambda cls: 2))  # (srun need not exist)
    exp = config.loads(SWEEP)
    ctor, params = sweep.executor_settings(exp, 3, tmp_path)
    assert ctor["slurm_python"] == "/opt/venv/bin/python"
    assert params["slurm_additional_parameters"] == {
        "exclusive": True,
        "constraint": "a100",
        "mail_type": "END",
        "account": "lab",
        "cpus_per_task": "8",
    }
    executor = sweep.make_executor(exp, tmp_path / "submitit", 3)
    inner = executor._executor  # submitit writes the script without submitting it
    text = inner._make_submission_file_text(inner._submitit_command_str, "x")
    for line in (
        "#SBATCH --exclusive",
        "#SBATCH --constraint=a100",
        "#SBATCH --mail-type=END",
        "#SBATCH --account=lab",
        "#SBATCH --partition=cpu",
    ):
        assert line + "\n" in text, text
    assert text.count("--cpus-per-task") == 1 and "#SBATCH --cpus-per-task=8\n" in text  # the option wins
    setup = [
        "module load openmpi",
        "source /opt/venv/bin/activate",
        "export OMP_NUM_THREADS=1",
        "export WANDB_MODE=offline",
    ]
    positions = [text.index(line + "\n") for line in setup]
    assert positions == sorted(positions) and text.rindex("#SBATCH") < positions[0]
    assert "/opt/venv/bin/python -u -m submitit.core._submit" in text


def test_a_sweep_refuses_an_sbatch_option_submitit_cannot_take_before_making_anything(tmp_path, fake_bin):
    fake_bin("sbatch", "exit 1")  # (never the cluster's, were the option to get through)
    exp = config.loads(SWEEP.replace('"-A lab"', '"-Z x"'))
    with pytest.raises(config.ConfigError, match="'-Z x'"):
        sweep.submit(exp, sweep.points([()], [1, 2]), tmp_path / "sweep", "srl-launch")
    assert not (tmp_path / "sweep").exists()


def test_a_sweep_runs_its_members_in_the_container_with_the_sweep_directory_bound(tmp_path):
    exp = config.loads(
        SWEEP.replace("  python: /opt/venv/bin/python\n", "  python: python3 -X faulthandler\n")
        + "  container: {image: /images/srl.sif, binds: [/datasets]}\n"
    )
    ctor, params = sweep.executor_settings(exp, 3, tmp_path / "sweep")
    assert ctor["slurm_python"] == (
        f"apptainer exec --bind /datasets,{tmp_path / 'sweep'} /images/srl.sif python3 -X faulthandler"
    )
    pyxis = config.loads(SWEEP + "  container: {runtime: pyxis, image: 'nvcr.io#nvidia/pytorch:24.05-py3'}\n")
    ctor, params = sweep.executor_settings(pyxis, 3, tmp_path / "sweep")
    assert ctor["slurm_python"] == "/opt/venv/bin/python"
    assert params["slurm_srun_args"] == [
        "--container-image=nvcr.io#nvidia/pytorch:24.05-py3",
        f"--container-mounts={tmp_path / 'sweep'}:{tmp_path / 'sweep'}",
    ]
