"""Ablations: one experiment, one switch varied, every variant run for the same time, one table.

    python benchmarks/ablations.py experiments/atari_pong_ppo.yaml ring --seconds 30
    python benchmarks/ablations.py experiments/cartpole_ppo.yaml placement prefetch --seconds 20

Switches (each variant is a list of --set overrides on top of the experiment and of --set):
  ring        ring size 1, 4, 16 (2 inference splits when the ring holds more than one env)
  splits      a 16-env ring cut into 1, 2, 4, 8, 16 inference requests
  batch_cap   policy.max_batch 8, 32, 256
  transport   inference observations in shared memory vs in the ZMQ messages
  prefetch    trainer pre-fetching on vs off
  placement   SRL (policy workers) vs IMPALA-style (inference in actors) vs SEED-style (on the trainer)
  trace       tracing on vs off (what tracing costs)
  sampling    trainer training vs consuming and discarding (sampling alone)
  curve       every socket CURVE-encrypted with the run's keys (the default) vs plain (what privacy costs)
Prints a table per switch and, last, one JSON line with every figure.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import measure, table  # noqa: E402

from srl_hpc import config  # noqa: E402

A = "workers.actor."
VARIANTS = {
    "ring": [
        ("ring 1", [f"{A}ring_size=1", f"{A}inference_splits=1"]),
        ("ring 4", [f"{A}ring_size=4", f"{A}inference_splits=2"]),
        ("ring 16", [f"{A}ring_size=16", f"{A}inference_splits=2"]),
    ],
    "splits": [(f"16 envs / {n} requests", [f"{A}ring_size=16", f"{A}inference_splits={n}"]) for n in (1, 2, 4, 8, 16)],
    "batch_cap": [(f"max_batch {n}", [f"workers.policy.max_batch={n}"]) for n in (8, 32, 256)],
    "transport": [("shared memory", [f"{A}inference_transport=shm"]), ("zmq", [f"{A}inference_transport=zmq"])],
    "prefetch": [
        ("prefetch on", ["workers.trainer.prefetch=true"]),
        ("prefetch off", ["workers.trainer.prefetch=false"]),
    ],
    "placement": [
        ("srl", ["workers.placement=srl"]),
        ("impala-style", ["workers.placement=impala", "workers.policy.count=0"]),
        ("seed-style", ["workers.placement=seed", "workers.policy.count=0"]),
    ],
    "trace": [("trace on", ["monitor.trace=true"]), ("trace off", ["monitor.trace=false"])],
    "sampling": [("training", ["workers.trainer.train=true"]), ("sampling only", ["workers.trainer.train=false"])],
    "curve": [("curve on", ["curve=true"]), ("curve off", ["curve=false"])],
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("experiment", type=Path)
    p.add_argument("switches", nargs="+", choices=sorted(VARIANTS))
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--warmup", type=float, default=5.0)
    p.add_argument("--repeats", type=int, default=1, help="run the variants round-robin this many times")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args(argv)
    base = config.load(args.experiment)
    results = {}
    for switch in args.switches:
        rows = []
        for repeat in range(args.repeats):  # round-robin, so drift in machine speed hits every variant alike
            for label, overrides in VARIANTS[switch]:
                exp = config.with_overrides(base, [*args.set, *overrides])
                print(f"[{switch}] {label} (repeat {repeat + 1}/{args.repeats}) ...", file=sys.stderr, flush=True)
                row = measure(exp, args.seconds, args.warmup)
                rows.append({"label": label, "repeat": repeat, **row})
        print(f"\n== {switch}: {args.experiment.name}, {args.seconds:g} s each\n{table(rows)}", flush=True)
        results[switch] = rows
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
