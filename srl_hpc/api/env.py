"""How workers create environments: any gymnasium id, srl-hpc's own registered ids, and Atari games
(env.atari set) with the standard preprocessing."""
from __future__ import annotations

import gymnasium

import srl_hpc.envs  # noqa: F401  registers srl_hpc/* ids


def make_env(env_cfg, seed: int) -> gymnasium.Env:
    if env_cfg.atari is not None:
        from srl_hpc.envs.atari import make_atari  # ale-py only where an experiment plays Atari

        env = make_atari(env_cfg.id, env_cfg.kwargs, env_cfg.atari)
    else:
        env = gymnasium.make(env_cfg.id, **env_cfg.kwargs)
    env.action_space.seed(seed)
    return env


def spaces(env_cfg) -> tuple[gymnasium.Space, gymnasium.Space]:
    """Observation and action spaces, from a throw-away instance."""
    env = make_env(env_cfg, seed=0)
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()
