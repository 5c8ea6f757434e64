"""The envpool backend shows an actor what the sync backend (gymnasium's SyncVectorEnv, autoreset NEXT_STEP)
shows it, around episode ends too, and the same experiment learns under either.

What an actor reads from a step (handlers/actor.py, RingGroup.observe): the observations; the rewards;
`terminated`, which zeroes the step's bootstrap value; `terminated | truncated`, which makes the next step
an auto-reset step (valid=False, its reward and action ignored)."""

import importlib.util
import json

import gymnasium
import numpy as np
import pytest

from conftest import ROOT, srl
from srl_hpc import config
from srl_hpc.envs.backends import make_env_group

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("envpool") is None,
    reason="envpool is not installed (pip install '.[envpool]'; make test-install does it)",
)

# fixed policies that end episodes by termination: CartPole always pushes left (the pole falls in ~10 steps),
# Acrobot pumps energy with the second joint's velocity (the goal in ~70-110 steps)
ENDING_POLICIES = {
    "CartPole-v1": lambda obs: np.zeros(len(obs), np.int64),
    "Acrobot-v1": lambda obs: np.where(obs[:, 5] > 0, 2, 0).astype(np.int64),
}


def group(env_id: str, backend: str, n: int, seed: int, **kwargs):
    envs = make_env_group(config.EnvConfig(id=env_id, backend=backend, kwargs=kwargs), n, seed)
    obs, _ = envs.reset(seed=seed)
    return envs, obs


def first_terminations(env_id: str, backend: str, n: int, seed: int) -> np.ndarray:
    """The step (1-based) on which each env's first episode terminates under ENDING_POLICIES."""
    envs, obs = group(env_id, backend, n, seed)
    ends = np.zeros(n, np.int64)
    for t in range(1, 500):
        obs, _, terminated, truncated, _ = envs.step(ENDING_POLICIES[env_id](obs))
        assert not truncated.any()
        ends[(ends == 0) & terminated] = t
        if ends.all():
            break
    envs.close()
    assert ends.all()
    return ends


@pytest.mark.parametrize("backend", ["sync", "envpool"])
@pytest.mark.parametrize("env_id", sorted(ENDING_POLICIES))
@pytest.mark.slow
def test_an_episode_that_terminates_on_its_last_allowed_step_is_terminated(env_id, backend):
    """The time limit set to the step an env's episode terminates on: that step says terminated (its return
    is not bootstrapped) and truncated, as gymnasium's TimeLimit does. envpool alone said truncated only."""
    n, seed = 4, 3
    ends = first_terminations(env_id, backend, n, seed)
    limit = int(ends.max())
    envs, obs = group(env_id, backend, n, seed, max_episode_steps=limit)  # same seed: the same episodes
    for t in range(1, limit + 1):
        obs, reward, terminated, truncated, _ = envs.step(ENDING_POLICIES[env_id](obs))
        alive = ends >= t  # envs that terminated before the limit are in later episodes: not compared
        assert (terminated[alive] == (ends[alive] == t)).all(), (t, terminated, ends)
        assert (truncated[alive] == (t == limit)).all(), (t, truncated)
    assert terminated[ends == limit].all() and truncated[ends == limit].all()
    obs, reward, terminated, truncated, _ = envs.step(ENDING_POLICIES[env_id](obs))  # the auto-reset step
    assert reward[ends == limit].tolist() == [0.0] * int((ends == limit).sum())
    assert not (terminated | truncated)[ends == limit].any()
    envs.close()


def actor_view(env_id: str, backend: str, actions: np.ndarray, seed: int = 0) -> dict:
    """What an actor records over `actions` (steps x envs): per step the rewards of valid steps, which steps
    are valid, which bootstrap (not terminated), which end an episode; the observation dtype; and the
    observations on auto-reset steps (the first of each next episode)."""
    envs, obs = group(env_id, backend, actions.shape[1], seed)
    resetting = np.zeros(actions.shape[1], bool)
    view = {"dtype": obs.dtype, "valid": [], "rewards": [], "ends": [], "bootstraps": [], "first_obs": [obs]}
    for a in actions:
        obs, reward, terminated, truncated, _ = envs.step(a)
        view["valid"].append(~resetting)
        view["rewards"].append(np.where(resetting, 0.0, reward))
        view["ends"].append(terminated | truncated)
        view["bootstraps"].append(~np.asarray(terminated, bool))
        if resetting.any():
            view["first_obs"].append(obs[resetting])
        assert obs.dtype == view["dtype"]
        resetting = terminated | truncated
    envs.close()
    return {k: np.concatenate(v) if k == "first_obs" else v if k == "dtype" else np.array(v) for k, v in view.items()}


