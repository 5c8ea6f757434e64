"""The envpool backend: envpool's C++ implementations of gymnasium ids, for actors that want the fastest
env stepping (`pip install -e '.[envpool]'`). Atari ids take the same preprocessing settings as the
gymnasium path (env.atari), so the backend changes speed, not the task.

What envpool does like gymnasium's SyncVectorEnv (autoreset NEXT_STEP), checked step by step against it
(tests/test_backend_learning.py): the same dynamics (an envpool Acrobot step from a state agrees with
gymnasium's from that state to 1e-6), float32 observations in the same spaces, the same rewards (0 on
Acrobot's goal step; 1 on CartPole's last), truncation on the same step (500), and the same auto-reset:
the step after an episode ends ignores its action and returns the next episode's first observation, with
reward 0 and neither flag set. Actors (handlers/ring.py, RingGroup) rely on exactly that.

What envpool does differently: its C++ envs report one `done` and a `trunc` that is set whenever the
time limit is reached, and its gymnasium adapter derives `terminated = done & ~trunc`. An episode that
really terminates on its last allowed step (the pole falls, Acrobot reaches the goal, on step 500) is
therefore reported as truncated only, where gymnasium says terminated (and truncated). The actor would
then bootstrap that step's return from the value of a terminal state instead of 0. envpool keeps no
separate record of it (its `discount` is 0 at every episode end), so `EndOfEpisode` below recomputes the
task's own termination condition from the final observation, on the steps envpool marks truncated only,
for the ids it knows (TERMINAL); other ids keep envpool's flags (documented, not corrected).
"""

from __future__ import annotations

import importlib.util
import warnings
from typing import Any, cast

import numpy as np
from gymnasium.vector import VectorEnv, VectorWrapper

# envpool seeds at creation (make_pool passes the seed); the actors' reset(seed=...) is the same seed again
warnings.filterwarnings("ignore", message="EnvPool seeds are fixed when the environment is created")


# ids whose envpool implementation is the same task as gymnasium's, shown by tests/test_envs.py's parity
# test (fixed and random policies: episode lengths, returns, observation statistics): the only ones
# env.backend auto hands to envpool. env.backend: envpool serves any id envpool has.
SAME_TASK = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0")


def _acrobot_at_goal(obs: np.ndarray) -> np.ndarray:
    """gymnasium's AcrobotEnv._terminal: -cos(t1) - cos(t1 + t2) > 1, from (cos t1, sin t1, cos t2, sin t2, ...)."""
    obs = obs.astype(np.float64)
    cos_sum = obs[:, 0] * obs[:, 2] - obs[:, 1] * obs[:, 3]
    return -obs[:, 0] - cos_sum > 1.0


def _cartpole_fallen(obs: np.ndarray) -> np.ndarray:
    """gymnasium's CartPoleEnv: the cart beyond 2.4 or the pole beyond 12 degrees."""
    return (np.abs(obs[:, 0]) > 2.4) | (np.abs(obs[:, 2]) > 12 * 2 * np.pi / 360)


def _mountain_car_at_goal(obs: np.ndarray) -> np.ndarray:
    """gymnasium's MountainCarEnv (goal_velocity 0): position >= 0.5 and velocity >= 0."""
    return (obs[:, 0] >= 0.5) & (obs[:, 1] >= 0.0)


# the task's own termination condition, from a batch of final observations: what envpool's flags lose when
# an episode terminates on the step its time limit ends it
TERMINAL = {"CartPole-v1": _cartpole_fallen, "Acrobot-v1": _acrobot_at_goal, "MountainCar-v0": _mountain_car_at_goal}


class EndOfEpisode(VectorWrapper):
    """An envpool group whose `terminated` is gymnasium's: set also where an episode terminates on the step
    its time limit truncates it (envpool says truncated only). Everything else passes through unchanged."""

    def __init__(self, env, terminal) -> None:
        super().__init__(env)
        self.terminal = terminal

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        return self.env.reset(seed=seed, options=options)

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        truncated = np.asarray(truncated, bool)
        if truncated.any():
            terminated = np.asarray(terminated, bool) | (truncated & self.terminal(np.asarray(obs)))
        return obs, rewards, terminated, truncated, infos


def task_id(env_id: str) -> str:
    """envpool names Atari games without the ALE/ namespace: ALE/Pong-v5 -> Pong-v5."""
    return env_id.removeprefix("ALE/")


def unavailable(env_cfg) -> str | None:
    """Why envpool cannot serve this env (None when it can)."""
    if importlib.util.find_spec("envpool") is None:
        return "envpool is not installed (pip install -e '.[envpool]')"
    import envpool

    if task_id(env_cfg.id) not in envpool.list_all_envs():
        return f"envpool has no {task_id(env_cfg.id)!r}"
    return None


def make_pool(env_cfg, num_envs: int, seed: int) -> VectorEnv:
    import envpool

    kwargs = dict(env_cfg.kwargs)
    atari = env_cfg.atari
    if atari is not None:
        kwargs = {
            "repeat_action_probability": 0.25 if env_cfg.id.endswith("-v5") else 0.0,  # v5: sticky actions
            "frame_skip": atari.frame_skip,
            "noop_max": atari.noop_max,
            "img_height": atari.screen_size,
            "img_width": atari.screen_size,
            "stack_num": atari.frame_stack,
            "episodic_life": atari.terminal_on_life_loss,
            "reward_clip": False,
            "use_fire_reset": False,
            **kwargs,
        }
    # (a gymnasium VectorEnv, which envpool's types do not say)
    envs = cast(
        VectorEnv, envpool.make_gymnasium(task_id(env_cfg.id), num_envs=num_envs, num_threads=1, seed=seed, **kwargs)
    )
    terminal = TERMINAL.get(env_cfg.id)
    return envs if terminal is None else EndOfEpisode(envs, terminal)
