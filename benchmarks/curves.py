"""Learning curves of several runs in one figure: each run's mean return over its last stop.return_window
episodes (the controller's metrics.csv column mean_return) against env frames, one line per run, for the
docs (docs/learning-curves.md). Also prints, per run, the final mean return (summary.json), the first row
at which the mean reached --target (env frames and controller wall time), and env frames per second.

    python benchmarks/curves.py /var/tmp/curves/halfcheetah-s1 /var/tmp/curves/halfcheetah-s2 \
        /var/tmp/curves/halfcheetah-s3 --out docs/curves/halfcheetah_ppo.png --title "PPO on HalfCheetah-v5" \
        --target 1500

Each line is labelled with the run's seed (RUN/experiment.yaml) unless --labels says otherwise. metrics.csv
has one row per progress line (monitor.status_interval seconds apart), so the first crossing of the target
is known to that resolution; with --episodes the curves (and the crossing) come instead from the actors'
traces, the mean of the last 20 episodes after every episode, placed on the frames axis by the
controller's progress rows (as `srl-trace RUN --plot` does). The last line printed is JSON.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import yaml  # noqa: E402


def read_metrics(run_dir: Path) -> list[dict]:
    with open(run_dir / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    out = []
    for row in rows:
        try:
            mean_return = float(row["mean_return"]) if row.get("mean_return") not in (None, "") else math.nan
            out.append(
                {
                    "wall_time": float(row["wall_time"]),
                    "env_frames": int(float(row["env_frames"])),
                    "mean_return": mean_return,
                }
            )
        except (KeyError, ValueError):
            continue
    return out


def episode_rows(run_dir: Path, window: int = 20) -> list[dict]:
    """After each episode (all actors' episodes in time order): the mean of the last `window` returns, with the
    time since the run's start and env frames interpolated from the controller's progress rows."""
    import numpy as np

    from srl_hpc.trace.reader import read_run

    run = read_run(run_dir)
    tabs = [w.table("episode") for w in run.hosting("actor") if "episode_return" in w.table("episode")]
    progress = [w.table("progress") for w in run.hosting("controller") if "env_frames" in w.table("progress")]
    if not tabs or not progress:
        raise SystemExit(f"{run_dir}: no episode or progress traces")
    t = np.concatenate([tab["t"] for tab in tabs])
    r = np.concatenate([tab["episode_return"] for tab in tabs]).astype(float)
    order = np.argsort(t)
    t, r = t[order], r[order]
    starts = [float(w.attrs["started"]) for w in run.hosting("controller") if "started" in w.attrs]
    t0 = min(starts) if starts else run.t0
    # frames between progress rows are interpolated, and before the first row from 0 at the controller's start
    pt, pf = np.asarray(progress[0]["t"], float), np.asarray(progress[0]["env_frames"], float)
    frames = np.interp(t, np.concatenate([[t0], pt]), np.concatenate([[0.0], pf]))
    moving = np.convolve(r, np.ones(window) / window, mode="valid")
    return [
        {"wall_time": float(t[i] - t0), "env_frames": int(frames[i]), "mean_return": float(moving[i - window + 1])}
        for i in range(window - 1, len(r))
    ]


def seed_of(run_dir: Path):
    try:
        return yaml.safe_load((run_dir / "experiment.yaml").read_text()).get("seed")
    except (OSError, yaml.YAMLError, AttributeError):
        return None


def describe(run_dir: Path, rows: list[dict], target: float | None) -> dict:
    summary = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").exists() else {}
    first = next((r for r in rows if target is not None and r["mean_return"] >= target), None)
    frames = summary.get("env_frames", rows[-1]["env_frames"] if rows else None)
    seconds = summary.get("wall_time", rows[-1]["wall_time"] if rows else None)
    return {
        "run_dir": str(run_dir),
        "seed": seed_of(run_dir),
        "mean_return": summary.get("mean_return"),
        "last_row_mean_return": rows[-1]["mean_return"] if rows else None,
        "env_frames": frames,
        "wall_time": seconds,
        "fps": round(frames / seconds) if frames and seconds else None,
        "reason": summary.get("reason"),
        "target": target,
        "target_env_frames": first["env_frames"] if first else None,
        "target_wall_time": first["wall_time"] if first else None,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", type=Path, help="run directories (each holds metrics.csv)")
    p.add_argument("--out", type=Path, required=True, help="PNG to write")
    p.add_argument("--title", default="mean return over env frames")
    p.add_argument("--labels", help="comma-separated line labels, one per run (default: 'seed N')")
    p.add_argument("--target", type=float, help="draw this return as a dashed line and report its first crossing")
    p.add_argument(
        "--episodes",
        action="store_true",
        help="curves from the actors' episode traces (a point per episode), not metrics.csv's rows",
    )
    args = p.parse_args(argv)
    labels = args.labels.split(",") if args.labels else [None] * len(args.runs)
    if len(labels) != len(args.runs):
        raise SystemExit("--labels: one label per run directory")

    fig, ax = plt.subplots(figsize=(8, 4.5))
    results = []
    for run_dir, label in zip(args.runs, labels):
        rows = episode_rows(run_dir) if args.episodes else read_metrics(run_dir)
        info = describe(run_dir, rows, args.target)
        results.append(info)
        label = label or (f"seed {info['seed']}" if info["seed"] is not None else run_dir.name)
        ax.plot(
            [r["env_frames"] / 1e6 for r in rows],
            [r["mean_return"] for r in rows],
            marker=".",
            markersize=3,
            linewidth=1.5,
            label=label,
        )
        reached = (
            f"{info['target_env_frames']:,} frames, {info['target_wall_time']:.0f} s"
            if info["target_env_frames"] is not None
            else "not reached"
        )
        print(
            f"{label}: mean return {info['mean_return']} at {info['env_frames']:,} env frames, "
            f"{info['fps']} frames/s; target {args.target}: {reached}  ({run_dir})"
        )
    if args.target is not None:
        ax.axhline(args.target, color="gray", linestyle="--", linewidth=1, label=f"target {args.target:g}")
    ax.set(xlabel="env frames (millions)", ylabel="mean return, last 20 episodes", title=args.title)
    if args.episodes:
        ax.set_xlabel("env frames (millions; after each episode, from the traces)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    plt.close(fig)
    print(json.dumps({"out": str(args.out), "runs": results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
