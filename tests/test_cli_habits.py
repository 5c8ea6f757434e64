"""srl-launch's habits: --version, a mistyped command or config key named with its correction, usage errors on
stderr with exit code 2, `run` as an explicit subcommand, bare KEY=VALUE overrides, shell completion."""

import os
import subprocess

import pytest

from conftest import ROOT, script
from launcher import cli
from launcher.commands import common
from srl_hpc import __version__, config

CARTPOLE = [str(ROOT / "experiments" / name) for name in ("cartpole_ppo.yaml", "cartpole_dqn.yaml")]


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
    files = CARTPOLE
    assert cli.main(["validate", *files, "--seed", "3", "--set", "workers.actor.count=3"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"{f}: ok" for f in files]
    assert cli.main(["graph", *files, "--seed", "3", "--set", "workers.actor.count=3"]) == 0
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if line.startswith("# ")] == [f"# {f}" for f in files]
    assert out.count("actor/2 ") == 2  # both graphs with three actors
    assert cli.main(["validate", files[0], "--set", "workers.actor.count=0"]) == 2


def test_switching_the_algorithm_with_set_starts_from_its_defaults():
    from srl_hpc import config

    exp = config.with_overrides(
        config.load(ROOT / "experiments" / "cartpole_ppo.yaml"),
        ["algorithm.name=dqn", "algorithm.n_step=5", "workers.buffer.count=1"],
    )
    assert exp.algorithm.name == "dqn" and exp.algorithm.n_step == 5
    assert exp.algorithm.gamma == config.DQNConfig().gamma and exp.workers.actor.ring_size == 16  # the rest as the file


def test_switching_to_dqn_validates_and_brings_its_buffer_worker(capsys):
    assert cli.main(["validate", CARTPOLE[0], "--set", "algorithm.name=dqn"]) == 0  # dqn replays: a buffer comes
    exp = config.with_overrides(config.load(CARTPOLE[0]), ["algorithm.name=dqn"])
    assert exp.workers.buffer.count == 1
    back = config.with_overrides(exp, ["algorithm.name=ppo"])  # on-policy again: no buffer worker
    assert back.workers.buffer.count == 0 and cli.main(["validate", CARTPOLE[0], "--set", "algorithm.name=ppo"]) == 0
    assert cli.main(["validate", CARTPOLE[0], "--set", "algorithm.name=dqn", "--set", "workers.buffer.count=0"]) == 2
    assert "workers.buffer.count: dqn needs at least one buffer worker" in capsys.readouterr().err  # asked for


