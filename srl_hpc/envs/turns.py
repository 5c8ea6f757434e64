"""Turn-taking games (PettingZoo's AEC classic games, with action masks) as multi-agent envs of the parallel
API, so that actors play them like any other (srl_hpc/envs/agents.py: a row per seat).

In a turn-taking game one player moves at a time. Here every player acts at every step: the one whose turn it
is plays a move, every other one plays the extra last action, "pass", which its action mask makes its only
legal one (a masked policy picks it with probability 1, so it costs nothing in the loss). Each seat's row then
has a step for every move of the game, its own and the others', with the reward of the game's end on the step
the game ends, whoever moved; advantages and values need no gaps. A step is one move of the game.

A move the mask forbids is a bug in whoever chose it, so the env refuses it (AssertionError) instead of
letting the game end as a loss.
"""

from __future__ import annotations

import gymnasium
import numpy as np


class TurnTaking:
    """A PettingZoo AEC game of players who take turns, as a parallel env whose players all act every step."""

    metadata: dict[str, list[str]] = {"render_modes": []}

    def __init__(self, game) -> None:
        self.game = game
        game.reset()
        self.possible_agents = list(game.possible_agents)
        self.agents: list[str] = []
        first = self.possible_agents[0]
        self.moves = int(game.action_space(first).n)
        self.pass_action = self.moves  # the action of every player whose turn it is not
        self._observation_space = gymnasium.spaces.Dict(
            {
                "observation": game.observation_space(first)["observation"],
                "action_mask": gymnasium.spaces.Box(0, 1, (self.moves + 1,), np.int8),
            }
        )
        self._action_space = gymnasium.spaces.Discrete(self.moves + 1)

    def observation_space(self, agent: str) -> gymnasium.spaces.Dict:
        return self._observation_space

    def action_space(self, agent: str) -> gymnasium.spaces.Discrete:
        return self._action_space

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict[str, dict]]:
        self.game.reset(seed=seed)
        self.agents = list(self.possible_agents)
        return self._observations(False), {a: {} for a in self.agents}

    def step(self, actions: dict) -> tuple[dict, dict[str, float], dict[str, bool], dict[str, bool], dict[str, dict]]:
        mover = self.game.agent_selection
        for agent in self.agents:
            if agent != mover:
                assert int(actions[agent]) == self.pass_action, f"{agent} moved out of turn ({actions[agent]})"
        move = int(actions[mover])
        mask = self.game.observe(mover)["action_mask"]
        assert move < self.moves and mask[move] == 1, f"move {move} of {mover} is masked (mask {mask.tolist()})"
        self.game.step(move)
        over = any(self.game.terminations.values()) or any(self.game.truncations.values())
        agents = self.agents
        rewards = {a: float(self.game.rewards[a]) for a in agents}
        terminated = {a: bool(self.game.terminations[a]) for a in agents}
        truncated = {a: bool(self.game.truncations[a]) and not terminated[a] for a in agents}
        observations = self._observations(over)
        if over:
            self.agents = []
        return observations, rewards, terminated, truncated, {a: {} for a in agents}

    def _observations(self, over: bool) -> dict:
        out = {}
        for agent in self.possible_agents:
            obs = self.game.observe(agent)
            mask = np.zeros(self.moves + 1, np.int8)
            if agent == self.game.agent_selection and not over:
                mask[: self.moves] = obs["action_mask"]
            else:
                mask[self.moves] = 1
            out[agent] = {"observation": np.asarray(obs["observation"], np.int8), "action_mask": mask}
        return out

    def close(self) -> None:
        self.game.close()


def play(env: TurnTaking, players: list, games: int, seed: int = 0) -> list[dict[str, float]]:
    """Play `games` games, seat i taken by players[i], a function (the mover's observation) -> move; returns
    each game's rewards by agent."""
    results = []
    for game in range(games):
        observations, _ = env.reset(seed=seed + game)
        while env.agents:
            mover = env.game.agent_selection
            actions = {a: env.pass_action for a in env.agents}
            actions[mover] = players[env.possible_agents.index(mover)](observations[mover])
            observations, rewards, *_ = env.step(actions)
        results.append(rewards)
    return results
