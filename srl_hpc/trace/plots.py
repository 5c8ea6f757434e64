"""`srl-trace RUN --plot DIR`: PNG figures of a run's traces (matplotlib, Agg: works on a login node).

throughput.png     frames per second over time for each worker kind
latency.png        a histogram per stage (log time axis), p50 and p99 marked
timeline.png       per worker, binned: the fraction of each bin spent in each activity
returns.png        episode returns over time and over env frames, with a moving mean
distributions.png  inference batch sizes and policy lag at the trainer
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import cast

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402
from matplotlib import ticker  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from srl_hpc.trace import analysis, learning  # noqa: E402
from srl_hpc.trace.reader import RunTrace  # noqa: E402

ACTIVITY_COLORS = {
    "stepping": "tab:green",
    "waiting_inference": "tab:orange",
    "sending": "tab:red",
    "computing": "tab:blue",
    "replying": "tab:cyan",
    "pulling_params": "tab:purple",
    "waiting": "tab:gray",
    "publishing": "tab:purple",
    "storing": "tab:olive",
    "updating_priorities": "tab:pink",
    "sampling": "tab:brown",
    "waiting_leave": "gold",
}
KIND_COLORS = {"actor": "tab:green", "policy": "tab:orange", "trainer": "tab:blue", "buffer": "tab:brown"}


def write_plots(run: RunTrace, summary: dict, out_dir: str | Path) -> list[Path]:
    """Write every figure to out_dir (created if needed); returns the paths written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    edges = _time_bins(run, summary)
    title = summary.get("experiment") or run.run_dir.name
    figures = {
        "throughput.png": lambda: _throughput(run, edges, title),
        "latency.png": lambda: _latency(run, summary, title),
        "timeline.png": lambda: _timeline(run, edges, title),
        "returns.png": lambda: _returns(run, title),
        "distributions.png": lambda: _distributions(summary, title),
    }
    ratings = [w.table("rating") for w in run.hosting("rating") if "elo" in w.table("rating")]
    if ratings:  # self-play: the rating workers' Elo of every version
        figures["ratings.png"] = lambda: _ratings(ratings[0], title)
    written = []
    for name, draw in figures.items():
        fig = draw()
        fig.savefig(out_dir / name, dpi=110)
        plt.close(fig)
        written.append(out_dir / name)
    return written


def _time_bins(run: RunTrace, summary: dict) -> np.ndarray:
    """Bins about a 60th of the traced time, at least half a second, from the first activity to the last."""
    windows: Sequence[tuple[float, float] | None] = [analysis.span(w, run.t0) for w in run.workers]
    windows = cast(list[tuple[float, float]], [w for w in windows if w])
    start = min(w[0] for w in windows) if windows else 0.0
    end = max(w[1] for w in windows) if windows else summary["traced_seconds"]
    width = max(0.5, (end - start) / 60)
    return np.arange(start, end + width, width)


def _throughput(run: RunTrace, edges, title) -> Figure:
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for kind, (unit, *_) in analysis.THROUGHPUT.items():
        workers = run.hosting(kind)
        if not workers:
            continue
        rate = sum(analysis.rate_over_time(w, kind, edges, run.t0) for w in workers)
        ax.stairs(
            rate,
            edges,
            color=KIND_COLORS[kind],
            linewidth=3 if kind == "actor" else 1.5,
            label=f"{analysis.KIND_LABELS[kind]}: {unit}/s",
        )
    ax.set(
        xlabel=f"time since run start (s), {edges[1] - edges[0]:.2g}s bins",
        ylabel="per second",
        title=f"{title}: throughput over time",
    )
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3, fontsize=8)
    fig.tight_layout()
    return fig


