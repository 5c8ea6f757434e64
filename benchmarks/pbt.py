"""Population-based training against its members' fixed settings: time to target, one invocation.

    python benchmarks/pbt.py experiments/cartpole_pbt.yaml --seeds 1,2,3 --cap 150

For each seed, one after the other: the population as the experiment has it (its run stops when any member
reaches stop.target_return), then each member's starting values, fixed, as ordinary runs with one member's
workers each (population.size 0), all of them at once: the same settings on the same machine, as a user
without PBT would run them (a sweep). A run that does not reach the target within --cap seconds counts as
never (inf). The figures: the median over seeds of the population's seconds, and of each fixed setting's;
the population is compared with the median of the fixed settings' medians ("the median fixed member").

Seconds are the controller's wall time (from rendezvous). Env frames per member (a population's frames /
size) say what each took in samples. The last line printed is JSON; each run's directory is kept under --out.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from launcher import local, runs
from srl_hpc import config


def outcome(run_dir: Path, size: int) -> dict:
    summary = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").exists() else {}
    reached = summary.get("reason", "").startswith("target reached")
    frames = summary.get("env_frames", 0) / max(1, size)
    return {
        "reached": reached,
        "seconds": summary.get("wall_time") if reached else math.inf,
        "frames_per_member": frames if reached else math.inf,
        "reason": summary.get("reason"),
        "run_dir": str(run_dir),
    }


def shown(seconds: float) -> str:
    return "never" if seconds == math.inf else f"{seconds:.1f}s"


def run_once(exp: config.Experiment, run_dir: Path) -> dict:
    exp, run = runs.create(exp, run_dir)
    local.run(exp, run, out=io.StringIO())
    return outcome(run.root, exp.population.size)


def run_together(experiment: Path, seed: int, settings: list[list[str]], dirs: list[Path]) -> list[dict]:
    """Several runs of the experiment at once, one per list of overrides, each to its end."""
    srl_launch = Path(sys.executable).parent / "srl-launch"
    procs = [
        subprocess.Popen(
            [
                str(srl_launch),
                str(experiment),
                "--run-dir",
                str(d),
                "--seed",
                str(seed),
                *[a for o in overrides for a in ("--set", o)],
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for overrides, d in zip(settings, dirs)
    ]
    for proc in procs:
        proc.wait()
    return [outcome(d, 0) for d in dirs]


def fixed_settings(exp: config.Experiment) -> list[tuple[str, list[str]]]:
    """Each member's starting values as overrides of a run without a population."""
    size, init = exp.population.size, exp.population.init
    plain = ["population.size=0", "population.init={}", "population.explore={}"]
    return [
        (
            ", ".join(f"{k} {v[m]:g}" for k, v in init.items()),
            plain + [f"algorithm.{k}={v[m]!r}" for k, v in init.items()],
        )
        for m in range(size)
    ]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("experiment", type=Path)
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--cap", type=float, default=150.0, help="seconds a run may take to reach the target")
    p.add_argument("--out", type=Path, help="keep the runs here (default: a temporary directory)")
    args = p.parse_args(argv)
    exp = config.with_overrides(config.load(args.experiment), [f"stop.wall_time={args.cap}"])
    if not exp.population.size or exp.stop.target_return is None:
        raise SystemExit(f"{args.experiment}: needs population.size and stop.target_return")
    out = Path(args.out or tempfile.mkdtemp(prefix=f"pbt-{exp.name}-"))
    settings = fixed_settings(exp)
    results: dict[str, list[dict]] = {"population": [], **{name: [] for name, _ in settings}}
    for seed in [int(s) for s in args.seeds.split(",")]:
        seeded = config.replace(exp, seed=seed)
        results["population"].append(run_once(seeded, out / "population" / f"seed-{seed}"))
        print(f"seed {seed} population: {shown(results['population'][-1]['seconds'])}", flush=True)
        dirs = [out / f"fixed-{k}" / f"seed-{seed}" for k in range(len(settings))]
        together = run_together(args.experiment, seed, [[f"stop.wall_time={args.cap}", *o] for _, o in settings], dirs)
        for (name, _), result in zip(settings, together):
            results[name].append(result)
            print(f"seed {seed} {name}: {shown(result['seconds'])}", flush=True)
    medians = {name: statistics.median(r["seconds"] for r in rs) for name, rs in results.items()}
    frames = {name: statistics.median(r["frames_per_member"] for r in rs) for name, rs in results.items()}
    fixed_median = statistics.median(medians[name] for name, _ in settings)
    print(f"\n{'run':<28}{'median s':>10}{'frames/member':>15}   per seed (s)")
    for name, rs in results.items():
        per_seed = ", ".join(shown(r["seconds"]) for r in rs)
        print(f"{name:<28}{shown(medians[name]):>10}{frames[name]:>15,.0f}   {per_seed}")
    print(f"median fixed member: {shown(fixed_median)}; population: {shown(medians['population'])}")
    print(
        json.dumps(
            {
                "experiment": str(args.experiment),
                "cap": args.cap,
                "medians": medians,
                "frames_per_member": frames,
                "median_fixed": fixed_median,
                "runs": results,
                "out": str(out),
            },
            default=str,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
