"""How actors create environments: any gymnasium id, srl-hpc's own registered ids, Atari games (env.atari
set) with the standard preprocessing, and a user's factory by dotted path ("package.module:make_env"),
which may return a multi-agent env with PettingZoo's parallel API (srl_hpc/envs/agents.py: a row per agent).

An actor steps its envs in groups, and a group is one gymnasium VectorEnv, built by one of three backends
(`env.backend`):

- sync:    one `gymnasium.make` env per slot, stepped in a Python loop (any id, any wrapper);
- vector:  the id's own vectorised implementation (gymnasium's `vector_entry_point`): CartPole in numpy,
           ALE's C++ AtariVectorEnv for ALE/* ids; one call steps the whole group;
- envpool: envpool's C++ envs, when envpool is installed (`pip install -e '.[envpool]'`);
- auto:    vector if the id has a vector entry point, else envpool if installed and the parity test shows its
           implementation of the id to be the same task (pool.SAME_TASK), else sync.
           (Measured here, one thread: CartPole 525k steps/s vector, 328k envpool, 183k sync for 16 envs;
           Pong 4.0k agent steps/s vector, 3.8k envpool, 3.2k sync for 8.)

Every backend auto-resets on the NEXT step (gymnasium's default): the step after an episode ends ignores its
action and returns the first observation of the next episode. Actors mark that step invalid, and the
observation an episode ended on comes back once as a regular observation (the bootstrap of a truncation).
Vectorised backends start one thread per group: scale with actor processes, not threads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import gymnasium
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv

import srl_hpc.envs  # noqa: F401  registers srl_hpc/* ids
from srl_hpc.dotted import load_object
from srl_hpc.envs import agents, pool
from srl_hpc.envs.action_masks import MaskFromInfo

if TYPE_CHECKING:
    from gymnasium.envs.registration import VectorEnvCreator

SEED_SPACE = 2**31  # ALE and envpool take signed 32-bit seeds


def first_seed(seed: int, num_envs: int) -> int:
    """The first of `num_envs` consecutive env seeds (seed, seed + 1, ...), folded so that all of them fit in
    32 bits: a run's seed, attempt and worker index make bigger numbers (ALE refused attempt 4 of seed 1)."""
    return seed % (SEED_SPACE - num_envs)


def make_env(env_cfg) -> gymnasium.Env:
    """One env, with the gymnasium wrappers (the sync backend's slot)."""
    env = _make_env(env_cfg)
    return MaskFromInfo(env) if env_cfg.action_mask_from_info else env


def _make_env(env_cfg) -> gymnasium.Env:
    if is_factory(env_cfg.id):
        return load_object(env_cfg.id)(**env_cfg.kwargs)
    if env_cfg.atari is not None:
        from srl_hpc.envs.atari import make_atari  # ale-py only where an experiment plays Atari

        return make_atari(env_cfg.id, env_cfg.kwargs, env_cfg.atari)
    register_namespace(env_cfg.id)
    return gymnasium.make(env_cfg.id, **env_cfg.kwargs)


def make_env_group(env_cfg, num_envs: int, seed: int = 0, global_state: bool = False) -> VectorEnv:
    """`num_envs` envs stepped as one, by the backend env.backend resolves to. Reset it with the same seed.
    global_state: a multi-agent env's own global state, where it has one, at the end of each row's observation."""
    backend = resolve_backend(env_cfg)
    if backend == "sync":
        first = make_env(env_cfg)
        if agents.is_parallel_env(first):  # a multi-agent env: a row per (env, agent)
            return agents.AgentRows([first] + [make_env(env_cfg) for _ in range(num_envs - 1)], global_state)
        return SyncVectorEnv(
            [lambda: first] + [lambda: make_env(env_cfg)] * (num_envs - 1), autoreset_mode=AutoresetMode.NEXT_STEP
        )
    if backend == "vector":
        kwargs = dict(env_cfg.kwargs)
        if env_cfg.atari is not None:
            from srl_hpc.envs.atari import vector_kwargs

            kwargs.update(vector_kwargs(env_cfg.atari))
        return gymnasium.make_vec(env_cfg.id, num_envs, vectorization_mode="vector_entry_point", **kwargs)
    return pool.make_pool(env_cfg, num_envs, seed)