def _latency(run: RunTrace, summary: dict, title) -> Figure:
    stages = [s for s, stats in summary["latency"].items() if stats["n"]]
    cols = 3
    rows = max(1, -(-len(stages) // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(12, 2.8 * rows), squeeze=False)
    for ax, stage in zip(axes.flat, stages):
        label, kind, table, field = analysis.STAGES[stage]
        ms = run.pooled(kind, table, field) * 1e3
        ms = ms[ms > 0]
        stats = summary["latency"][stage]
        if len(ms):
            bins = np.logspace(np.log10(ms.min()), np.log10(ms.max()) + 1e-6, 50)
            ax.hist(ms, bins=bins, color=KIND_COLORS[kind], alpha=0.8)
            ax.set_xscale("log")
            ax.xaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.xaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
            ax.xaxis.set_minor_formatter(ticker.NullFormatter())
        for p, style in (("p50", "-"), ("p99", "--")):
            ax.axvline(
                stats[p] * 1e3, color="black", linestyle=style, linewidth=1, label=f"{p} {stats[p] * 1e3:.3g} ms"
            )
        ax.set_title(f"{label} (n={stats['n']:,})", fontsize=9)
        ax.set_xlabel("ms", fontsize=8)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(stages) :]:
        ax.axis("off")
    fig.suptitle(f"{title}: latency per stage")
    fig.tight_layout()
    return fig


def _timeline(run: RunTrace, edges, title) -> Figure:
    workers = [w for w in run.workers if analysis.activities(w)]
    if not workers:
        fig, ax = plt.subplots(figsize=(10, 2))
        ax.text(0.5, 0.5, "no actor, policy or trainer traces", ha="center", va="center")
        ax.axis("off")
        return fig
    fig, axes = plt.subplots(len(workers), 1, figsize=(10, 1.5 * len(workers) + 1), sharex=True, squeeze=False)
    for ax, worker in zip(axes[:, 0], workers):
        fractions = analysis.activity_timeline(worker, edges, run.t0)
        names = list(fractions)
        ax.stackplot(
            edges[:-1],
            *[np.clip(fractions[n], 0, 1) for n in names],
            step="post",
            colors=[ACTIVITY_COLORS[n] for n in names],
            labels=[analysis.ACTIVITY_LABELS[n] for n in names],
        )
        ax.set_ylim(0, 1)
        ax.set_ylabel(worker.name, rotation=0, ha="right", va="center")
        ax.set_yticks([0, 0.5, 1])
        handles, labels = ax.get_legend_handles_labels()  # top to bottom, as stacked
        ax.legend(handles[::-1], labels[::-1], loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=7)
    axes[-1, 0].set_xlabel("time since run start (s); white = idle or untraced")
    fig.suptitle(f"{title}: fraction of each {edges[1] - edges[0]:.2g}s bin spent per activity")
    fig.tight_layout()
    return fig


POLICY_COLOURS = [("tab:green", "black"), ("tab:orange", "tab:red"), ("tab:cyan", "tab:blue")]  # (episodes, mean)


def _returns(run: RunTrace, title) -> Figure:
    """Against time and, from the controller's progress rows, against env frames: a resumed run's time axis
    has its gaps between attempts, its frames axis does not."""
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5), sharey=True)
    tabs = [w.table("episode") for w in run.hosting("actor") if "episode_return" in w.table("episode")]
    progress = [w.table("progress") for w in run.hosting("controller") if "env_frames" in w.table("progress")]
    if tabs:
        t = np.concatenate([tab["t"] for tab in tabs])
        r = np.concatenate([tab["episode_return"] for tab in tabs])
        policy = np.concatenate([tab["policy"] if run.policies else np.zeros(len(tab["t"]), int) for tab in tabs])
        order = np.argsort(t)
        t, r, policy = t[order], r[order], policy[order]
        frames = None
        if progress and len(progress[0]["t"]):
            frames = np.interp(t, progress[0]["t"], progress[0]["env_frames"])
        for k, name in enumerate(run.policies or [""]):  # several policies: each one's episodes and mean apart
            mine = policy == k
            window = min(learning.RETURN_WINDOW, int(mine.sum()))
            moving = np.convolve(r[mine], np.ones(window) / window, mode="valid") if window else None
            label = f"{name}: " if name else ""
            dots, line = POLICY_COLOURS[k % len(POLICY_COLOURS)]
            for ax, x in ((axes[0], t[mine] - run.t0), (axes[1], None if frames is None else frames[mine])):
                if x is None:
                    continue
                ax.scatter(x, r[mine], s=3, alpha=0.25, color=dots, label=f"{label}episode return")
                if moving is not None:
                    ax.plot(x[window - 1 :], moving, color=line, label=f"{label}mean of last {window} episodes")
    axes[0].set(xlabel="time since run start (s)", ylabel="return", title=f"{title}: episode return over time")
    axes[1].set(xlabel="env frames (the controller's count)", title="... over env frames")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    return fig


def _ratings(table, title) -> Figure:
    """Each version's Elo after the last round (the random player at 0), the fixed players as lines."""
    from srl_hpc.envs.fixed_players import FIXED_PLAYERS

    last = table["round"] == table["round"].max()
    versions, elo = table["version"][last], table["elo"][last]
    mine = versions >= 0
    order = np.argsort(versions[mine])
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.plot(versions[mine][order], elo[mine][order], marker="o", color="tab:blue", label="snapshot")
    for k, name in enumerate(FIXED_PLAYERS):
        fixed = elo[versions == -1 - k]
        if len(fixed):
            ax.axhline(
                fixed[0], linestyle="--", color=POLICY_COLOURS[k % len(POLICY_COLOURS)][1], label=f"{name} player"
            )
    ax.set(
        xlabel="version (trainer updates)",
        ylabel="Elo (random player = 0)",
        title=f"{title}: rating over versions (after round {int(table['round'].max())})",
    )
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig


def _distributions(summary: dict, title) -> Figure:
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for ax, key, xlabel in (
        (left, "batch_size", "observations per inference batch"),
        (right, "policy_lag", "policy lag at the trainer (versions)"),
    ):
        hist = summary[key]["histogram"]
        ax.bar([h["bucket"] for h in hist], [h["count"] for h in hist], color="tab:blue")
        ax.set(xlabel=xlabel, ylabel="count")
        if summary[key]["n"]:
            ax.set_title(
                f"mean {summary[key]['mean']:.1f}, p50 {summary[key]['p50']:g}, p99 {summary[key]['p99']:g}", fontsize=9
            )
    fig.suptitle(f"{title}: distributions")
    fig.tight_layout()
    return fig
