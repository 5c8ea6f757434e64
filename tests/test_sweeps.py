"""Sweeps over override sets and seeds (launcher/sweep.py): the members and their run directories, and a grid
of 2 values x 3 seeds run here (the same grid as a submitit array: tests/test_slurm.py)."""

import json
import re
import subprocess

import pytest

from conftest import ROOT, script, srl
from launcher import sweep
from launcher.cli import main
from srl_hpc import config

GRID_IN_THE_FILE = """\
env: {id: CartPole-v1}
stop: {wall_time: 5}
slurm:
  sweep:
    grid: {algorithm.lr: [1.0e-3, 1.0e-4], model.hidden_sizes: [[64, 64], [32]]}
    seeds: [1, 2, 3]
"""


def test_a_grid_is_every_combination_of_its_axes_times_the_seeds():
    configs = sweep.configurations(["algorithm.lr=1e-3,3e-4", "model.hidden_sizes=[64,64],[32]"], [])
    assert configs == [
        (f"algorithm.lr={lr}", f"model.hidden_sizes={h}") for lr in ("1e-3", "3e-4") for h in ("[64,64]", "[32]")
    ]
    members = sweep.points(configs, [1, 2])
    assert len(members) == 8 and [m.seed for m in members[:2]] == [1, 2]
    assert members[0].path == "algorithm.lr=1e-3+model.hidden_sizes=_64_64_/seed-1"
    assert members[0].label == "algorithm.lr=1e-3+model.hidden_sizes=_64_64_ seed 1"
    assert sweep.points(sweep.configurations([], []), [3])[0].path == "seed-3"  # seeds alone, as before


def test_a_list_of_override_sets_is_one_configuration_each():
    configs = sweep.configurations([], ["algorithm.lr=1e-3 algorithm.epochs=8", "algorithm.lr=3e-4"])
    assert configs == [("algorithm.lr=1e-3", "algorithm.epochs=8"), ("algorithm.lr=3e-4",)]


def test_values_split_on_commas_outside_brackets_and_quotes():
    assert sweep.split_values("[64,64],[128],'a,b'") == ["[64,64]", "[128]", "'a,b'"]


@pytest.mark.parametrize(
    "grid, sets, error",
    [
        (["algorithm.lr"], [], "expected KEY=VALUE1,VALUE2"),
        (["algorithm.lr=1e-3,"], [], "expected KEY=VALUE1,VALUE2"),
        (["algorithm.lr=1,1"], [], "a value appears twice"),
        (["algorithm.lr=1", "algorithm.lr=2"], [], "a key is given twice"),
        (["algorithm.lr=1"], ["algorithm.lr=2"], "cannot be combined"),
        ([], ["algorithm.lr"], "expected KEY=VALUE words"),
    ],
)
def test_a_malformed_sweep_is_named(grid, sets, error):
    with pytest.raises(sweep.SweepError, match=error):
        sweep.configurations(grid, sets)


def test_the_experiment_files_grid_sets_and_seeds_are_the_command_lines_sweep():
    exp = config.loads(GRID_IN_THE_FILE)
    grid, sets, seeds = sweep.from_experiment(exp.slurm.sweep)
    assert seeds == [1, 2, 3] and sets == []
    members = sweep.points(sweep.configurations(grid, sets), seeds)
    assert [m.path for m in members[::3]] == [
        "algorithm.lr=0.001+model.hidden_sizes=_64_64_/seed-1",
        "algorithm.lr=0.001+model.hidden_sizes=_32_/seed-1",
        "algorithm.lr=0.0001+model.hidden_sizes=_64_64_/seed-1",
        "algorithm.lr=0.0001+model.hidden_sizes=_32_/seed-1",
    ]
    built = sweep.member_experiments(exp, members)
    assert built[3].algorithm.lr == 1e-3 and built[3].model.hidden_sizes == (32,) and built[3].seed == 1
    assert built[-1].slurm.sweep.grid == {} and built[-1].slurm.sweep.seeds == ()  # a member is one run
    listed = config.loads(
        GRID_IN_THE_FILE.replace(
            "grid: {algorithm.lr: [1.0e-3, 1.0e-4], model.hidden_sizes: [[64, 64], [32]]}",
            "sets: [{algorithm.lr: 1.0e-3, algorithm.epochs: 8}, {model.hidden_sizes: [32, 32]}]",
        )
    )
    grid, sets, _ = sweep.from_experiment(listed.slurm.sweep)
    assert sweep.configurations(grid, sets) == [
        ("algorithm.lr=0.001", "algorithm.epochs=8"),
        ("model.hidden_sizes=[32,32]",),
    ]