def make_env_teams(
    env_cfg, num_envs: int, policies: dict[str, tuple[str, ...]], global_state: bool = False
) -> agents.TeamRows:
    """`num_envs` multi-agent envs whose agents are split among `policies` (name -> agent patterns), in their order."""
    envs = [make_env(env_cfg) for _ in range(num_envs)]
    if not agents.is_parallel_env(envs[0]):
        raise ValueError(
            f"`policies` splits a multi-agent env's agents, but env.id {env_cfg.id!r} is not one "
            "(no PettingZoo parallel API)"
        )
    teams = agents.assign_teams(list(cast(Any, envs[0]).possible_agents), policies)
    return agents.TeamRows(envs, list(teams.values()), global_state)


def resolve_backend(env_cfg) -> str:
    """The backend `env.backend` means for this id; a clear error when the asked one cannot serve it."""
    backend = env_cfg.backend
    if env_cfg.action_mask_from_info:
        if backend not in ("auto", "sync"):
            raise ValueError(
                f"env.backend is {backend!r} but env.action_mask_from_info wraps each env: use 'sync' or 'auto'"
            )
        return "sync"
    if is_factory(env_cfg.id):
        if backend not in ("auto", "sync"):
            raise ValueError(f"env.backend is {backend!r} but env.id {env_cfg.id!r} is a factory; use 'sync' or 'auto'")
        return "sync"
    has_vector = _vector_entry_point(env_cfg.id) is not None
    if backend == "vector" and not has_vector:
        raise ValueError(
            f"env.backend is 'vector' but {env_cfg.id!r} has no vectorised implementation "
            "(no vector_entry_point in its gymnasium registration); use 'sync'"
        )
    if backend == "auto" and has_vector:
        return "vector"
    if backend == "envpool" or (backend == "auto" and env_cfg.id in pool.SAME_TASK):
        problem = pool.unavailable(env_cfg)
        if problem is None:
            return "envpool"
        if backend == "envpool":
            raise ValueError(f"env.backend is 'envpool' but {problem}")
    return backend if backend == "vector" else "sync"


def is_factory(env_id: str) -> bool:
    """'package.module:make_env' (a user's callable), as opposed to a registered gymnasium id."""
    return ":" in env_id and "/" not in env_id.partition(":")[0]


def _vector_entry_point(env_id: str) -> VectorEnvCreator | str | None:
    register_namespace(env_id)
    return gymnasium.spec(env_id).vector_entry_point


def register_namespace(env_id: str) -> None:
    """Ids of packages that register with gymnasium only when asked: ALE/* (ale-py), MinAtar/* (minatar)."""
    if env_id.startswith("ALE/"):
        import srl_hpc.envs.atari  # noqa: F401  registers the ALE ids
    elif env_id.startswith("MinAtar/") and env_id not in gymnasium.registry:
        try:
            import minatar.gym
        except ImportError:
            raise ValueError(f"{env_id!r} needs the minatar package: pip install -e '.[minatar]'") from None
        minatar.gym.register_envs()


def spaces(
    env_cfg, policies: dict | None = None, policy: str = "", global_state: bool = False
) -> tuple[gymnasium.Space, gymnasium.Space]:
    """Single-env observation and action spaces (a multi-agent env's: each agent's; with `policies`, those of
    `policy`'s agents; with global_state, and the env's state after it), from a throw-away group of one (the
    backend actors use)."""
    team = _team(env_cfg, policies, policy, global_state)
    return team.single_observation_space, team.single_action_space


def agent_count(env_cfg, policies: dict | None = None, policy: str = "") -> int:
    """Agents per env: 1, or a multi-agent env's possible agents (with `policies`, `policy`'s): its rows."""
    return _team(env_cfg, policies, policy).num_envs


def global_state_size(env_cfg) -> int:
    """Floats of a multi-agent env's own global state (0: none, or not a multi-agent env)."""
    env = make_env(env_cfg)
    try:
        return agents.state_size(env) if agents.is_parallel_env(env) else 0
    finally:
        env.close()


def _team(env_cfg, policies: dict | None, policy: str, global_state: bool = False) -> agents.Team | VectorEnv:
    """What an actor's group of one env looks like to one policy (spaces, rows); closed again."""
    if policies:
        rows = make_env_teams(env_cfg, 1, policies, global_state)
        rows.close()
        return rows.teams[list(policies).index(policy)]
    envs = make_env_group(env_cfg, 1, global_state=global_state)
    envs.close()
    return envs
