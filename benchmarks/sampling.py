"""Sampling alone vs raw env stepping, on the same cores.

    python benchmarks/sampling.py experiments/atari_pong_ppo.yaml --seconds 30

1. raw: `--processes` processes (default: the actor count) each step one env group of the experiment's
   (same backend, same preprocessing, ring_size / inference_splits envs) with random actions, no
   inference, no transport: the ceiling for these cores.
2. system: the experiment with the trainer consuming and discarding batches
   (workers.trainer.train=false), so the figure is what inference + transport + actors deliver.
Prints both, the ratio, and JSON.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import measure  # noqa: E402

from srl_hpc import config  # noqa: E402


def _step_randomly(exp, seed: int, seconds: float, out) -> None:
    import numpy as np

    from srl_hpc.envs.backends import make_env_group

    a = exp.workers.actor
    envs = make_env_group(exp.env, a.ring_size // a.inference_splits, seed)  # an actor's group, same backend
    envs.reset(seed=seed)
    resetting = np.zeros(envs.num_envs, bool)
    steps, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        _, _, terminated, truncated, _ = envs.step(envs.action_space.sample())
        steps += int((~resetting).sum())  # an auto-reset step is not a transition (as in the actors' count)
        resetting = terminated | truncated
    envs.close()
    out.put(steps)


def raw_env_fps(exp, processes: int, seconds: float) -> float:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_step_randomly, args=(exp, i, seconds, out)) for i in range(processes)]
    for p in procs:
        p.start()
    steps = sum(out.get() for _ in procs)
    for p in procs:
        p.join()
    return steps * exp.env.frames_per_step / seconds


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("experiment", type=Path)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--processes", type=int, help="raw stepping processes (default: workers.actor.count)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args(argv)
    exp = config.with_overrides(config.load(args.experiment), [*args.set, "workers.trainer.train=false"])
    raw = raw_env_fps(exp, args.processes or exp.workers.actor.count, args.seconds)
    system = measure(exp, args.seconds)
    sampled = system["steady_sampling_fps"] or system["sampling_fps"]
    result = {
        "experiment": exp.name,
        "raw_env_fps": round(raw, 1),
        "sampling_only_fps": sampled,
        "ratio": round(sampled / raw, 3),
        "system": system,
    }
    print(
        f"{exp.name}: raw env stepping {raw:,.0f} frames/s; sampling-only system {sampled:,.0f} frames/s "
        f"({sampled / raw:.0%} of raw)"
    )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