def test_bare_key_value_words_are_set_overrides(capsys, tmp_path):
    """The same experiment prepared with --set and with bare KEY=VALUE words resolves to the same experiment."""
    resolved = []
    for name, overrides in (
        ("with-set", ["--set", "workers.actor.count=3", "--set", "seed=7"]),
        ("bare", ["workers.actor.count=3", "--run-dir", str(tmp_path / "bare"), "seed=7"]),
    ):
        argv = ["prepare", CARTPOLE[0], *overrides]
        assert cli.main(argv if "--run-dir" in argv else [*argv, "--run-dir", str(tmp_path / name)]) == 0
        text = (tmp_path / name / "experiment.yaml").read_text()
        resolved.append(text.replace(str(tmp_path / name), "RUN"))
    assert resolved[0] == resolved[1] and "count: 3" in resolved[0] and "seed: 7" in resolved[0]
    capsys.readouterr()
    # several files: a KEY=VALUE word is not one of them, and may follow the options
    assert cli.main(["validate", *CARTPOLE, "--seed", "3", "workers.actor.count=3"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"{f}: ok" for f in CARTPOLE]
    assert cli.main(["graph", *CARTPOLE, "workers.actor.count=3"]) == 0
    assert capsys.readouterr().out.count("actor/2 ") == 2
    assert cli.main(["validate", CARTPOLE[0], "workers.actor.count=0"]) == 2


@pytest.mark.parametrize("command", ["run", "prepare", "validate", "graph"])
def test_validate_graph_prepare_and_run_take_the_same_overrides(command):
    args = common.parse(
        cli.PARSERS[command](),
        [CARTPOLE[0], "a.b=1", "--seed", "3", "--set", "c.d=2", "e=3"],
        many=command in ("validate", "graph"),
    )
    assert args.seed == 3 and args.set == ["c.d=2", "a.b=1", "e=3"]  # --set ones first, then the bare ones


def test_a_word_neither_a_file_nor_key_value_is_named(capsys):
    assert cli.main(["run", CARTPOLE[0], "junk"]) == 2
    assert "'junk' is neither KEY=VALUE nor an option" in capsys.readouterr().err
    assert cli.main(["validate", CARTPOLE[0], "junk"]) == 2
    assert "junk:?: <top>: cannot read" in capsys.readouterr().err
    assert cli.main(["validate", "seed=3"]) == 2
    assert "no experiment file given" in capsys.readouterr().err


def test_a_misspelled_key_gets_a_suggestion_in_a_file_with_set_and_bare(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("workers:\n  actor: {cuont: 3}\n")
    assert cli.main(["validate", str(bad)]) == 2
    assert "bad.yaml:2: workers.actor.cuont: unknown key; did you mean 'count'?" in capsys.readouterr().err
    assert cli.main(["validate", CARTPOLE[0], "--set", "workers.actor.cuont=3"]) == 2
    with_set = capsys.readouterr().err
    assert cli.main(["validate", CARTPOLE[0], "workers.actor.cuont=3"]) == 2
    assert capsys.readouterr().err == with_set and "did you mean 'count'?" in with_set


def test_srl_trace_has_explicit_subcommands_and_a_version(capsys, tmp_path):
    from srl_hpc.trace import cli as trace_cli

    assert trace_cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"srl-trace {__version__}"
    (tmp_path / "compare").mkdir()  # a run directory called "compare", without traces
    assert trace_cli.main(["summary", str(tmp_path / "compare")]) == 2
    assert "no trace files under" in capsys.readouterr().err  # read as a run directory, not as the command


def test_help_lists_every_command_and_the_exit_codes(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert ", ".join(cli.PARSERS) in out.replace("\n             ", "") and "exit codes: 0" in out


def complete(tool: str, line: str, tmp_path) -> list[str]:
    """What the shell's completion hook gets for `line` (the cursor at its end): the installed entry point run
    as bash runs it, its candidates read from _ARGCOMPLETE_STDOUT_FILENAME. Fails if completing imported torch."""
    out = tmp_path / "candidates"
    env = {
        **os.environ,
        "_ARGCOMPLETE": "1",
        "_ARGCOMPLETE_IFS": "\n",
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
        "_ARGCOMPLETE_STDOUT_FILENAME": str(out),
        "PYTHONPROFILEIMPORTTIME": "1",
    }
    done = subprocess.run([script(tool)], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {row.rsplit("|", 1)[-1].strip() for row in done.stderr.splitlines() if row.startswith("import time:")}
    assert imported and "torch" not in imported
    return sorted(c.strip() for c in out.read_text().split("\n") if c.strip())


@pytest.mark.slow
def test_shell_completion_of_commands_and_their_options(tmp_path):
    assert complete("srl-launch", "srl-launch val", tmp_path) == ["validate"]
    assert complete("srl-launch", "srl-launch validate --s", tmp_path) == ["--seed", "--set"]
    assert complete("srl-launch", "srl-launch experiments/cartpole_ppo.yaml --se", tmp_path) == [
        "--seed",
        "--seeds",
        "--set",
    ]  # `run` left out, as it may be
    assert complete("srl-trace", "srl-trace su", tmp_path) == ["summary"]
    assert complete("srl-trace", "srl-trace compare runs --", tmp_path) == ["--help", "--json"]


@pytest.mark.slow
def test_shell_completion_of_experiment_files_and_run_directories(tmp_path):
    for name in ("run-1/", "run-2/", "run-notes.txt", "run-exp.yaml"):
        (tmp_path / name.rstrip("/")).mkdir() if name.endswith("/") else (tmp_path / name).write_text("")
    runs = [str(tmp_path / "run-1") + "/", str(tmp_path / "run-2") + "/"]
    assert complete("srl-launch", f"srl-launch status {tmp_path}/run", tmp_path) == runs
    assert complete("srl-trace", f"srl-trace {tmp_path}/run", tmp_path) == runs
    experiments = sorted([str(tmp_path / "run-exp.yaml"), *runs])  # the directories, to walk into
    assert complete("srl-launch", f"srl-launch validate {tmp_path}/run", tmp_path) == experiments
    assert complete("srl-launch", "srl-launch experiments/cartpole_pp", tmp_path) == ["experiments/cartpole_ppo.yaml"]


def test_resume_set_changes_the_runs_size_and_refuses_what_the_checkpoint_holds(capsys, tmp_path):
    from launcher import runs
    from srl_hpc.rundir import RunDir

    _, run = runs.create(config.load(ROOT / "experiments" / "cartpole_ppo.yaml"), tmp_path / "run")
    run.checkpoint.parent.mkdir()
    run.checkpoint.touch()
    written = run.experiment.read_text()
    assert cli.main(["resume", str(run.root), "--set", "model.hidden_sizes=[8]", "--set", "env.id=Acrobot-v1"]) == 2
    err = capsys.readouterr().err
    assert "model.hidden_sizes" in err and "env.id" in err and "a resume changes only workers.*, stop.*" in err
    assert run.experiment.read_text() == written and RunDir(run.root).attempt == 1  # nothing changed
    assert cli.main(["resume", str(run.root), "--chain", "2", "--set", "workers.actor.count=4"]) == 2
    assert "--set changes a run as it resumes now" in capsys.readouterr().err
    assert cli.main(["resume", str(run.root), "--set", "workers.actor.count=50000"]) == 2  # too big for here
    assert "local mode would start" in capsys.readouterr().err
    assert run.experiment.read_text() == written and RunDir(run.root).attempt == 1  # refused: nothing changed
    exp, resumed = runs.reopen(run.root, ["workers.actor.count=4", "stop.wall_time=90"])
    assert (exp.workers.actor.count, exp.stop.wall_time, resumed.attempt) == (4, 90, 2)
    assert config.load(run.experiment) == exp  # what the workers of the attempt read