@pytest.mark.slow
def test_acrobot_truncation_at_500_and_its_auto_reset_look_the_same_under_envpool_and_sync():
    """No torque: no Acrobot episode reaches the goal, every one is truncated on step 500, bootstrapped, and
    the next step is the reset step of both backends (reward 0, a new episode near rest)."""
    actions = np.ones((1002, 4), np.int64)  # two whole episodes and the second's reset step
    sync, pool = actor_view("Acrobot-v1", "sync", actions), actor_view("Acrobot-v1", "envpool", actions)
    for view in (sync, pool):
        assert view["dtype"] == np.float32
        assert np.flatnonzero(view["ends"].any(1)).tolist() == [499, 1000]  # the 500th step of each episode
        assert view["ends"][[499, 1000]].all() and view["bootstraps"].all()  # truncated, never terminated
        assert (~view["valid"]).sum(0).tolist() == [2] * 4 and not view["valid"][[500, 1001]].any()
        assert view["rewards"].sum(0).tolist() == [-1000.0] * 4  # -1 for each of the 1000 valid steps
        first = view["first_obs"]  # cos t1, sin t1, cos t2, sin t2, t1', t2' of states drawn in [-0.1, 0.1]
        assert len(first) == 12 and (first[:, [0, 2]] > np.cos(0.1) - 1e-6).all()
        assert (np.abs(first[:, 4:]) <= 0.1).all()
    for key in ("valid", "rewards", "ends", "bootstraps"):
        assert np.array_equal(sync[key], pool[key]), key


@pytest.mark.slow
def test_each_envpool_acrobot_step_is_gymnasiums_step_from_the_same_state():
    """Step by step, over terminations and auto-resets: from the state envpool's observation encodes,
    gymnasium's Acrobot with the same action reaches the same observation, reward and termination."""
    envs, obs = group("Acrobot-v1", "envpool", 2, seed=3)
    reference = gymnasium.make("Acrobot-v1").unwrapped
    reference.reset(seed=0)
    rng = np.random.default_rng(0)
    resetting, compared, goals = np.zeros(2, bool), 0, 0
    for _ in range(1500):
        actions = np.where(rng.random(2) < 0.8, ENDING_POLICIES["Acrobot-v1"](obs), rng.integers(0, 3, 2))
        expected = []
        for i in range(2):
            reference.state = np.array(
                [np.arctan2(obs[i, 1], obs[i, 0]), np.arctan2(obs[i, 3], obs[i, 2]), obs[i, 4], obs[i, 5]], np.float64
            )
            expected.append(reference.step(int(actions[i]))[:3])
        next_obs, reward, terminated, truncated, _ = envs.step(actions)
        for i in np.flatnonzero(~resetting & ~truncated):
            e_obs, e_reward, e_terminated = expected[i]
            assert np.abs(next_obs[i] - e_obs).max() < 1e-4 and reward[i] == e_reward and terminated[i] == e_terminated
            compared += 1
            goals += int(e_terminated)
        resetting, obs = terminated | truncated, next_obs
    envs.close()
    assert compared > 2900 and goals >= 20


# Learning under identical settings: the shipped Acrobot experiment, with only env.backend changed. Here
# (2 cores) each reached -100 within ~0.1M env frames; the bound leaves room for unlucky seeds.
ACROBOT_FRAME_BOUND = 600_000


@pytest.mark.parametrize("backend", ["sync", "envpool"])
@pytest.mark.e2e
def test_acrobot_reaches_its_target_within_a_frame_bound_under_each_backend(tmp_path, backend):
    run_dir = tmp_path / "run"
    proc = srl(
        ROOT / "experiments" / "acrobot_ppo.yaml",
        "--run-dir",
        run_dir,
        "--set",
        f"env.backend={backend}",
        "--set",
        f"stop.env_frames={ACROBOT_FRAME_BOUND}",
        "--set",
        "stop.wall_time=150",
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["reason"].startswith("target reached"), summary
    assert summary["mean_return_at_stop"] >= -100 and summary["env_frames"] <= ACROBOT_FRAME_BOUND + 20_000
    assert f"env.backend {backend}: {backend}" in (run_dir / "logs" / "actor-0.log").read_text()
