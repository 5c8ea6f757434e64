"""Experiment files: every class of bad input is reported with its key path and YAML line."""

import pytest

from srl_hpc import config

GOOD = """\
name: t
env:
  id: CartPole-v1
stop:
  target_return: 475
"""


def problems(text):
    with pytest.raises(config.ConfigError) as info:
        config.loads(text, source="exp.yaml")
    return {(path, line): msg for path, line, msg in info.value.problems}


def test_defaults_fill_a_minimal_file():
    exp = config.loads(GOOD)
    assert exp.workers.actor.count == 2 and exp.stop.target_return == 475.0
    assert isinstance(exp.stop.target_return, float)


def test_shipped_experiments_validate(monkeypatch):
    from conftest import ROOT

    monkeypatch.syspath_prepend(str(ROOT / "examples"))  # the user-code examples, as their files say
    for path in sorted((ROOT / "experiments").rglob("*.yaml")):
        config.load(path)


def test_a_users_algorithm_is_imported_and_checked_at_validation(monkeypatch):
    from conftest import ROOT

    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    exp = config.loads(GOOD + "algorithm:\n  name: my_a2c:A2CConfig\n  lr: 3.0e-4\n")
    assert type(exp.algorithm).__name__ == "A2CConfig" and exp.algorithm.lr == 3e-4
    found = problems(GOOD + "algorithm:\n  name: my_a2c:A2CConfig\n  gamma: 2.0\n  clip_coef: 0.1\n")
    assert ("algorithm.gamma", 8) in found  # its own check(), with the line
    assert "unknown key" in found[("algorithm.clip_coef", 9)]  # PPO's field is not A2C's
    found = problems(GOOD + "algorithm:\n  name: my_a2c:NoSuchConfig\n")
    assert "cannot load 'my_a2c:NoSuchConfig'" in found[("algorithm.name", 7)]
    found = problems(GOOD + "algorithm:\n  name: my_a2c:A2C\n")  # the torch class, not a config
    assert "class attribute `spec`" in found[("algorithm.name", 7)]


def test_unknown_key_names_path_and_line():
    found = problems(GOOD + "workers:\n  actor:\n    rings: 3\n")
    assert ("workers.actor.rings", 8) in found
    assert "unknown key" in found[("workers.actor.rings", 8)]


def test_wrong_type_names_path_and_line():
    found = problems(GOOD + "seed: one\nworkers:\n  actor:\n    count: 2.5\n")
    assert ("seed", 6) in found and "must be int" in found[("seed", 6)]
    assert ("workers.actor.count", 9) in found


def test_bool_is_not_an_int():
    assert ("seed", 6) in problems(GOOD + "seed: true\n")


def test_out_of_range_values_are_refused_with_their_key_and_line():
    found = problems(GOOD + "algorithm:\n  lr: -0.1\n  gamma: 1.5\nworkers:\n  actor:\n    ring_size: 0\n")
    assert ("algorithm.lr", 7) in found
    assert ("algorithm.gamma", 8) in found
    assert ("workers.actor.ring_size", 11) in found


def test_absurd_worker_counts_are_refused_with_their_key():
    found = problems(GOOD + "workers:\n  actor:\n    count: 100000000000000000000\n")
    assert "more than one job can hold" in found[("workers.actor.count", 8)]


def test_ring_must_split_evenly():
    found = problems(GOOD + "workers:\n  actor:\n    ring_size: 6\n    inference_splits: 4\n")
    assert ("workers.actor.inference_splits", 9) in found


def test_more_policy_workers_than_actors():
    found = problems(GOOD + "workers:\n  actor:\n    count: 1\n  policy:\n    count: 2\n")
    assert ("workers.policy.count", 10) in found


def test_an_unknown_device_is_refused_with_its_key():
    assert ("workers.trainer.device", 8) in problems(GOOD + "workers:\n  trainer:\n    device: tpu\n")


def test_a_run_without_a_stop_condition_is_refused():
    assert any(path == "stop" for path, _ in problems("env:\n  id: CartPole-v1\nstop: {}\n"))


def test_an_evaluation_target_needs_evaluation_workers():
    assert ("stop.target_eval_return", 6) in problems(GOOD + "  target_eval_return: 475\n")
    assert ("workers.eval.episodes", 8) in problems(GOOD + "workers:\n  eval:\n    episodes: 0\n")
    config.loads(GOOD + "  target_eval_return: 475\nworkers:\n  eval: {count: 1}\n")  # fine with one


def test_a_separate_critic_needs_a_built_in_actor_critic_model():
    assert ("model.separate_critic", 6) in problems(
        "name: t\nenv: {id: CartPole-v1}\nalgorithm: {name: dqn}\nworkers: {buffer: {count: 1}}\nstop: {wall_time: 1}\n"
        "model: {separate_critic: true}\n"
    )
    assert ("model.separate_critic", 8) in problems(GOOD + "model:\n  name: mine.models:Net\n  separate_critic: true\n")


def test_weights_and_biases_needs_its_package(monkeypatch):
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None if name == "wandb" else object())
    found = problems(GOOD + "monitor:\n  wandb: {project: p}\n")
    assert "pip install wandb" in found[("monitor.wandb", 7)]


def test_name_defaults_to_file_stem(tmp_path):
    path = tmp_path / "my_run.yaml"
    path.write_text("stop: {wall_time: 10}\n")
    assert config.load(path).name == "my_run"


