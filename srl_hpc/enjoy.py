"""Watch a trained agent: a run's checkpoint (or a version from its parameter database: `--tag best`,
`--version N`) plays whole episodes in one env, prints each return, and optionally writes them as an MP4
(`srl-launch enjoy RUN --video out.mp4`).

Frames come from the env's own rgb_array rendering (Atari: the full-colour screen, one frame per agent
step, so the video plays at the game's rate over the frame skip); OpenCV writes the MP4.

A turn-taking game (srl_hpc/envs/turns.py, self-play) is played against a fixed player instead
(`--against random|one-ply --games N`), moving first in half the games, and the score is counted.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np
import torch

from srl_hpc import config
from srl_hpc.algorithm_spec import spec
from srl_hpc.algorithms.watching import policy_function
from srl_hpc.envs.agents import is_parallel_env
from srl_hpc.envs.backends import first_seed, make_env, spaces
from srl_hpc.models.building import build_model
from srl_hpc.models.weights import load_arrays
from srl_hpc.rundir import RunDir
from srl_hpc.rundir.checkpoint import Checkpoint
from srl_hpc.services.parameter_db import ParameterDB
from srl_hpc.streams.contract import Contract

if TYPE_CHECKING:
    import cv2

ATARI_HZ = 60
SEED_OFFSET = 2**29  # watched episodes' seeds: apart from the actors' and the evaluation workers'


def enjoy(
    run: RunDir,
    episodes: int = 3,
    greedy: bool = False,
    video: Path | None = None,
    seed: int = 0,
    version: int | None = None,
    tag: str | None = None,
    out=sys.stdout,
) -> list[float]:
    """Play `episodes` episodes with the run's checkpoint, or the parameter database's `version` or the
    version it tags `tag`; returns their returns."""
    exp = config.load(run.experiment)
    checkpoint = Checkpoint(run.checkpoint)
    if version is None and tag is None and not checkpoint.exists():
        raise FileNotFoundError(f"{run.root}: no checkpoint to watch (no {run.checkpoint})")
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # classic-control renders with pygame: no display here
    env_cfg = (
        exp.env
        if video is None
        else dataclasses.replace(exp.env, kwargs={**exp.env.kwargs, "render_mode": "rgb_array"})
    )
    env = make_env(env_cfg)
    if is_parallel_env(env):
        env.close()
        raise ValueError(
            f"{exp.env.id} is a multi-agent env: srl-launch enjoy plays single-agent envs only "
            "(evaluation workers, workers.eval, score multi-agent runs)"
        )
    obs_space, action_space = spaces(exp.env)
    try:
        model, version, source = _load(run, exp, obs_space, action_space, version, tag)
    except FileNotFoundError:
        env.close()
        raise
    choose = policy_function(exp, greedy, Contract.of(obs_space, action_space, spec(exp.algorithm), exp))
    writer = None
    returns = []
    try:
        for episode in range(episodes):
            obs, _ = env.reset(seed=first_seed(SEED_OFFSET + seed + episode, 1))
            total, length, done = 0.0, 0, False
            hidden = torch.zeros(1, exp.model.state_size) if exp.model.state_size else None
            while not done:
                if video is not None:
                    writer = _write(writer, video, cast(np.ndarray, env.render()), _fps(env, exp))
                with torch.inference_mode():
                    action, hidden = choose(model, obs, hidden)
                obs, reward, terminated, truncated, _ = env.step(action)
                total, length, done = total + float(reward), length + 1, terminated or truncated
            if video is not None:
                writer = _write(writer, video, cast(np.ndarray, env.render()), _fps(env, exp))  # the frame it ended on
            returns.append(total)
            print(f"episode {episode + 1}: return {total:g}, length {length}", file=out, flush=True)
    finally:
        env.close()
        if writer is not None:
            writer.release()
    how = "greedy" if greedy else "sampled as the least exploring actor"
    print(
        f"mean return {np.mean(returns):g} over {episodes} episode(s): "
        f"{source} {version}, "
        f"actions {how}" + (f"; video {video}" if video else ""),
        file=out,
        flush=True,
    )
    return returns


def _load(
    run: RunDir, exp: config.Experiment, obs_space, action_space, version: int | None, tag: str | None
) -> tuple[torch.nn.Module, int, str]:
    """(model in eval mode, its version, what that version is) from the checkpoint, or the parameter
    database's `version` or version tagged `tag`."""
    model = build_model(exp, obs_space, action_space)
    source = (
        "checkpoint version"
        if version is None and tag is None
        else "stored version"
        if tag is None
        else f"version (tagged {tag})"
    )
    if version is None and tag is None:
        version = Checkpoint(run.checkpoint).load_weights(model)
    else:
        version, arrays = ParameterDB(run.parameters_of("")).get(version, tag)
        load_arrays(model, arrays)
    return model.eval(), version, source


