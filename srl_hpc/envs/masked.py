"""Partially observed tasks: an env with some observation entries removed, so that one observation does not
tell the state and a policy needs memory (model.rnn) to act well.

`srl_hpc/CartPoleNoVelocity-v1` is CartPole-v1 that shows the cart position and the pole angle only: the
velocities must be inferred from how they change. A feed-forward policy sees one frame and cannot tell
which way the pole is falling.
"""

from __future__ import annotations

from typing import cast

import gymnasium
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class KeepEntries(gymnasium.ObservationWrapper):
    """Only the observation entries at `keep` (of a 1-D Box)."""

    def __init__(self, env: gymnasium.Env, keep: tuple[int, ...]) -> None:
        super().__init__(env)
        self.keep = np.asarray(keep)
        space = cast(gymnasium.spaces.Box, env.observation_space)
        self.observation_space = gymnasium.spaces.Box(space.low[self.keep], space.high[self.keep], dtype=space.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[self.keep]


def cartpole_no_velocity(**kwargs) -> gymnasium.Env:
    """CartPole's cart position and pole angle (entries 0 and 2), without their velocities (1 and 3)."""
    return KeepEntries(CartPoleEnv(**kwargs), keep=(0, 2))
