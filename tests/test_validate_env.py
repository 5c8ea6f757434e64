"""`srl-launch validate` (and every command that runs or submits) builds the env's spaces once and refuses an
algorithm that cannot train on them, or an env id that names no env, with the key and its YAML line."""

import pytest
from gymnasium import spaces

from conftest import ROOT, srl
from launcher import cli, local, slurm
from srl_hpc.algorithm_spec import SPECS, spec
from srl_hpc.config import spaces_check

BOX_OBS = spaces.Box(-1.0, 1.0, (4,), dtype="float32")


def experiment(tmp_path, env_id, algorithm=None, name="exp.yaml"):
    """An experiment file: env.id on line 5, algorithm.name (if given) on line 7."""
    text = (
        f"name: t\nstop:\n  wall_time: 5\nenv:\n  id: {env_id}\nalgorithm:\n  name: {algorithm}\n"
        if algorithm
        else f"name: t\nstop:\n  wall_time: 5\nenv:\n  id: {env_id}\n"
    )
    if algorithm == "dqn":
        text += "workers:\n  buffer:\n    count: 1\n"
    path = tmp_path / name
    path.write_text(text)
    return path


def validate(capsys, *argv):
    """(exit code, stdout, stderr) of `srl-launch validate ARGV` in this process."""
    code = cli.main(["validate", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


# the space check itself: a pure function of (spec, observation space, action space)


def test_dqn_refuses_box_actions_and_names_the_space():
    pendulum_actions = spaces.Box(-2.0, 2.0, (1,), dtype="float32")
    found = spaces_check.space_problems(SPECS["dqn"], BOX_OBS, pendulum_actions, algorithm="dqn", env="Pendulum-v1")
    assert found == [
        (
            "algorithm.name",
            "algorithm dqn needs discrete actions (Discrete); Pendulum-v1 has Box(-2.0, 2.0, (1,), float32)",
        )
    ]


def test_each_spec_accepts_what_it_declares():
    assert spaces_check.space_problems(SPECS["dqn"], BOX_OBS, spaces.Discrete(2)) == []
    for actions in (spaces.Discrete(3), spaces.MultiDiscrete([2, 3]), spaces.Box(-1.0, 1.0, (2,))):
        assert spaces_check.space_problems(SPECS["ppo"], BOX_OBS, actions) == []
    dict_obs = spaces.Dict({"image": BOX_OBS, "state": BOX_OBS})
    assert spaces_check.space_problems(SPECS["ppo"], dict_obs, spaces.Discrete(2)) == []


def test_observations_are_checked_too():
    dict_obs = spaces.Dict({"image": BOX_OBS})
    found = spaces_check.space_problems(SPECS["dqn"], dict_obs, spaces.Discrete(2), algorithm="dqn", env="E")
    assert len(found) == 1 and found[0][0] == "algorithm.name"
    assert found[0][1].startswith("algorithm dqn needs array observations (Box); E has Dict(")
    found = spaces_check.space_problems(SPECS["ppo"], spaces.Discrete(5), spaces.Discrete(2), algorithm="ppo")
    assert "needs array or dict observations (Box, Dict)" in found[0][1]


def test_a_users_algorithm_spec_is_read_like_a_shipped_one(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    from my_a2c import A2CConfig  # default spec fields: Discrete actions, Box observations

    assert spec(A2CConfig()).actions == ("Discrete",)
    assert spaces_check.space_problems(spec(A2CConfig()), BOX_OBS, spaces.Box(-1.0, 1.0, (1,)))
    assert not spaces_check.space_problems(spec(A2CConfig()), BOX_OBS, spaces.Discrete(2))


# validate: the env built once, problems named by key and line


def test_validate_refuses_pendulum_with_dqn_naming_key_line_and_space(tmp_path, capsys):
    path = experiment(tmp_path, "Pendulum-v1", "dqn")
    code, out, err = validate(capsys, path)
    assert code == 2 and "ok" not in out
    assert (
        f"{path}:7: algorithm.name: algorithm dqn needs discrete actions (Discrete); "
        f"Pendulum-v1 has Box(-2.0, 2.0, (1,), float32)"
    ) in err


def test_validate_refuses_an_unknown_env_id_and_suggests_close_ones(tmp_path, capsys):
    path = experiment(tmp_path, "CartPol-v1")
    code, _, err = validate(capsys, path)
    assert code == 2
    assert f"{path}:5: env.id: unknown env id 'CartPol-v1'; did you mean CartPole-v1?" in err


@pytest.mark.parametrize("env_id,algorithm", [("CartPole-v1", "ppo"), ("CartPole-v1", "dqn"), ("Pendulum-v1", "ppo")])
def test_validate_accepts_what_the_algorithm_trains(tmp_path, capsys, env_id, algorithm):
    path = experiment(tmp_path, env_id, algorithm)
    assert validate(capsys, path) == (0, f"{path}: ok\n", "")


def test_overrides_are_applied_before_the_check(tmp_path, capsys):
    dqn = ROOT / "experiments" / "cartpole_dqn.yaml"
    code, _, err = validate(capsys, dqn, "--set", "env.id=Pendulum-v1")
    line = next(i for i, text in enumerate(dqn.read_text().splitlines(), 1) if text.strip() == "name: dqn")
    assert code == 2 and f"{dqn}:{line}: algorithm.name: algorithm dqn needs discrete actions" in err
    code, _, err = validate(
        capsys, experiment(tmp_path, "Pendulum-v1"), "--set", "algorithm={name: dqn}", "--set", "workers.buffer.count=1"
    )
    assert code == 2 and "--set: algorithm.name: algorithm dqn needs discrete actions" in err  # no line of a --set


def test_a_factory_that_does_not_import_names_env_id(tmp_path, capsys):
    path = experiment(tmp_path, "no_such_module_here.envs:make")
    code, _, err = validate(capsys, path)
    assert code == 2
    assert f"{path}:5: env.id: cannot import 'no_such_module_here.envs' for factory" in err


def test_a_missing_package_is_named_with_what_to_install(tmp_path, capsys, monkeypatch):
    (tmp_path / "needs_mujoco.py").write_text(
        "import gymnasium\n\ndef make():\n"
        "    raise gymnasium.error.DependencyNotInstalled(\n"
        "        'MuJoCo is not installed, run `pip install \"gymnasium[mujoco]\"`')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    path = experiment(tmp_path, "needs_mujoco:make")
    code, _, err = validate(capsys, path)
    assert code == 2 and "Traceback" not in err
    assert (
        f"{path}:5: env.id: needs_mujoco:make needs a package that is not installed: "
        f'MuJoCo is not installed, run `pip install "gymnasium[mujoco]"`'
    ) in err


def test_a_run_and_prepare_are_refused_before_anything_is_made(tmp_path, capsys, monkeypatch):
    path = experiment(tmp_path, "Pendulum-v1", "dqn")
    monkeypatch.chdir(tmp_path)  # runs/ would be made here

    def started(*_args, **_kwargs):
        raise AssertionError("got past the check")

    monkeypatch.setattr(local, "run", started)  # were the check gone: a failure here, not a real run
    monkeypatch.setattr(slurm, "prepare", started)
    assert cli.main([str(path)]) == 2
    assert cli.main([str(path), "--slurm", "--dry-run"]) == 2
    assert cli.main(["prepare", str(path), "--run-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.count(f"{path}:7: algorithm.name: algorithm dqn needs discrete actions") == 3
    assert not (tmp_path / "runs").exists() and not (tmp_path / "r").exists()


def test_the_installed_command_exits_non_zero_on_a_refusal(tmp_path):
    path = experiment(tmp_path, "Pendulum-v1", "dqn")
    proc = srl("validate", path, timeout=60)
    assert proc.returncode != 0 and "algorithm.name" in proc.stderr and "Box(-2.0, 2.0, (1,), float32)" in proc.stderr
    assert proc.stdout == ""


def test_shipped_experiments_pass_the_env_check(monkeypatch):
    """Every shipped experiment whose env can be built here (its packages installed) is one validate accepts."""
    from srl_hpc import config

    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    checked = 0
    for path in sorted((ROOT / "experiments").rglob("*.yaml")):
        problems = spaces_check.env_problems(config.load(path))
        if any(key == "env.id" and "pip install" in message for key, message in problems):
            continue  # an optional package this machine lacks (minatar, ...)
        assert problems == [], path
        checked += 1
    assert checked >= 10