def test_a_sweep_in_the_file_is_checked_at_load_naming_its_key():
    with pytest.raises(config.ConfigError, match=r"slurm\.sweep\.grid\.algorithm\.lr: must be a list"):
        config.loads(GRID_IN_THE_FILE.replace("[1.0e-3, 1.0e-4]", "1.0e-3"))
    with pytest.raises(config.ConfigError, match=r"slurm\.sweep\.seeds: must be distinct"):
        config.loads(GRID_IN_THE_FILE.replace("seeds: [1, 2, 3]", "seeds: [1, 1]"))


def test_members_whose_directories_would_collide_are_refused():
    with pytest.raises(sweep.SweepError, match="share the run directory"):
        sweep.points(sweep.configurations(["model.hidden_sizes=[64],(64)"], []), [1])


def test_a_member_with_a_bad_override_stops_the_sweep_before_any_directory(tmp_path, capsys):
    code = main(
        [
            str(ROOT / "experiments" / "cartpole_ppo.yaml"),
            "--sweep",
            "algorithm.lr=1e-3,-1",
            "--run-dir",
            str(tmp_path / "sweep"),
        ]
    )
    assert code == 2 and "algorithm.lr" in capsys.readouterr().err
    assert not (tmp_path / "sweep").exists()


@pytest.mark.e2e
def test_a_local_grid_sweep_runs_every_member_in_its_own_directory_and_status_reads_them_all(tmp_path):
    sweep_dir = tmp_path / "sweep"
    proc = srl(
        ROOT / "experiments" / "cartpole_ppo.yaml",
        "--sweep",
        "algorithm.lr=1e-3,3e-4",
        "--seeds",
        "1,2",
        "--run-dir",
        sweep_dir,
        "stop.target_return=null",
        "stop.env_frames=4096",
        "monitor.status_interval=1",
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    members = json.loads((sweep_dir / "sweep.json").read_text())["members"]
    assert [(m["config"], m["seed"]) for m in members] == [
        (f"algorithm.lr={lr}", seed) for lr in ("1e-3", "3e-4") for seed in (1, 2)
    ]
    for m in members:
        assert m["run_dir"] == str(sweep_dir / m["config"] / f"seed-{m['seed']}")
        exp = config.load(f"{m['run_dir']}/experiment.yaml")  # each member's own resolved experiment
        assert exp.seed == m["seed"] and exp.algorithm.lr == float(m["overrides"][0].split("=")[1])
        summary = json.loads((sweep_dir / m["config"] / f"seed-{m['seed']}" / "summary.json").read_text())
        assert summary["status"] == "succeeded" and summary["frames_consumed"] >= 4096
    status = srl("status", sweep_dir, timeout=60)
    assert status.returncode == 0
    assert re.findall(r"== (\S+) seed (\d): (\w+)", status.stdout) == [
        (m["config"], str(m["seed"]), "completed") for m in members
    ]
    report = subprocess.run(
        [script("srl-trace"), "report", str(sweep_dir), "--reps", "200"], capture_output=True, text=True, timeout=120
    )  # (the statistics themselves: tests/test_report.py)
    assert report.returncode == 0, report.stderr
    assert "2 configurations, 4 runs (seeds 1, 2) on CartPole-v1" in report.stdout
    assert (sweep_dir / "report" / "profiles.png").exists()
