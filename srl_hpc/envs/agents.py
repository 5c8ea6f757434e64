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
"""
from __future__ import annotations

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space


def is_parallel_env(env) -> bool:
    """PettingZoo's parallel API: agents by name, spaces per agent, step() of dicts."""
    return hasattr(env, "possible_agents") and callable(getattr(env, "observation_space", None))


class AgentRows(VectorEnv):
    def __init__(self, envs: list):
        self.envs = envs
        self.agents = list(envs[0].possible_agents)
        obs_spaces = {a: envs[0].observation_space(a) for a in self.agents}
        act_spaces = {a: envs[0].action_space(a) for a in self.agents}
        first = self.agents[0]
        for a in self.agents[1:]:
            if obs_spaces[a] != obs_spaces[first] or act_spaces[a] != act_spaces[first]:
                raise ValueError(f"agents {first!r} and {a!r} have different observation or action spaces: "
                                 "one policy cannot act for both")
        self.k = len(self.agents)
        self.num_envs = len(envs) * self.k
        self.single_observation_space, self.single_action_space = obs_spaces[first], act_spaces[first]
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}
        self._obs = np.zeros((self.num_envs, *self.single_observation_space.shape), self.single_observation_space.dtype)
        self._needs_reset = np.zeros(len(envs), bool)

    def _rows(self, i: int) -> slice:
        return slice(i * self.k, (i + 1) * self.k)

    def _place(self, i: int, observations: dict) -> None:
        rows = self._obs[self._rows(i)]
        rows[:] = 0  # the rows of absent agents
        for k, agent in enumerate(self.agents):
            if agent in observations:
                rows[k] = observations[agent]

    def _present(self) -> np.ndarray:
        return np.array([agent in env.agents for env in self.envs for agent in self.agents])

    def reset(self, *, seed: int | None = None, options=None):
        for i, env in enumerate(self.envs):
            observations, _ = env.reset(seed=None if seed is None else seed + i, options=options)
            self._place(i, observations)
        self._needs_reset[:] = False
        return self._obs.copy(), {"present": self._present()}

    def step(self, actions):
        actions = np.asarray(actions)
        rewards = np.zeros(self.num_envs, np.float32)
        terminated, truncated = np.zeros(self.num_envs, bool), np.zeros(self.num_envs, bool)
        for i, env in enumerate(self.envs):
            if self._needs_reset[i]:
                observations, _ = env.reset()
                self._place(i, observations)
                self._needs_reset[i] = False
                continue
            base = i * self.k
            acting = {a: actions[base + k] for k, a in enumerate(self.agents) if a in env.agents}
            observations, reward, term, trunc, _ = env.step(acting)
            self._place(i, observations)
            for k, agent in enumerate(self.agents):
                if agent in acting:
                    rewards[base + k] = reward.get(agent, 0.0)
                    terminated[base + k] = bool(term.get(agent, False))
                    truncated[base + k] = bool(trunc.get(agent, False))
            self._needs_reset[i] = not env.agents
        return self._obs.copy(), rewards, terminated, truncated, {"present": self._present()}

    def close(self, **kwargs):
        for env in self.envs:
            env.close()

