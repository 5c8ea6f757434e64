"""srl-launch's habits: --version, a mistyped command named with its correction, usage errors on stderr
with exit code 2, `run` as an explicit subcommand."""
from launcher import cli
from srl_hpc import __version__


def test_version_is_the_packages(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"srl-launch {__version__}"


def test_a_mistyped_command_is_named_with_its_correction(capsys):
    assert cli.main(["valdate", "x.yaml"]) == 2
    assert "unknown command 'valdate'; did you mean 'validate'?" in capsys.readouterr().err
    assert cli.main(["statsu", "runs/x"]) == 2
    assert "did you mean 'status'?" in capsys.readouterr().err


def test_no_arguments_is_a_usage_error_on_stderr(capsys):
    assert cli.main([]) == 2
    out = capsys.readouterr()
    assert out.out == "" and "usage: srl-launch" in out.err


def test_run_is_an_explicit_subcommand_too(capsys, tmp_path):
    missing = tmp_path / "missing.yaml"
    assert cli.main(["run", str(missing)]) == cli.main([str(missing)]) == 2  # an experiment it cannot read
    assert capsys.readouterr().err.count("cannot read") == 2


def test_validate_and_graph_take_several_files_and_the_runs_seed_and_overrides(capsys):
    from conftest import ROOT

    files = [str(ROOT / "experiments" / name) for name in ("cartpole_ppo.yaml", "cartpole_dqn.yaml")]
    assert cli.main(["validate", *files, "--seed", "3", "--set", "workers.actor.count=3"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"{f}: ok" for f in files]
    assert cli.main(["graph", *files, "--seed", "3", "--set", "workers.actor.count=3"]) == 0
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if line.startswith("# ")] == [f"# {f}" for f in files]
    assert out.count("actor/2 ") == 2  # both graphs with three actors
    assert cli.main(["validate", files[0], "--set", "workers.actor.count=0"]) == 2


def test_switching_the_algorithm_with_set_starts_from_its_defaults():
    from conftest import ROOT
    from srl_hpc import config

    exp = config.with_overrides(config.load(ROOT / "experiments" / "cartpole_ppo.yaml"),
                                ["algorithm.name=dqn", "algorithm.n_step=5", "workers.buffer.count=1"])
    assert exp.algorithm.name == "dqn" and exp.algorithm.n_step == 5
    assert exp.algorithm.gamma == config.DQNConfig().gamma and exp.workers.actor.ring_size == 16  # the rest as the file


def test_srl_trace_has_explicit_subcommands_and_a_version(capsys, tmp_path):
    from srl_hpc.trace import cli as trace_cli

    assert trace_cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"srl-trace {__version__}"
    (tmp_path / "compare").mkdir()  # a run directory called "compare", without traces
    assert trace_cli.main(["summary", str(tmp_path / "compare")]) == 2
    assert "no trace files under" in capsys.readouterr().err  # read as a run directory, not as the command
