"""`srl-launch tune` against an exhaustive grid over the same knobs, in one invocation on one machine.

    python benchmarks/tune_vs_grid.py experiments/cartpole_ppo.yaml --keys workers.placement,workers.actor.count

First `tune` runs as a user would run it (its defaults but --keys; its wall time is printed). Then every
setting of the grid over those knobs' values (launcher/tune.py's KNOBS; the experiment as given, the tuned
setting and each valid combination once) is measured --repeats times, round-robin so that drift in the
machine's speed hits every setting alike, each trial as long as tune's. Prints per setting the median
training frames/s and the verdicts, then: the tuned setting against the experiment as given (the speed-up)
and against the grid's best (the fraction of it tune found). The last line printed is JSON.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

from launcher import trials, tune, tune_knobs
from srl_hpc import config


def grid(exp: config.Experiment, keys: tuple[str, ...], limits: dict) -> list[dict]:
    """Every valid setting over the knobs' values, the experiment's own values included."""
    given = tune_knobs.read(exp, keys)
    values = [sorted(set(tune_knobs.BY_KEY[k].values) | {given[k]}, key=str) for k in keys]
    out, seen = [], set()
    for combo in itertools.product(*values):
        setting = tune_knobs.normalized(dict(zip(keys, combo)))
        if any(tune_knobs.skip_reason(setting, k, setting[k], limits) for k in keys if setting[k] != given[k]):
            continue
        try:
            config.with_overrides(exp, tune_knobs.overrides(setting, exp))
        except config.ConfigError:
            continue
        if tuple(sorted(setting.items())) not in seen:
            seen.add(tuple(sorted(setting.items())))
            out.append(setting)
    return out


def label(setting: dict, given: dict) -> str:
    return ", ".join(f"{k.removeprefix('workers.')}={v}" for k, v in setting.items() if given[k] != v) or "as given"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("experiment", type=Path)
    p.add_argument("--keys", required=True, help="comma-separated knobs (launcher/tune.py KNOBS)")
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--warmup", type=float, default=5.0)
    p.add_argument("--budget", type=float, default=600.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, help="where the runs write (default: a temporary directory)")
    args = p.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="tune-vs-grid-"))
    keys = tuple(args.keys.split(","))
    exp = config.load(args.experiment)
    given = tune_knobs.read(exp, keys)

    began = time.monotonic()
    outcome = tune.tune(
        exp,
        args.experiment,
        out / "tune",
        out / "tuned.yaml",
        keys=keys,
        seconds=args.seconds,
        warmup=args.warmup,
        budget=args.budget,
        say=lambda line: print(line, file=sys.stderr, flush=True),
    )
    tune_seconds = time.monotonic() - began

    settings = grid(exp, keys, tune_knobs.limits(exp, False))
    if outcome.best.setting not in settings:
        settings.append(outcome.best.setting)
    measured = trials.round_robin(
        [(label(s, given), config.with_overrides(exp, tune_knobs.overrides(s, exp))) for s in settings],
        args.seconds,
        args.warmup,
        args.repeats,
        out / "grid",
        say=lambda line: print(f"[grid] {line}", file=sys.stderr, flush=True),
    )
    rows = [{"setting": label(s, given), **m} for s, m in zip(settings, measured)]
    base_i, tuned_i = settings.index(given), settings.index(outcome.best.setting)
    best_i = max((i for i in range(len(rows)) if rows[i]["median_fps"]), key=lambda i: rows[i]["median_fps"])
    width = max(len(r["setting"]) for r in rows)
    print(
        f"\n== {args.experiment.name}: grid over {', '.join(keys)}, {args.repeats} trials of {args.seconds:g} s "
        f"each, medians"
    )
    for i, r in enumerate(rows):
        mark = " <- tuned" if i == tuned_i else " <- as given" if i == base_i else ""
        mark += " <- grid's best" if i == best_i else ""
        fps = f"{r['median_fps']:>10,.0f}" if r["median_fps"] else f"{'failed':>10}"
        print(f"{r['setting']:<{width}} {fps}  {' '.join(map(str, r['verdicts']))}{mark}")
    speedup = rows[tuned_i]["median_fps"] / rows[base_i]["median_fps"]
    of_best = rows[tuned_i]["median_fps"] / rows[best_i]["median_fps"]
    print(
        f"tune: {tune_seconds:.0f} s, {len(outcome.trials)} trials; tuned / as given {speedup:.2f}x; "
        f"tuned / grid's best {of_best:.2f}"
    )
    print(
        json.dumps(
            {
                "experiment": str(args.experiment),
                "keys": keys,
                "tune_seconds": round(tune_seconds, 1),
                "tune_trials": len(outcome.trials),
                "changes": outcome.changes,
                "rows": rows,
                "speedup": round(speedup, 3),
                "of_grid_best": round(of_best, 3),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
