"""Multi-agent environments (PettingZoo's parallel API) as rows of one vector env.

Every (env, agent) pair is a row, env-major: the rows of env i are i*K .. i*K+K-1 for its K possible
agents. A policy shared by the agents then acts for all of them in one batch, and everything downstream
of the ring (inference requests and replies, segments, the trainer) sees rows as it sees single-agent
envs: each row is one agent's trajectory, with its own rewards and episode ends. Frames are agent steps.

Agents that are done while others play on, or absent, are masked, never trained on: after each step
(and reset) `infos["present"]` says which rows' agents act in the next step, and the actor marks the
steps of the others invalid, as it marks an auto-reset step. An env resets on the step after its last
agent is done (gymnasium's next-step auto-reset, like every backend here).

Any env with PettingZoo's parallel API works by dotted path (`env.id: "mpe2.simple_spread_v3:parallel_env"`,
its settings in env.kwargs); its agents must share one observation space and one action space (one
policy acts for all of them).

A centralised critic (MAPPO) reads the env's global state: with `global_state`, an env that provides one
(PettingZoo's `state()` and `state_space`) has it appended to every row's observation, so it travels with
the observations through the inference stream and segments; the model splits it off again.

Several policies (the experiment's `policies`) split the agents into teams: `TeamRows` gives each team rows
of its own (env-major over the team's agents), with the team's own observation and action spaces, and
steps the env once all teams' actions are in.
"""

from __future__ import annotations

import fnmatch
from typing import Any, cast

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space


def is_parallel_env(env) -> bool:
    """PettingZoo's parallel API: agents by name, spaces per agent, step() of dicts."""
    return hasattr(env, "possible_agents") and callable(getattr(env, "observation_space", None))


def state_size(env) -> int:
    """Floats of the env's own global state (PettingZoo's state() and state_space), or 0 if it has none."""
    space = getattr(env, "state_space", None)
    if isinstance(space, gymnasium.spaces.Box) and callable(getattr(env, "state", None)):
        return int(np.prod(space.shape))
    return 0


def assign_teams(agents: list[str], policies: dict[str, tuple[str, ...]]) -> dict[str, list[str]]:
    """policy -> its agents (in the env's order), by the policies' fnmatch patterns; every agent matches exactly
    one policy and every policy at least one agent, or the error names which does not."""
    teams = {
        name: [a for a in agents if any(fnmatch.fnmatchcase(a, p) for p in patterns)]
        for name, patterns in policies.items()
    }
    for agent in agents:
        owners = [name for name, members in teams.items() if agent in members]
        if len(owners) != 1:
            matches = "no policy" if not owners else "policies " + ", ".join(owners)
            raise ValueError(
                f"agent {agent!r} matches {matches} (policies: {dict(policies)}; the env's agents: {agents})"
            )
    for name, members in teams.items():
        if not members:
            raise ValueError(
                f"policy {name!r} matches none of the env's agents {agents} (patterns {list(policies[name])})"
            )
    return teams


class Team:
    """One policy's rows: its agents in every env, with their (shared) spaces; with `state_size`, each row's
    observation is the agent's, flattened, then the env's global state. A Dict observation (a turn-taking game's
    board and action mask) is kept as one array per key."""

    def __init__(self, env, agents: list[str], num_envs: int, state_size: int = 0) -> None:
        self.agents = agents
        first = agents[0]
        own, self.single_action_space = env.observation_space(first), env.action_space(first)
        for a in agents[1:]:
            if (env.observation_space(a), env.action_space(a)) != (own, self.single_action_space):
                raise ValueError(
                    f"agents {first!r} and {a!r} have different observation or action spaces: "
                    "one policy cannot act for both"
                )
        self.state_size = state_size
        self.single_observation_space = own
        if state_size:
            state = env.state_space
            self.single_observation_space = gymnasium.spaces.Box(
                np.concatenate([np.ravel(own.low), np.ravel(state.low)]),
                np.concatenate([np.ravel(own.high), np.ravel(state.high)]),
                dtype=np.float32,
            )
        self.k = len(agents)
        self.num_envs = num_envs * self.k  # rows
        space = self.single_observation_space
        if isinstance(space, gymnasium.spaces.Dict):
            if state_size:
                raise ValueError("a centralised critic's global state cannot be appended to Dict observations")
            self.obs: dict[str, np.ndarray] | np.ndarray = {
                key: np.zeros((self.num_envs, *cast(tuple[int, ...], s.shape)), s.dtype)
                for key, s in space.spaces.items()
            }
        else:
            self.obs = np.zeros((self.num_envs, *space.shape), space.dtype)

    def observations(self) -> dict[str, np.ndarray] | np.ndarray:
        """A copy of every row's observation."""
        return {k: v.copy() for k, v in self.obs.items()} if isinstance(self.obs, dict) else self.obs.copy()

    def place(self, i: int, observations: dict, state: np.ndarray | None = None) -> None:
        if isinstance(self.obs, dict):
            for key, rows in self.obs.items():
                rows = rows[i * self.k : (i + 1) * self.k]
                rows[:] = 0  # the rows of absent agents
                for k, agent in enumerate(self.agents):
                    if agent in observations:
                        rows[k] = observations[agent][key]
            return
        rows = self.obs[i * self.k : (i + 1) * self.k]
        rows[:] = 0  # the rows of absent agents
        for k, agent in enumerate(self.agents):
            if agent in observations:
                if self.state_size:
                    rows[k, : -self.state_size] = np.ravel(observations[agent])
                else:
                    rows[k] = observations[agent]
        if self.state_size:
            assert state is not None  # (TeamRows passes the env's state with a state_size)
            rows[:, -self.state_size :] = np.ravel(state)

    def present(self, envs: list) -> np.ndarray:
        return np.array([agent in env.agents for env in envs for agent in self.agents])


