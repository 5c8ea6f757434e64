"""Pieces shared by the baseline runners (standard library only: each runner runs in its own venv).

Every runner takes the same matched settings (`add_matched_args`), records progress samples
(wall time, frames consumed by the learner, frames sampled), and reports one JSON line on stdout
(`emit`) whose figures come from `rates`: the steady part of the run, i.e. samples taken after the
first `--warmup` seconds of the timed window, up to its end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time

ENVS = ("cartpole", "pong", "halfcheetah")
# env frames per agent step (Atari frames = agent steps x 4; a HalfCheetah frame is an agent step, whose 5
# MuJoCo physics steps are not counted)
FRAME_SKIP = {"cartpole": 1, "pong": 4, "halfcheetah": 1}


def add_matched_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", choices=ENVS, required=True)
    p.add_argument("--seconds", type=float, default=60.0, help="timed window, from when the system is up")
    p.add_argument("--warmup", type=float, default=10.0, help="seconds of the window left out of the figures")
    p.add_argument("--num-workers", type=int, default=2, help="sampling processes (actors / rollout workers)")
    p.add_argument("--envs-per-worker", type=int, default=16)
    p.add_argument("--rollout", type=int, default=64, help="steps per env per trajectory fragment")
    p.add_argument("--batch-size", type=int, default=2048, help="agent steps per training batch")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--minibatch-size", type=int, default=512, help="agent steps per SGD minibatch")
    p.add_argument("--hidden", type=int, nargs="+", default=[64, 64], help="MLP widths (cartpole, halfcheetah)")
    p.add_argument(
        "--separate-critic",
        action="store_true",
        help="the value head over a torso of its own (default: one torso shared with the policy)",
    )
    p.add_argument(
        "--normalize-observations",
        action="store_true",
        help="normalise observations by running mean/std (each runner says by what)",
    )
    p.add_argument(
        "--scale-rewards",
        action="store_true",
        help="scale rewards by a running std of the discounted return (each runner says by what)",
    )
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--gae-lambda", type=float, default=0.95)
    p.add_argument("--clip", type=float, default=0.2)
    p.add_argument("--entropy-coef", type=float, default=0.0)
    p.add_argument("--value-coef", type=float, default=0.5)
    p.add_argument("--max-grad-norm", type=float, default=0.5)
    p.add_argument("--work-dir", help="logs and the system's own output go here (default: a new temporary directory)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--target-return",
        type=float,
        help="time to target: stop as soon as the mean return of the last --return-window episodes "
        "reaches this (--seconds is then the budget) and report how long it took",
    )
    p.add_argument("--return-window", type=int, default=20)


def check_matched(args) -> None:
    if args.batch_size % args.minibatch_size:
        raise SystemExit(f"--minibatch-size {args.minibatch_size} must divide --batch-size {args.batch_size}")


def rates(samples: list[tuple[float, int, int]], t0: float, warmup: float, end: float, skip: int) -> dict:
    """samples: (time, learner agent steps, sampled agent steps), in time order.

    The steady figures use the first sample at or after t0 + warmup and the last one at or before `end`;
    with fewer than two such samples they fall back to the whole window (first to last sample)."""
    inside = [s for s in samples if t0 <= s[0] <= end]
    steady = [s for s in inside if s[0] >= t0 + warmup]
    part, what = (steady, "steady") if len(steady) >= 2 else (inside, "whole window (too few samples after warmup)")
    if len(part) < 2:
        return {"training_fps": None, "sampling_fps": None, "frames": 0, "seconds": 0.0, "window": "no samples"}
    (ta, ca, sa), (tb, cb, sb) = part[0], part[-1]
    dt = tb - ta
    out = {
        "training_fps": round((cb - ca) * skip / dt, 1),
        "frames": (cb - ca) * skip,
        "seconds": round(dt, 2),
        "window": f"{what}: {ta - t0:.1f}s..{tb - t0:.1f}s after start, {len(part)} samples",
    }
    out["sampling_fps"] = round((sb - sa) * skip / dt, 1) if sb is not None and sa is not None else None
    return out


def reached(progress: list[tuple[float, int, float | None, int]], t0: float, target: float, window: int) -> dict:
    """progress: (time, learner agent steps, mean return of the last `window` episodes, episodes in that mean),
    in time order. The first entry with a full window at or above `target`, as seconds after t0."""
    best = None
    for t, steps, mean, n in progress:
        if mean is None or n < window:
            continue
        best = mean if best is None else max(best, mean)
        if mean >= target:
            return {
                "seconds_to_target": round(t - t0, 2),
                "steps_to_target": steps,
                "mean_return_at_target": round(mean, 1),
            }
    return {"seconds_to_target": None, "steps_to_target": None, "best_mean_return": best}


def emit(result: dict) -> None:
    """The runner's one line on stdout (everything else goes to stderr)."""
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def stop_group(pgid: int, proc=None, grace: float = 30.0) -> str:
    """SIGINT the process group (the leader stops cleanly), then SIGTERM and SIGKILL whatever is left.

    Returns how it went, for the notes."""
    steps = []
    for sig, wait in ((signal.SIGINT, grace), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        if not group_alive(pgid) and (proc is None or proc.poll() is not None):
            break
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        steps.append(signal.Signals(sig).name)
        deadline = time.time() + wait
        while time.time() < deadline:
            if proc is not None:
                proc.poll()  # reap the leader so the group can empty
            if not group_alive(pgid):
                break
            time.sleep(0.2)
    if proc is not None:
        with contextlib.suppress(Exception):
            proc.wait(timeout=5)
    left = group_alive(pgid)
    return "stopped with " + "+".join(steps or ["nothing"]) + (", processes still left!" if left else "")
