"""A task whose cost and size are knobs, for scale experiments: hundreds of actors on a few cores.

`Synthetic` steps in `step_seconds` of waiting (as if the env ran on a core of its own, which on a big
cluster it does: here hundreds of actors share two) plus `cpu_seconds` of busy work, and returns
`obs_size` float32 values. It is learnable, so that a run trains on something: the reward is 1 when the
action is the index of the largest of the first `n_actions` observation values.
"""

from __future__ import annotations

import time
from typing import Any, cast

import gymnasium
import numpy as np


class Synthetic(gymnasium.Env):
    def __init__(
        self,
        obs_size: int = 4,
        n_actions: int = 2,
        step_seconds: float = 0.0,
        cpu_seconds: float = 0.0,
        episode_length: int = 200,
    ) -> None:
        if obs_size < n_actions or n_actions < 2:
            raise ValueError(f"need obs_size >= n_actions >= 2, got obs_size {obs_size}, n_actions {n_actions}")
        self.observation_space = gymnasium.spaces.Box(-1.0, 1.0, (obs_size,), np.float32)
        self.action_space = gymnasium.spaces.Discrete(n_actions)
        self.step_seconds, self.cpu_seconds, self.episode_length = step_seconds, cpu_seconds, episode_length
        self.steps = 0
        self.obs = np.zeros(obs_size, np.float32)

    def _observe(self) -> np.ndarray:
        self.obs = self.np_random.uniform(-1.0, 1.0, self.observation_space.shape).astype(np.float32)
        return self.obs

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.steps = 0
        return self._observe(), {}

    def step(self, action: int | np.integer) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.step_seconds:
            time.sleep(self.step_seconds)
        if self.cpu_seconds:
            end = time.perf_counter() + self.cpu_seconds
            while time.perf_counter() < end:
                pass
        reward = float(int(action) == int(np.argmax(self.obs[: cast(gymnasium.spaces.Discrete, self.action_space).n])))
        self.steps += 1
        return self._observe(), reward, False, self.steps >= self.episode_length, {}
