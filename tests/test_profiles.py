"""Profiles: any part of an experiment in a file of its own (a cluster's slurm: keys, say), composed under
it: the experiment's `defaults:` list first, then --profile files ($SRL_PROFILE), then its own keys, then
--set. Problems are named with the file and line where the key was written."""

import os
from pathlib import Path

import pytest

from conftest import ROOT
from launcher import cli, plan, render, runs
from launcher.commands import common
from launcher.commands import run as run_command
from srl_hpc import config
from srl_hpc.config.loader import key_lines

EXAMPLE = ROOT / "clusters" / "example.yaml"
GOLDEN = Path(__file__).parent / "golden"


def sbatch(exp) -> str:
    made = plan.make_plan(exp, "/scratch/runs/golden", "/opt/venv/bin/python")
    return render.render(
        made, "srl-launch EXPERIMENT --slurm --dry-run --profile clusters/example.yaml", version="0.0.0-test"
    )


@pytest.mark.parametrize("name", ["cartpole_ppo", "cartpole_dqn"])
def test_a_profile_composed_with_a_shipped_experiment_renders_the_hand_merged_files_sbatch(name, tmp_path):
    shipped = ROOT / "experiments" / f"{name}.yaml"
    by_flag = sbatch(config.load(shipped, profiles=[EXAMPLE]))
    (tmp_path / f"{name}.yaml").write_text(f"defaults: [{EXAMPLE}]\n" + shipped.read_text())
    by_defaults = sbatch(config.load(tmp_path / f"{name}.yaml"))
    by_hand = sbatch(config.load(GOLDEN / f"{name}_example_profile.yaml"))
    golden = GOLDEN / f"{name}_example_profile.sbatch"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(by_hand)
    assert by_flag == by_defaults == by_hand == golden.read_text()
    assert "--account=rl-lab-gpu" in by_flag and "module load python/3.11" in by_flag  # the profile's keys
    assert by_flag != sbatch(config.load(shipped))


def write(tmp_path, **files) -> Path:
    for name, text in files.items():
        (tmp_path / f"{name}.yaml").write_text(text)
    return tmp_path / "exp.yaml"


LAYERS = dict(
    base="seed: 5\nslurm:\n  account: base\n  qos: base\n  time: '00:10:00'\n  setup: [a, b]\n"
    "  actor: {partition: base, cpus_per_task: 3}\n",
    second="slurm: {account: second}\n",
    prof="slurm:\n  qos: prof\n  time: '00:20:00'\n  setup: [c]\n  actor: {partition: prof}\n",
    later="slurm: {qos: later}\n",
    exp="defaults: [base.yaml, second.yaml]\nstop: {wall_time: 60}\nslurm:\n  time: '00:30:00'\n",
)


def test_defaults_then_profiles_then_the_file_then_set(tmp_path):
    exp_path = write(tmp_path, **LAYERS)
    parsed = run_command.parser().parse_args([str(exp_path), "--profile", str(tmp_path / "prof.yaml")])
    s = common.experiment(parsed).slurm
    assert (s.account, s.qos, s.time) == ("second", "prof", "00:30:00")  # later defaults; profile; the file
    assert (s.actor.partition, s.actor.cpus_per_task) == ("prof", 3)  # mappings merge key by key
    assert s.setup == ("c",)  # lists replace
    assert common.experiment(parsed).seed == 5  # any section, not only slurm:
    twice = run_command.parser().parse_args(
        [
            str(exp_path),
            "--profile",
            str(tmp_path / "prof.yaml"),
            "--profile",
            str(tmp_path / "later.yaml"),
            "--set",
            "slurm.time=00:40:00",
        ]
    )
    assert (common.experiment(twice).slurm.qos, common.experiment(twice).slurm.time) == ("later", "00:40:00")


