"""A worked example of plugging your own code into srl-hpc by dotted path (see docs/architecture.md).

    env:   {id: "my_plugins:make_corridor", kwargs: {length: 8}}
    model: {name: "my_plugins:ResidualMLP", kwargs: {width: 64}}

The module must be importable by every worker: on PYTHONPATH (as `experiments/user_plugins.yaml` is run
by the tests: PYTHONPATH=examples) or installed into the environment the workers use.
"""

from __future__ import annotations

import gymnasium
import numpy as np
import torch
from torch import nn


class Corridor(gymnasium.Env):
    """Walk right to the end of a corridor: +1 there, -0.01 per step; the observation is a one-hot position."""

    def __init__(self, length: int = 8):
        self.length = length
        self.observation_space = gymnasium.spaces.Box(0.0, 1.0, (length,), np.float32)
        self.action_space = gymnasium.spaces.Discrete(2)  # 0: left, 1: right
        self.position = 0

    def _obs(self):
        obs = np.zeros(self.length, np.float32)
        obs[self.position] = 1.0
        return obs

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.position = 0
        return self._obs(), {}

    def step(self, action):
        self.position = max(0, self.position + (1 if action == 1 else -1))
        done = self.position == self.length - 1
        return self._obs(), 1.0 if done else -0.01, done, False, {}


def make_corridor(length: int = 8) -> gymnasium.Env:
    """An env factory: takes env.kwargs, returns a gymnasium.Env (wrappers included)."""
    return gymnasium.wrappers.TimeLimit(Corridor(length), max_episode_steps=4 * length)


class ResidualMLP(nn.Module):
    """A model for PPO (the actor_critic head): forward(obs) -> (action logits, state values)."""

    def __init__(self, obs_space: gymnasium.Space, action_space: gymnasium.Space, width: int = 64):
        super().__init__()
        self.inp = nn.Linear(int(np.prod(obs_space.shape)), width)
        self.block = nn.Sequential(nn.Tanh(), nn.Linear(width, width), nn.Tanh())
        self.logits = nn.Linear(width, int(action_space.n))
        self.value = nn.Linear(width, 1)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.inp(obs.to(self.inp.weight.dtype).flatten(1))
        x = x + self.block(x)
        return self.logits(x), self.value(x).squeeze(-1)
