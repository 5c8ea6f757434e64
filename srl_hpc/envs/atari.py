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
        env, noop_max=atari.noop_max, frame_skip=atari.frame_skip, screen_size=atari.screen_size,
        terminal_on_life_loss=atari.terminal_on_life_loss, grayscale_obs=True, scale_obs=False)
    return gymnasium.wrappers.FrameStackObservation(env, atari.frame_stack)