def test_the_environment_names_profiles_unless_the_flag_does(tmp_path, monkeypatch):
    exp_path = write(tmp_path, **LAYERS)
    monkeypatch.setenv("SRL_PROFILE", f"{tmp_path / 'prof.yaml'}{os.pathsep}{tmp_path / 'later.yaml'}")
    assert common.experiment(run_command.parser().parse_args([str(exp_path)])).slurm.qos == "later"
    flag = run_command.parser().parse_args([str(exp_path), "--profile", str(tmp_path / "prof.yaml")])
    assert common.experiment(flag).slurm.qos == "prof"


def test_a_wrong_key_is_named_with_the_profiles_file_and_line(tmp_path):
    exp_path = write(
        tmp_path,
        base="seed: 1\nslurm:\n  actor: {cpus_per_tsk: 1}\n",
        prof="workers:\n  actor:\n    cuont: 2\n",
        exp="defaults: [base.yaml]\nstop: {wall_time: 60}\n",
    )
    with pytest.raises(config.ConfigError) as info:
        config.load(exp_path, profiles=[tmp_path / "prof.yaml"])
    text = str(info.value)
    assert f"{tmp_path / 'base.yaml'}:3: slurm.actor.cpus_per_tsk: unknown key" in text
    assert f"{tmp_path / 'prof.yaml'}:3: workers.actor.cuont: unknown key" in text
    assert key_lines(exp_path)["slurm.actor"] == 3 and key_lines(exp_path)["slurm.actor"].file.endswith("base.yaml")


def test_an_env_problem_from_a_profile_is_named_with_the_profiles_file_and_line(tmp_path, capsys):
    exp_path = write(tmp_path, prof="seed: 3\nenv:\n  id: CartPol-v1\n", exp="stop: {wall_time: 60}\n")
    assert cli.main(["validate", str(exp_path), "--profile", str(tmp_path / "prof.yaml")]) == 2
    assert f"{tmp_path / 'prof.yaml'}:3: env.id:" in capsys.readouterr().err  # found after loading, still placed


def test_a_missing_profile_is_named_where_it_was_given(tmp_path, monkeypatch, capsys):
    exp_path = write(tmp_path, exp="stop: {wall_time: 60}\ndefaults:\n  - base.yaml\n  - gone.yaml\n", base="seed: 2\n")
    with pytest.raises(config.ConfigError) as info:
        config.load(exp_path)
    assert f"{exp_path}:4: defaults[1]: no such file: {tmp_path / 'gone.yaml'}" in str(info.value)
    exp_path.write_text("stop: {wall_time: 60}\n")
    assert cli.main(["validate", str(exp_path), "--profile", str(tmp_path / "nowhere.yaml")]) == 2
    assert f"--profile: {tmp_path / 'nowhere.yaml'}: no such file" in capsys.readouterr().err
    monkeypatch.setenv("SRL_PROFILE", str(tmp_path / "missing.yaml"))
    assert cli.main(["validate", str(exp_path)]) == 2
    assert f"$SRL_PROFILE: {tmp_path / 'missing.yaml'}: no such file" in capsys.readouterr().err


def test_a_cycle_of_defaults_is_an_error_naming_the_files(tmp_path):
    exp_path = write(
        tmp_path,
        exp="defaults: [a.yaml]\nstop: {wall_time: 60}\n",
        a="seed: 1\ndefaults: [b.yaml]\n",
        b="defaults: [a.yaml]\n",
    )
    with pytest.raises(config.ConfigError) as info:
        config.load(exp_path)
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    assert f"{b}:1: defaults[0]: a cycle of defaults: {exp_path} -> {a} -> {b} -> {a}" in str(info.value)


def test_the_resolved_experiment_holds_the_merged_keys_and_no_defaults(tmp_path):
    exp_path = write(tmp_path, **LAYERS)
    exp, run = runs.create(config.load(exp_path, profiles=[tmp_path / "prof.yaml"]), tmp_path / "run")
    written = run.experiment.read_text()
    assert "defaults" not in written and "qos: prof" in written
    assert config.load(run.experiment) == exp  # a resume needs neither the profiles nor the variable


def test_the_docs_show_the_example_profile_as_it_is():
    shipped = EXAMPLE.read_text()
    assert shipped[shipped.index("slurm:") :] in (ROOT / "docs" / "clusters.md").read_text()
