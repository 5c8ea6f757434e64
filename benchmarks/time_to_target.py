"""Time to target: run an experiment once per seed in local mode, one after the other, and print how long
each took to reach its stop.target_return (or that it did not, within stop.wall_time).

    python benchmarks/time_to_target.py experiments/cartpole_dqn.yaml --seeds 1,2,3,4,5 [--set KEY=VALUE ...]
    python benchmarks/time_to_target.py experiments/cartpole_ppo.yaml --backends sync,vector,envpool   # learning parity

With --backends, every seed runs on each env backend in turn (env.backend), and the table is per backend:
the same task learns alike on each, or a backend changes it.

Seconds are the controller's wall time (from rendezvous to the stop decision's summary). The last line
printed is JSON; each run's directory is kept under --out for srl-trace.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import tempfile
from pathlib import Path

from launcher import local, runs
from srl_hpc import config
from srl_hpc.envs.backends import resolve_backend


def run_seed(exp: config.Experiment, seed: int, out: Path) -> dict:
    exp, run = runs.create(config.replace(exp, seed=seed), out / f"seed-{seed}")
    code = local.run(exp, run, out=io.StringIO())
    summary = json.loads(run.summary.read_text()) if run.summary.exists() else {}
    reached = summary.get("reason", "").startswith("target reached")
    return {
        "seed": seed,
        "backend": exp.env.backend,
        "reached": reached,
        "seconds": summary.get("wall_time"),
        "env_frames": summary.get("env_frames"),
        "mean_return_at_stop": summary.get("mean_return_at_stop"),
        "exit_code": code,
        "run_dir": str(run.root),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("experiment", type=Path)
    p.add_argument("--seeds", default="1,2,3,4,5")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--backends", help="comma-separated env backends (sync, vector, envpool): each seed on each")
    p.add_argument("--out", type=Path, help="keep the runs here (default: a temporary directory)")
    args = p.parse_args(argv)
    exp = config.with_overrides(config.load(args.experiment), args.set) if args.set else config.load(args.experiment)
    if exp.stop.target_return is None:
        raise SystemExit(f"{args.experiment}: stop.target_return is not set: there is no target to time")
    out = Path(args.out or tempfile.mkdtemp(prefix=f"ttt-{exp.name}-"))
    backends = args.backends.split(",") if args.backends else [exp.env.backend]
    for backend in backends:  # a backend that cannot serve the id says so now, not after the other runs
        try:
            resolve_backend(config.with_overrides(exp, [f"env.backend={backend}"]).env)
        except ValueError as e:
            raise SystemExit(f"--backends: {e}") from None
    rows, totals = [], {}
    for backend in backends:
        exp_b = config.with_overrides(exp, [f"env.backend={backend}"])
        runs_b = []
        for seed in [int(s) for s in args.seeds.split(",")]:
            runs_b.append(run_seed(exp_b, seed, out / backend))
            r = runs_b[-1]
            if r["seconds"] is None:  # no summary: the run failed before it could write one
                print(f"{backend} seed {seed}: FAILED (exit code {r['exit_code']}), see {r['run_dir']}", flush=True)
                continue
            print(
                f"{backend} seed {seed}: {'reached' if r['reached'] else 'NOT reached'} in {r['seconds']}s, "
                f"{r['env_frames']:,} env frames, mean return at stop {r['mean_return_at_stop']}",
                flush=True,
            )
        reached = [r["seconds"] for r in runs_b if r["reached"]]
        totals[backend] = {"reached": len(reached), "median_seconds": statistics.median(reached) if reached else None}
        rows += runs_b
    for backend, t in totals.items():
        print(
            f"{exp.name} [{backend}]: target {exp.stop.target_return:g} reached by {t['reached']} of "
            f"{len(rows) // len(backends)} seeds within {exp.stop.wall_time:g}s; median "
            + (f"{t['median_seconds']}s" if t["reached"] else "-")
        )
    print(
        json.dumps(
            {
                "experiment": exp.name,
                "target": exp.stop.target_return,
                "wall_time_limit": exp.stop.wall_time,
                "overrides": args.set,
                "backends": totals,
                "runs": rows,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
