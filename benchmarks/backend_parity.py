"""Backend parity of learning: for Acrobot-v1 and CartPole-v1, the shipped experiment (experiments/acrobot_ppo.yaml,
experiments/cartpole_ppo.yaml) with identical settings under each env backend (default: auto, which picks
envpool for Acrobot and gymnasium's vector CartPole, against sync), each seed in local mode one after the
other; prints the median time to target (seconds and env frames) per (env, backend).

    python benchmarks/backend_parity.py                                     # auto vs sync, seeds 1,2,3
    python benchmarks/backend_parity.py --backends auto,envpool,sync --set model.separate_critic=false
    python benchmarks/backend_parity.py --envs acrobot --seeds 1,2,3,4,5 --wall-time 300

A run that does not reach its target within --wall-time counts as not reached (its median is over the seeds
that did). --set applies to every run. The last line printed is JSON; the runs are kept under --out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: time_to_target sits next to it

from time_to_target import run_seed  # noqa: E402

from srl_hpc import config  # noqa: E402
from srl_hpc.envs.backends import resolve_backend  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENTS = {
    "acrobot": ROOT / "experiments" / "acrobot_ppo.yaml",
    "cartpole": ROOT / "experiments" / "cartpole_ppo.yaml",
}


def median(values):
    return statistics.median(values) if values else None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", default="acrobot,cartpole", help=f"comma-separated, of {', '.join(EXPERIMENTS)}")
    p.add_argument("--backends", default="auto,sync", help="comma-separated env backends (auto, sync, vector, envpool)")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--wall-time", type=float, default=180.0, help="each run's stop.wall_time (seconds)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="an override for every run")
    p.add_argument("--out", type=Path, help="keep the runs here (default: a temporary directory)")
    args = p.parse_args(argv)
    out = Path(args.out or tempfile.mkdtemp(prefix="backend-parity-"))
    seeds = [int(s) for s in args.seeds.split(",")]
    plans = []
    for name in args.envs.split(","):
        exp = config.with_overrides(config.load(EXPERIMENTS[name]), [*args.set, f"stop.wall_time={args.wall_time}"])
        for backend in args.backends.split(","):
            exp_b = config.with_overrides(exp, [f"env.backend={backend}"])
            try:
                plans.append((name, backend, resolve_backend(exp_b.env), exp_b))  # what auto picks, said up front
            except ValueError as e:
                raise SystemExit(f"--backends: {e}") from None
    results = []
    for name, backend, resolved, exp in plans:
        runs = []
        for seed in seeds:
            r = run_seed(exp, seed, out / name / backend)
            runs.append(r)
            if r["seconds"] is None:
                print(
                    f"{name} {backend} ({resolved}) seed {seed}: FAILED (exit code {r['exit_code']}), "
                    f"see {r['run_dir']}",
                    flush=True,
                )
            else:
                print(
                    f"{name} {backend} ({resolved}) seed {seed}: {'reached' if r['reached'] else 'NOT reached'} in "
                    f"{r['seconds']}s, {r['env_frames']:,} env frames, "
                    f"mean return at stop {r['mean_return_at_stop']}",
                    flush=True,
                )
        reached = [r for r in runs if r["reached"]]
        results.append(
            {
                "env": exp.env.id,
                "backend": backend,
                "resolved": resolved,
                "target": exp.stop.target_return,
                "reached": len(reached),
                "seeds": len(seeds),
                "median_seconds": median([r["seconds"] for r in reached]),
                "median_env_frames": median([r["env_frames"] for r in reached]),
                "runs": runs,
            }
        )
    print()
    print(f"{'env':<12} {'backend':<16} {'reached':>8} {'median s':>9} {'median frames':>14}")
    for r in results:
        s = "-" if r["median_seconds"] is None else f"{r['median_seconds']:.1f}"
        f = "-" if r["median_env_frames"] is None else f"{r['median_env_frames']:,.0f}"
        backend = f"{r['backend']} ({r['resolved']})"
        print(f"{r['env']:<12} {backend:<16} {r['reached']:>4}/{r['seeds']:<3} {s:>9} {f:>14}")
    print(
        json.dumps(
            {
                "benchmark": "backend_parity",
                "wall_time_limit": args.wall_time,
                "overrides": args.set,
                "results": results,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