def duel(
    run: RunDir,
    against: str,
    games: int = 200,
    greedy: bool = False,
    seed: int = 0,
    version: int | None = None,
    tag: str | None = None,
    out=sys.stdout,
) -> dict[str, int]:
    """Play `games` games of a turn-taking game (a self-play run's env) against the fixed player `against`
    (FIXED_PLAYERS), first mover in half of them; returns and prints the counts of wins, draws and losses."""
    from srl_hpc.envs.fixed_players import FIXED_PLAYERS
    from srl_hpc.envs.turns import TurnTaking, play

    exp = config.load(run.experiment)
    if version is None and tag is None and not Checkpoint(run.checkpoint).exists():
        raise FileNotFoundError(f"{run.root}: no checkpoint to play (no {run.checkpoint})")
    env = make_env(exp.env)
    try:
        if not isinstance(env, TurnTaking):
            raise ValueError(f"--against plays turn-taking games (srl_hpc/envs/turns.py); {exp.env.id} is not one")
        if against not in FIXED_PLAYERS:
            raise ValueError(f"--against: no fixed player {against!r} (players: {', '.join(FIXED_PLAYERS)})")
        fixed = FIXED_PLAYERS[against](env, np.random.default_rng(seed))
        obs_space, action_space = spaces(exp.env)
        model, version, source = _load(run, exp, obs_space, action_space, version, tag)
        choose = policy_function(exp, greedy, Contract.of(obs_space, action_space, spec(exp.algorithm), exp))

        def policy(obs: dict[str, np.ndarray]) -> int:
            with torch.inference_mode():
                return choose(model, obs, None)[0]

        counts = {"won": 0, "drew": 0, "lost": 0}
        by_seat = [[0, 0] for _ in env.possible_agents]  # per seat of the policy: [wins, games]
        for game in range(games):
            seat = game % len(env.possible_agents)
            players = [fixed] * len(env.possible_agents)
            players[seat] = policy
            (rewards,) = play(env, players, 1, seed=first_seed(SEED_OFFSET + seed + game, 1))
            result = rewards[env.possible_agents[seat]]
            counts["won" if result > 0 else "drew" if result == 0 else "lost"] += 1
            by_seat[seat][0] += result > 0
            by_seat[seat][1] += 1
    finally:
        env.close()
    seats = ", ".join(f"seat {i + 1}: {w}/{n}" for i, (w, n) in enumerate(by_seat))
    print(
        f"against {against}: {games} games, won {counts['won']} ({100 * counts['won'] / games:.1f}%), drew "
        f"{counts['drew']}, lost {counts['lost']} (wins by the policy's seat, {seats}); {source} {version}, "
        f"moves {'greedy' if greedy else 'sampled'}",
        file=out,
        flush=True,
    )
    return counts


def _fps(env, exp) -> float:
    """Real time: an Atari agent step is frame_skip frames of the console's 60 Hz."""
    if exp.env.atari is not None:
        return ATARI_HZ / exp.env.atari.frame_skip
    return env.metadata.get("render_fps") or 30


def _write(writer: cv2.VideoWriter | None, path: Path, frame: np.ndarray, fps: float) -> cv2.VideoWriter:
    import cv2  # only for videos

    if writer is None:
        path.parent.mkdir(parents=True, exist_ok=True)
        writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (frame.shape[1], frame.shape[0]))  # type: ignore[attr-defined]
        if not writer.isOpened():
            raise OSError(f"OpenCV cannot write an MP4 to {path}")
    writer.write(np.ascontiguousarray(frame[..., ::-1]))  # RGB -> OpenCV's BGR
    return writer