def test_a_name_with_a_space_is_refused_saying_what_a_name_may_hold():
    found = problems(GOOD.replace("name: t", "name: has space"))
    assert "letters, digits" in found[("name", 1)]


def test_a_duplicate_key_is_refused_at_its_second_line():
    assert ("seed", 7) in problems(GOOD + "seed: 1\nseed: 2\n")


def test_invalid_yaml_is_refused_with_its_line():
    found = problems("name: t\nenv: [unclosed\nstop: {}\n")
    assert any(line in (2, 3) and "invalid YAML" in msg for (_, line), msg in found.items())


def test_all_problems_reported_together():
    found = problems(GOOD + "seed: x\nbogus: 1\nalgorithm:\n  epochs: 0\n")
    assert {"seed", "bogus", "algorithm.epochs"} <= {path for path, _ in found}


def test_anneal_needs_a_frame_budget():
    assert ("algorithm.anneal_lr", 7) in problems(GOOD + "algorithm:\n  anneal_lr: true\n")


def test_resolved_config_round_trips():
    exp = config.loads(GOOD + "workers:\n  actor:\n    ring_size: 4\n")
    assert config.loads(config.dump(exp)) == exp


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(config.ConfigError, match="cannot read"):
        config.load(tmp_path / "nope.yaml")


def test_each_placement_checks_the_policy_workers_it_needs():
    assert config.loads(GOOD + "workers:\n  placement: seed\n  policy: {count: 0}\n").workers.placement == "seed"
    assert ("workers.placement", 7) in problems(GOOD + "workers:\n  placement: ray\n")
    assert ("workers.policy.count", 6) in problems(GOOD + "workers:\n  placement: impala\n")
    assert ("workers.policy.count", 8) in problems(GOOD + "workers:\n  policy:\n    count: 0\n")
    assert ("workers.policy.device", 8) in problems(
        GOOD + "workers:\n  placement: seed\n  policy: {count: 0, device: cuda}\n"
    )


def test_overrides_are_validated_and_named_by_key():
    exp = config.with_overrides(config.loads(GOOD), ["workers.actor.ring_size=16", "seed=3"])
    assert exp.workers.actor.ring_size == 16 and exp.seed == 3
    with pytest.raises(config.ConfigError) as info:
        config.with_overrides(exp, ["workers.actor.count=zero"])
    assert info.value.problems == [("workers.actor.count", None, "must be int, got a string 'zero'")]
    assert "--set: workers.actor.count" in str(info.value)


def test_exponents_without_a_dot_are_numbers_where_a_float_is_expected():
    exp = config.with_overrides(config.loads(GOOD), ["algorithm.lr=1e-3"])  # YAML 1.1 reads 1e-3 as a string
    assert exp.algorithm.lr == 0.001
    with pytest.raises(config.ConfigError, match="algorithm.lr: must be float, got a string 'fast'"):
        config.with_overrides(exp, ["algorithm.lr=fast"])


def test_several_policies_are_checked_by_key_and_line():
    tag = "name: t\nenv: {id: x}\nstop: {wall_time: 1}\npolicies:\n  predator: [adversary_*]\n  prey: [agent_*]\n"
    assert config.loads(tag).policies == {"predator": ("adversary_*",), "prey": ("agent_*",)}
    found = problems(tag + "  empty: []\n  'a b': [x]\n")
    assert found[("policies.empty", 7)] == "must list at least one agent pattern"
    assert "parameter tag and file name" in found[("policies.a b", 8)]
    assert ("policies.prey", 6) in problems(tag.replace("[agent_*]", "agent_*"))  # a list, not a string
    found = problems(tag + "workers: {placement: impala, policy: {count: 0}, eval: {count: 1}}\n")
    assert "policy workers of their own" in found[("workers.placement", 7)]
    assert "evaluation workers play one policy" in found[("workers.eval.count", 7)]
    found = problems(
        tag.replace("{wall_time: 1}", "{target_return: 5}") + "algorithm: {name: dqn}\nworkers: {buffer: {count: 1}}\n"
    )
    assert "on-policy algorithms only" in found[("workers.buffer.count", 8)]
    assert "stop by env_frames or wall_time" in found[("stop.target_return", 3)]


def test_apptainer_options_that_drop_the_slurm_variables_are_refused_naming_the_key_and_line():
    for option in ("--cleanenv", "-e", "--containall", "-C", "--cleanenv=true"):
        found = problems(
            GOOD + f"slurm:\n  container:\n    image: /images/srl.sif\n    options: [--writable-tmpfs, '{option}']\n"
        )
        message = found[("slurm.container.options", 9)]
        assert message.startswith(f"{option!r} ") and "SLURM_PROCID" in message and "--env NAME=VALUE" in message
    for options in ("[--writable-tmpfs, --cleanenv=false]", "[--contain]"):  # these keep the environment
        config.loads(GOOD + f"slurm:\n  container: {{image: /images/srl.sif, options: {options}}}\n")
    # to srun (pyxis) -e and -C are --error and --constraint
    config.loads(
        GOOD + "slurm:\n  container: {runtime: pyxis, image: 'nvcr.io#nvidia/pytorch:24.05-py3', options: [-C, a100]}\n"
    )


def test_threads_per_core_must_be_positive():
    assert "must be >= 1" in problems(GOOD + "slurm:\n  threads_per_core: 0\n")[("slurm.threads_per_core", 7)]
