"""Atari through ale-py (its wheel ships the ROMs), with the standard preprocessing.

frame skip with max-pooling over the last two frames, grayscale, resize to screen_size, no-op starts,
frame stack; v5 ids keep their sticky actions (repeat_action_probability 0.25).
"""

from __future__ import annotations

import ale_py
import cv2
import gymnasium

gymnasium.register_envs(ale_py)
cv2.setNumThreads(1)  # one small resize per step: threads only contend with the other workers


def make_atari(env_id: str, kwargs: dict, atari) -> gymnasium.Env:
    env = gymnasium.make(env_id, frameskip=1, **kwargs)  # skipping (and max-pooling) is the wrapper's job
    env = gymnasium.wrappers.AtariPreprocessing(
        env,
        noop_max=atari.noop_max,
        frame_skip=atari.frame_skip,
        screen_size=atari.screen_size,
        terminal_on_life_loss=atari.terminal_on_life_loss,
        grayscale_obs=True,
        scale_obs=False,
    )
    return gymnasium.wrappers.FrameStackObservation(env, atari.frame_stack)


def vector_kwargs(atari) -> dict:
    """The same preprocessing for ALE's own vectorised envs (AtariVectorEnv, the `vector` backend)."""
    return {
        "frameskip": atari.frame_skip,
        "noop_max": atari.noop_max,
        "img_height": atari.screen_size,
        "img_width": atari.screen_size,
        "stack_num": atari.frame_stack,
        "grayscale": True,
        "maxpool": True,
        "episodic_life": atari.terminal_on_life_loss,
        "reward_clipping": False,
        "use_fire_reset": False,
        "num_threads": 1,
    }
