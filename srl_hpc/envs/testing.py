"""Environments that misbehave on purpose, to check a setup end to end: a crash, a slow step."""

from __future__ import annotations

import time
from typing import Any, SupportsFloat

import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class CrashAfter(CartPoleEnv):
    """CartPole that raises RuntimeError on its `crash_after`-th step (counted across episodes)."""

    def __init__(self, crash_after: int = 100, **kwargs) -> None:
        super().__init__(**kwargs)
        self.crash_after = crash_after
        self.steps = 0

    def step(self, action: int | np.ndarray) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        self.steps += 1
        if self.steps >= self.crash_after:
            raise RuntimeError(f"CrashAfter env crashed on purpose at step {self.steps}")
        return super().step(action)


class SlowStep(CartPoleEnv):
    """CartPole whose every step takes at least `step_seconds` (an env-bound workload)."""

    def __init__(self, step_seconds: float = 0.001, **kwargs) -> None:
        super().__init__(**kwargs)
        self.step_seconds = step_seconds

    def step(self, action: int | np.ndarray) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        time.sleep(self.step_seconds)
        return super().step(action)
