"""Tasks with the action and observation structure of larger ones, cheap enough to learn in a test:

- `srl_hpc/CartPoleMultiDiscrete-v1`: CartPole-v1 with MultiDiscrete([2, 3]) actions, a direction and a
  force (half, full, one and a half times CartPole's). Two action heads, as in hide-and-seek's movement
  and grab/lock choices.
- `srl_hpc/CartPoleDict-v1`: CartPole-v1 whose observation is a Dict, the cart's position and velocity
  apart from the pole's angle and angular velocity: one encoder per key (entity observations).
- `srl_hpc/TicTacToe-v0` (tictactoe.py): a two-player board game against a fixed random opponent, with
  an action mask in the observation (PettingZoo's convention).
"""

from __future__ import annotations

from typing import Any, SupportsFloat, cast

import gymnasium
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

FORCES = (0.5, 1.0, 1.5)  # multiples of CartPole's force_mag


class MultiDiscreteCartPole(gymnasium.Wrapper):
    """Action (direction 0/1, force 0/1/2): pushed left or right with FORCES[force] x CartPole's force."""

    def __init__(self, env: CartPoleEnv) -> None:
        super().__init__(env)
        self.action_space = gymnasium.spaces.MultiDiscrete([2, len(FORCES)])
        self.base_force = cast(CartPoleEnv, env.unwrapped).force_mag

    def step(self, action: np.ndarray) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        direction, force = (int(a) for a in action)
        cast(CartPoleEnv, self.env.unwrapped).force_mag = self.base_force * FORCES[force]
        return self.env.step(direction)


class DictCartPole(gymnasium.ObservationWrapper):
    """{"cart": (x, x_dot), "pole": (theta, theta_dot)}."""

    def __init__(self, env: CartPoleEnv) -> None:
        super().__init__(env)
        low, high = (
            cast(gymnasium.spaces.Box, env.observation_space).low,
            cast(gymnasium.spaces.Box, env.observation_space).high,
        )
        self.observation_space = gymnasium.spaces.Dict(
            {
                "cart": gymnasium.spaces.Box(low[:2], high[:2], dtype=np.float32),
                "pole": gymnasium.spaces.Box(low[2:], high[2:], dtype=np.float32),
            }
        )

    def observation(self, observation: np.ndarray) -> dict[str, np.ndarray]:
        return {"cart": observation[:2], "pole": observation[2:]}


def cartpole_multi_discrete(**kwargs) -> gymnasium.Env:
    return MultiDiscreteCartPole(CartPoleEnv(**kwargs))


def cartpole_dict(**kwargs) -> gymnasium.Env:
    return DictCartPole(CartPoleEnv(**kwargs))
