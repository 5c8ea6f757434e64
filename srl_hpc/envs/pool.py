"""The envpool backend: envpool's C++ implementations of gymnasium ids, for actors that want the fastest
env stepping (`pip install -e '.[envpool]'`). Atari ids take the same preprocessing settings as the
gymnasium path (env.atari), so the backend changes speed, not the task."""
from __future__ import annotations

import importlib.util
import warnings

# envpool seeds at creation (make_pool passes the seed); the actors' reset(seed=...) is the same seed again
warnings.filterwarnings("ignore", message="EnvPool seeds are fixed when the environment is created")


# ids whose envpool implementation is the same task as gymnasium's, shown by tests/test_envs.py's parity
# test (fixed and random policies: episode lengths, returns, observation statistics): the only ones
# env.backend auto hands to envpool. env.backend: envpool serves any id envpool has.
SAME_TASK = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0")


def task_id(env_id: str) -> str:
    """envpool names Atari games without the ALE/ namespace: ALE/Pong-v5 -> Pong-v5."""
    return env_id.removeprefix("ALE/")


def unavailable(env_cfg) -> str | None:
    """Why envpool cannot serve this env (None when it can)."""
    if importlib.util.find_spec("envpool") is None:
        return "envpool is not installed (pip install -e '.[envpool]')"
    import envpool

    if task_id(env_cfg.id) not in envpool.list_all_envs():
        return f"envpool has no {task_id(env_cfg.id)!r}"
    return None


def make_pool(env_cfg, num_envs: int, seed: int):
    import envpool

    kwargs = dict(env_cfg.kwargs)
    atari = env_cfg.atari
    if atari is not None:
        kwargs = {"repeat_action_probability": 0.25 if env_cfg.id.endswith("-v5") else 0.0,  # v5: sticky actions
                  "frame_skip": atari.frame_skip, "noop_max": atari.noop_max, "img_height": atari.screen_size,
                  "img_width": atari.screen_size, "stack_num": atari.frame_stack,
                  "episodic_life": atari.terminal_on_life_loss, "reward_clip": False, "use_fire_reset": False,
                  **kwargs}
    return envpool.make_gymnasium(task_id(env_cfg.id), num_envs=num_envs, num_threads=1, seed=seed, **kwargs)
