"""Any task end to end, with real workers: Box actions (Pendulum), MultiDiscrete actions, Dict observations
and action masks (tic-tac-toe, whose env refuses a masked move: a worker that sent one would fail the run),
locally and as one het job on the project's local Slurm."""

import json
import re

import numpy as np
import pytest

from conftest import ROOT, srl
from srl_hpc.envs.tictactoe import TicTacToe

EXPERIMENTS = ROOT / "experiments"


def launch(name: str, run_dir, *overrides: str, slurm: bool = False, timeout: int = 300) -> dict:
    """A shipped experiment with `overrides` to its end; its summary, once it succeeded with every frame counted."""
    sets = [arg for override in overrides for arg in ("--set", override)]
    mode = ["--slurm", "--follow"] if slurm else []
    proc = srl(EXPERIMENTS / f"{name}.yaml", *mode, "--run-dir", run_dir, *sets, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "succeeded", summary
    assert (
        summary["frames_sent"] == summary["frames_received"] == summary["frames_consumed"] + summary["frames_dropped"]
    )
    return summary


@pytest.mark.e2e
def test_box_actions_learn_pendulum_and_greedy_evaluation_and_enjoy_play_them(tmp_path):
    run_dir = tmp_path / "run"
    summary = launch(
        "pendulum_ppo",
        run_dir,
        "stop.target_return=null",
        "stop.target_eval_return=-400",
        "stop.wall_time=240",
        "workers.eval.count=1",
        "workers.eval.interval=5",
        "workers.eval.episodes=4",
    )
    assert summary["reason"].startswith("evaluation target reached"), summary["reason"]  # random play: about -1200
    proc = srl("enjoy", run_dir, "--episodes", "3", "--greedy", timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    returns = [float(r) for r in re.findall(r"episode \d+: return (-?[\d.]+)", proc.stdout)]
    assert len(returns) == 3 and np.mean(returns) > -800, proc.stdout


@pytest.mark.e2e
def test_multi_discrete_actions_learn_cartpole(tmp_path):
    summary = launch("cartpole_multidiscrete_ppo", tmp_path / "run", "stop.target_return=200", "stop.wall_time=150")
    assert summary["reason"].startswith("target reached"), summary["reason"]


@pytest.mark.e2e
def test_dict_observations_learn_cartpole(tmp_path):
    summary = launch("cartpole_dict_ppo", tmp_path / "run", "stop.target_return=200", "stop.wall_time=150")
    assert summary["reason"].startswith("target reached"), summary["reason"]


@pytest.mark.e2e
def test_masked_actions_learn_tictactoe_and_no_masked_move_reaches_the_env(tmp_path):
    summary = launch(
        "tictactoe_masked_ppo",
        tmp_path / "run",
        "stop.target_return=0.8",
        "stop.return_window=200",
        "stop.wall_time=150",
    )
    assert summary["reason"].startswith("target reached"), summary["reason"]  # random play: about 0.3


def test_the_tictactoe_env_refuses_a_masked_move():
    env = TicTacToe()
    obs, _ = env.reset(seed=0)
    obs, *_ = env.step(4)  # the centre; the opponent answers somewhere else
    taken = [a for a in range(9) if not obs["action_mask"][a]]
    assert 4 in taken and len(taken) == 2
    with pytest.raises(AssertionError, match="action 4 is masked"):
        env.step(4)


@pytest.mark.slurm
def test_dict_observations_with_an_action_mask_train_as_one_het_job(tmp_path):
    run_dir = tmp_path / "run"
    summary = launch(
        "tictactoe_masked_ppo",
        run_dir,
        "stop.target_return=0.6",
        "stop.return_window=200",
        "stop.wall_time=120",
        slurm=True,
        timeout=400,
    )
    assert summary["reason"].startswith("target reached"), summary["reason"]
    table = json.loads((run_dir / "workers.json").read_text())
    assert len({w["node"] for w in table.values()}) > 1  # across the local cluster's hosts


def test_a_mask_in_the_envs_info_joins_the_observation_and_only_legal_moves_are_chosen():
    import gymnasium
    import torch

    from srl_hpc import config
    from srl_hpc.algorithms import ppo
    from srl_hpc.envs.backends import make_env, spaces
    from srl_hpc.models.building import build_model
    from srl_hpc.streams.contract import ObsContract

    exp = config.load(EXPERIMENTS / "taxi_masked_ppo.yaml")
    env = make_env(exp.env)
    obs, info = env.reset(seed=3)
    assert np.array_equal(obs["action_mask"], info["action_mask"]) and obs["observation"] == env.unwrapped.s
    obs_space, action_space = spaces(exp.env)
    assert isinstance(obs_space, gymnasium.spaces.Dict) and set(obs_space.spaces) == {"observation", "action_mask"}
    model, contract = build_model(exp, obs_space, action_space), ObsContract(obs_space)
    generator = torch.Generator().manual_seed(0)
    for _ in range(200):  # an untrained policy, sampling: every action it picks is legal
        packed = contract.pack({k: np.asarray(v)[None] for k, v in obs.items()})
        with torch.inference_mode():
            action = int(ppo.act(model, torch.from_numpy(packed), {}, generator)["actions"][0])
        assert obs["action_mask"][action] == 1
        obs, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            obs, _ = env.reset()


@pytest.mark.parametrize(
    "names, overrides",
    [
        (("tictactoe_masked_ppo",), ("workers.placement=impala", "workers.policy.count=0")),
        (("pendulum_ppo",), ("workers.placement=seed", "workers.policy.count=0")),
        (("pendulum_ppo", "tictactoe_masked_ppo"), ("workers.actor.inference_transport=zmq",)),
    ],
    ids=["impala", "seed", "zmq"],
)  # (the srl placement over shared memory: the tests above)
@pytest.mark.e2e
def test_box_actions_and_masked_dict_observations_run_in_every_placement_and_transport(tmp_path, names, overrides):
    for name in names:
        summary = launch(name, tmp_path / name, *overrides, "stop.target_return=null", "stop.wall_time=6")
        assert summary["policy_version"] > 1 and summary["episodes"] > 0, name


@pytest.mark.e2e
def test_data_parallel_trainers_merge_their_observation_statistics_and_stay_identical(tmp_path):
    import torch

    from srl_hpc.trace.reader import read_run

    run_dir = tmp_path / "run"
    summary = launch("pendulum_ppo", run_dir, "workers.trainer.count=2", "stop.target_return=null", "stop.wall_time=10")
    trace = {w.name: w for w in read_run(run_dir).workers}
    checksums = [trace[t].table("final_parameters")["checksum"][0] for t in ("trainer/0", "trainer/1")]
    assert checksums[0] == checksums[1]  # weights and statistics, bit for bit
    model = torch.load(run_dir / "checkpoints" / "latest.pt", map_location="cpu")["model"]
    # every observation either trainer trained on, once: the statistics of all the data
    assert (
        model["torso.normalize.count"].item()
        == model["critic_torso.normalize.count"].item()
        == summary["frames_consumed"]
    )
