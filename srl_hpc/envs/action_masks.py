"""Action masks from an env's info: some envs say which actions are legal in `info["action_mask"]` (gymnasium's
Taxi) rather than in the observation. With `env.action_mask_from_info`, MaskFromInfo moves the mask into a
Dict observation, {"observation": the env's own, "action_mask": the mask}: PettingZoo's convention, the
one the message contract (srl_hpc/streams/contract.py) and the models read, so the policy never chooses
a masked action."""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium
import numpy as np


class MaskFromInfo(gymnasium.Wrapper):
    def __init__(self, env: gymnasium.Env) -> None:
        super().__init__(env)
        space = env.action_space
        if isinstance(space, gymnasium.spaces.Discrete):
            width = int(space.n)
        elif isinstance(space, gymnasium.spaces.MultiDiscrete):
            width = int(space.nvec.sum())
        else:
            raise ValueError(f"env.action_mask_from_info: a mask needs Discrete or MultiDiscrete actions, not {space}")
        self.observation_space = gymnasium.spaces.Dict(
            {"observation": env.observation_space, "action_mask": gymnasium.spaces.Box(0, 1, (width,), np.int8)}
        )

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        return self._with_mask(obs, info), info

    def step(self, action: Any) -> tuple[dict[str, Any], SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._with_mask(obs, info), reward, terminated, truncated, info

    def _with_mask(self, obs, info: dict) -> dict:
        if "action_mask" not in info:
            raise ValueError("env.action_mask_from_info is set, but the env's info has no 'action_mask'")
        return {"observation": obs, "action_mask": np.asarray(info["action_mask"], np.int8)}