class TeamRows:
    """Parallel envs whose agents are split into teams, each acted for by its own policy: reset and step take and
    give one entry per team (observations, rewards, ends and `infos["present"]` of the team's rows)."""

    def __init__(self, envs: list, teams: list[list[str]], global_state: bool = False) -> None:
        self.envs = envs
        self.state_size = state_size(envs[0]) if global_state else 0  # 0: the env has no state() of its own
        self.teams = [Team(envs[0], agents, len(envs), self.state_size) for agents in teams]
        self._needs_reset = np.zeros(len(envs), bool)

    def _place(self, i: int, observations: dict) -> None:
        state = self.envs[i].state() if self.state_size else None
        for team in self.teams:
            team.place(i, observations, state)

    def reset(self, *, seed: int | None = None, options=None) -> list[tuple]:
        for i, env in enumerate(self.envs):
            observations, _ = env.reset(seed=None if seed is None else seed + i, options=options)
            self._place(i, observations)
        self._needs_reset[:] = False
        return [(team.observations(), {"present": team.present(self.envs)}) for team in self.teams]

    def step(self, actions: list) -> list[tuple]:
        rewards = [np.zeros(t.num_envs, np.float32) for t in self.teams]
        terminated = [np.zeros(t.num_envs, bool) for t in self.teams]
        truncated = [np.zeros(t.num_envs, bool) for t in self.teams]
        for i, env in enumerate(self.envs):
            if self._needs_reset[i]:
                observations, _ = env.reset()
                self._place(i, observations)
                self._needs_reset[i] = False
                continue
            acting = {
                a: actions[n][i * t.k + k]
                for n, t in enumerate(self.teams)
                for k, a in enumerate(t.agents)
                if a in env.agents
            }
            observations, reward, term, trunc, _ = env.step(acting)
            self._place(i, observations)
            for n, team in enumerate(self.teams):
                for k, agent in enumerate(team.agents):
                    if agent in acting:
                        row = i * team.k + k
                        rewards[n][row] = reward.get(agent, 0.0)
                        terminated[n][row] = bool(term.get(agent, False))
                        truncated[n][row] = bool(trunc.get(agent, False))
            self._needs_reset[i] = not env.agents
        return [
            (team.observations(), rewards[n], terminated[n], truncated[n], {"present": team.present(self.envs)})
            for n, team in enumerate(self.teams)
        ]

    def close(self, **kwargs) -> None:
        for env in self.envs:
            env.close()


class AgentRows(VectorEnv):
    """One policy for every agent: TeamRows with a single team, as a gymnasium VectorEnv."""

    def __init__(self, envs: list, global_state: bool = False) -> None:
        self.rows = TeamRows(envs, [list(envs[0].possible_agents)], global_state)
        (team,) = self.rows.teams
        self.envs, self.agents, self.k, self.num_envs = envs, team.agents, team.k, team.num_envs
        self.single_observation_space = team.single_observation_space
        self.single_action_space = team.single_action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray] | np.ndarray, dict[str, Any]]:
        return self.rows.reset(seed=seed, options=options)[0]

    def step(
        self, actions: np.ndarray
    ) -> tuple[dict[str, np.ndarray] | np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        return self.rows.step([np.asarray(actions)])[0]

    def close(self, **kwargs) -> None:
        self.rows.close()
