"""Experiment files side by side: each measured --repeats times, round-robin, in one invocation (this machine's
speed drifts between days, so only figures from one invocation compare), after one trial of the first that is not
counted (launcher.trials.round_robin: the first trial of an invocation runs slow here). The first file is
the reference.

    python benchmarks/experiment_files.py experiments/atari_pong_ppo.yaml experiments/atari_pong_ppo.tuned.yaml

Each trial runs a file for --seconds with tracing on and is judged as `srl-launch tune` judges a trial
(launcher/trials.py: training frames/s between the trainer's updates after --warmup), so a tuned file's header
can be checked against a measurement that did not select it. Prints per file the median, each trial and its
verdict, and the ratio of medians to the first file; the last line printed is JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from launcher import trials
from srl_hpc import config


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("experiments", type=Path, nargs="+", help="experiment files; the first is the reference")
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--warmup", type=float, default=5.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, help="where the runs write (default: a temporary directory)")
    args = p.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="experiment-files-"))
    candidates = [(str(path), config.load(path)) for path in args.experiments]  # every file checked before any run
    rows = trials.round_robin(
        candidates,
        args.seconds,
        args.warmup,
        args.repeats,
        out,
        say=lambda line: print(line, file=sys.stderr, flush=True),
    )
    reference = rows[0]["median_fps"]
    width = max(len(label) for label, _ in candidates)
    print(
        f"\n== {args.repeats} trials of {args.seconds:g} s each (warm-up {args.warmup:g} s), round-robin; "
        f"training frames/s"
    )
    for (label, _), row in zip(candidates, rows):
        row["file"] = label
        row["ratio"] = round(row["median_fps"] / reference, 3) if row["median_fps"] and reference else None
        trial_figures = " ".join(f"{x:,.0f}" if x is not None else "failed" for x in row["fps"])
        median = f"{row['median_fps']:>9,.0f}" if row["median_fps"] else f"{'failed':>9}"
        ratio = f"{row['ratio']:.2f}x" if row["ratio"] else "-"
        print(f"{label:<{width}} {median}  {ratio:>6}  [{trial_figures}]  {' '.join(map(str, row['verdicts']))}")
    print(json.dumps({"seconds": args.seconds, "warmup": args.warmup, "repeats": args.repeats, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
