"""`srl_hpc/TicTacToe-v0`: PettingZoo's tic-tac-toe as a single-agent gymnasium env against a fixed
opponent that plays a uniformly random legal move, for action masks.

The agent moves first. Its observation is PettingZoo's: {"observation": (3, 3, 2) int8 planes of its own
and the opponent's marks, "action_mask": (9,) int8, 1 where the square is free}. Reward +1 for a win, -1
for a loss, 0 for a draw, at the end. An action the mask forbids is a bug in whoever chose it, so the env
refuses it (AssertionError) instead of letting PettingZoo end the game as a loss.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np


class TicTacToe(gymnasium.Env):
    metadata = {"render_modes": []}

    def __init__(self) -> None:
        from pettingzoo.classic import tictactoe_v3  # pip install -e '.[multiagent]'

        self.game = tictactoe_v3.env()
        self.game.reset()
        self.me, self.opponent = self.game.possible_agents
        self.observation_space = gymnasium.spaces.Dict(
            {
                "observation": gymnasium.spaces.Box(0, 1, (3, 3, 2), np.int8),
                "action_mask": gymnasium.spaces.Box(0, 1, (9,), np.int8),
            }
        )
        self.action_space = gymnasium.spaces.Discrete(9)
        self.rng = np.random.default_rng()

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict[str, Any]]:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.game.reset(seed=seed)
        return self._observation(), {}

    def step(self, action: int | np.integer) -> tuple[dict, float, bool, bool, dict[str, Any]]:
        action = int(action)
        mask = self.game.observe(self.me)["action_mask"]
        assert mask[action] == 1, f"action {action} is masked (mask {mask.tolist()})"
        self.game.step(action)
        if not self._over():
            legal = np.flatnonzero(self.game.observe(self.opponent)["action_mask"])
            self.game.step(int(self.rng.choice(legal)))
        over = self._over()
        reward = float(self.game.rewards[self.me]) if over else 0.0
        return self._observation(), reward, over, False, {}

    def _over(self) -> bool:
        return any(self.game.terminations.values()) or any(self.game.truncations.values())

    def _observation(self) -> dict:
        obs = self.game.observe(self.me)
        return {
            "observation": np.asarray(obs["observation"], np.int8),
            "action_mask": np.asarray(obs["action_mask"], np.int8),
        }
