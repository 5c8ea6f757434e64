"""How workers create environments: any gymnasium id, plus srl-hpc's own registered ids."""
from __future__ import annotations

import gymnasium

import srl_hpc.envs  # noqa: F401  registers srl_hpc/* ids


def make_env(env_id: str, kwargs: dict, seed: int) -> gymnasium.Env:
    env = gymnasium.make(env_id, **kwargs)
    env.action_space.seed(seed)
    return env


def spaces(env_id: str, kwargs: dict) -> tuple[gymnasium.Space, gymnasium.Space]:
    """Observation and action spaces, from a throw-away instance."""
    env = gymnasium.make(env_id, **kwargs)
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()
