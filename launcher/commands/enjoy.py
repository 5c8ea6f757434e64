"""`srl-launch enjoy RUN`: watch a trained policy play, or a self-play game's policy against a fixed player."""

from __future__ import annotations

import argparse
from pathlib import Path

from launcher.commands import common
from srl_hpc.rundir import RunDir


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="srl-launch enjoy",
        description="Play whole episodes with a run's checkpoint "
        "(on this machine), print each return, optionally write them as an MP4.",
    )
    p.add_argument("run_dir", type=RunDir)
    p.add_argument("--episodes", type=int, default=3)
    p.add_argument("--video", type=Path, help="write the episodes to this MP4 file")
    p.add_argument(
        "--greedy",
        action="store_true",
        help="the most likely action, instead of actions as the "
        "least exploring actor chooses them (PPO: sampled from the policy; DQN: its tiny epsilon)",
    )
    p.add_argument("--seed", type=int, default=0, help="env seeds: this, this + 1, ... (offset from every actor's)")
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--tag",
        help="play the parameter database's version with this tag (best: evaluation's "
        "highest scoring; latest; snapshot-N) instead of the checkpoint",
    )
    which.add_argument("--version", type=int, help="play this stored version (srl-launch params RUN lists them)")
    p.add_argument(
        "--against",
        choices=("random", "one-ply"),
        help="a turn-taking game (self-play): play "
        "--games games against this fixed player, first mover in half of them, and count the wins",
    )
    p.add_argument("--games", type=int, default=200, help="with --against: games to play (default 200)")
    return p


def main(argv) -> int:
    args = parser().parse_args(argv)
    if args.episodes < 1 or args.games < 1:
        raise common.UsageError(f"--episodes and --games must be >= 1, got {args.episodes} and {args.games}")
    if args.against and args.video:
        raise common.UsageError("--video records episodes of one agent; --against plays games against a fixed player")
    from srl_hpc.enjoy import duel, enjoy  # torch and the envs, only for this command

    try:
        if args.against:
            duel(
                args.run_dir,
                args.against,
                args.games,
                greedy=args.greedy,
                seed=args.seed,
                version=args.version,
                tag=args.tag,
            )
            return 0
        enjoy(
            args.run_dir,
            args.episodes,
            greedy=args.greedy,
            video=args.video,
            seed=args.seed,
            version=args.version,
            tag=args.tag,
        )
    except ValueError as e:  # what this run cannot be watched with: no greedy(), a multi-agent env
        raise common.UsageError(str(e)) from None
    return 0
