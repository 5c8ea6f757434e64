"""`srl-trace report SWEEP`: a sweep's scores over seeds as the field reports them: interquartile mean (IQM),
mean, median and optimality gap with stratified bootstrap 95% confidence intervals, and performance profiles
("Deep RL at the Edge of the Statistical Precipice", Agarwal et al. 2021), computed by its `rliable` library.

Each member of the sweep (SWEEP/sweep.json) gives two scores from its curve (metrics.csv's progress rows, and
the end of the run from summary.json): the final one (the score at the end) and the area under its curve
(the mean over the run's env frames, by the trapezoid rule; each run's own frames, so runs that stopped
early at a target are compared over their own horizon). The
score is the evaluation workers' mean return where every member has one, else the training mean return
(`--score`). A member's task is its env id, its configuration the sweep overrides other than env.id, so a
sweep over env.id gives one configuration scored over several tasks (stratified: resampled within each).
With reference scores (`--reference ENV=LOW:HIGH`, e.g. random and human for Atari) every score is
normalised to (score - LOW) / (HIGH - LOW), and the optimality gap is measured to 1; without them, to
`--target` (default: the experiment's stop.target_return), or not at all.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from srl_hpc import config
from srl_hpc.rundir import RunDir

BOOTSTRAP_REPS = 2000
CONFIDENCE = 0.95
STATISTICS = ("iqm", "mean", "median", "optimality_gap")
KIND_LABELS = {"final": "final", "auc": "area under the curve of the"}


class ReportError(ValueError):
    pass


@dataclass(frozen=True)
class MemberScore:
    config: str
    task: str
    seed: int
    final: float
    auc: float
    frames: int


def _curve(run: RunDir, column: str) -> tuple[np.ndarray, np.ndarray]:
    """(env frames, score) of each progress row that has a `column` value, and of the run's end (summary.json:
    the mean return when it stopped, or its last evaluation round's), which may come after the last row."""
    rows = []
    if run.metrics.exists():
        with open(run.metrics, newline="") as f:
            rows = [
                (float(r["env_frames"]), float(r[column])) for r in csv.DictReader(f) if r.get(column) not in (None, "")
            ]
    try:
        summary = json.loads(run.summary.read_text())
    except (OSError, ValueError):
        summary = {}
    end = (
        summary.get("mean_return")
        if column == "mean_return"
        else (summary.get("evaluation") or {}).get("latest", {}).get("mean_return")
    )
    if end is not None and (not rows or summary.get("env_frames", 0) > rows[-1][0]):
        rows.append((float(summary["env_frames"]), float(end)))
    return np.array([f for f, _ in rows]), np.array([v for _, v in rows])


def member_score(member: dict, column: str) -> MemberScore:
    """A sweep.json member's final and area-under-curve scores from its metrics.csv's `column`."""
    run = RunDir(member["run_dir"])
    exp = config.load(run.experiment)
    label = f"{member['run_dir']} ({member.get('config') or 'seed'} {member['seed']})"
    frames, scores = _curve(run, column)
    if len(scores) == 0:
        raise ReportError(f"{label}: no {column} in its metrics.csv or summary.json (did it run?)")
    span = frames[-1] - frames[0]
    auc = float(np.trapezoid(scores, frames) / span) if len(scores) > 1 and span > 0 else float(scores[-1])
    overrides = [o for o in member.get("overrides", []) if not o.startswith("env.id=")]
    return MemberScore(
        "+".join(overrides) or "(as written)", exp.env.id, member["seed"], float(scores[-1]), auc, int(frames[-1])
    )


def score_column(members: list[dict], choice: str) -> str:
    """metrics.csv's column of the score: eval_return (evaluation) or mean_return (training)."""
    if choice == "train":
        return "mean_return"
    evaluated = all(_curve(RunDir(m["run_dir"]), "eval_return")[1].size for m in members)
    if choice == "eval" and not evaluated:
        raise ReportError("--score eval: not every member has evaluation returns (workers.eval.count >= 1)")
    return "eval_return" if evaluated else "mean_return"


def matrices(scores: list[MemberScore], kind: str, references: dict[str, tuple[float, float]]) -> dict[str, np.ndarray]:
    """configuration -> (seeds x tasks) matrix of `kind` ("final" or "auc") scores, normalised by `references`.
    Every configuration needs the same number of seeds on every task (the bootstrap resamples within each)."""
    tasks = sorted({s.task for s in scores})
    out = {}
    for name in dict.fromkeys(s.config for s in scores):
        columns = []
        for task in tasks:
            values = [getattr(s, kind) for s in scores if s.config == name and s.task == task]
            if task in references:
                low, high = references[task]
                values = [(v - low) / (high - low) for v in values]
            columns.append(values)
        counts = {task: len(c) for task, c in zip(tasks, columns)}
        if len(set(counts.values())) != 1 or 0 in counts.values():
            raise ReportError(
                f"configuration {name}: runs per task differ ({counts}); a stratified bootstrap "
                "needs the same seeds on every task"
            )
        out[name] = np.array(columns, dtype=float).T
    return out


def aggregate(gap_to: float | None) -> Callable[[np.ndarray], np.ndarray]:
    """The statistics of one (runs x tasks) matrix, in STATISTICS' order (the gap NaN without a target)."""
    from rliable import metrics

    def statistics(x: np.ndarray) -> np.ndarray:
        gap = metrics.aggregate_optimality_gap(x, gap_to) if gap_to is not None else np.nan
        return np.array([metrics.aggregate_iqm(x), metrics.aggregate_mean(x), metrics.aggregate_median(x), gap])

    return statistics


def estimates(
    score_dict: dict[str, np.ndarray], gap_to: float | None, seed: int, reps: int = BOOTSTRAP_REPS
) -> dict[str, dict[str, dict[str, float | None]]]:
    """configuration -> statistic -> {value, low, high}: rliable's point estimates and stratified bootstrap
    percentile intervals, reproducible from `seed`."""
    from rliable import library

    np.random.seed(seed)  # rliable's stratified resampling draws from numpy's global generator, whatever
    # random_state it is given: seeding that is what makes a report reproducible
    points, intervals = library.get_interval_estimates(
        score_dict, aggregate(gap_to), reps=reps, confidence_interval_size=CONFIDENCE
    )
    return {
        name: {
            stat: {
                "value": _num(points[name][i]),
                "low": _num(intervals[name][0][i]),
                "high": _num(intervals[name][1][i]),
            }
            for i, stat in enumerate(STATISTICS)
        }
        for name in score_dict
    }


def _num(x) -> float | None:
    return None if np.isnan(x) else round(float(x), 6)


def report(
    sweep_dir: Path,
    score: str = "auto",
    references: dict[str, tuple[float, float]] | None = None,
    target: float | None = None,
    seed: int = 0,
    reps: int = BOOTSTRAP_REPS,
) -> dict:
    """The whole report as data: what was measured, how, and the estimates per configuration."""
    sweep = RunDir(sweep_dir)
    if not sweep.sweep.exists():
        raise ReportError(f"{sweep.root}: not a sweep directory (no sweep.json; srl-launch --sweep/--seeds make one)")
    index = json.loads(sweep.sweep.read_text())
    members = index["members"]
    references = references or {}
    column = score_column(members, score)
    scores = [member_score(m, column) for m in members]
    tasks = sorted({s.task for s in scores})
    unknown = sorted(set(references) - set(tasks))
    if unknown:
        raise ReportError(f"--reference for {', '.join(unknown)}: not a task of this sweep ({', '.join(tasks)})")
    if references and len(references) != len(tasks):
        raise ReportError(
            f"--reference given for {', '.join(sorted(references))} but not for "
            f"{', '.join(t for t in tasks if t not in references)}: normalise every task or none"
        )
    gap_to: float | None
    if references:
        gap_to = 1.0
    elif target is not None:
        gap_to = target
    else:
        targets = {config.load(RunDir(m["run_dir"]).experiment).stop.target_return for m in members}
        gap_to = targets.pop() if len(targets) == 1 else None
    out = {
        "sweep": str(sweep.root),
        "experiment": index.get("experiment"),
        "command": index.get("command"),
        "score": {"mean_return": "training mean return", "eval_return": "evaluation mean return"}[column],
        "normalised": {t: list(r) for t, r in references.items()},
        "optimality_gap_to": gap_to,
        "tasks": tasks,
        "seeds": sorted({s.seed for s in scores}),
        "bootstrap": {
            "reps": reps,
            "confidence": CONFIDENCE,
            "seed": seed,
            "method": "percentile, stratified over tasks",
        },
        "runs": [vars(s) for s in scores],
        "configurations": {},
    }
    for kind in ("final", "auc"):
        for name, stats in estimates(matrices(scores, kind, references), gap_to, seed, reps).items():
            out["configurations"].setdefault(name, {})[kind] = stats
    return out


def format_report(r: dict) -> str:
    norm = (
        " normalised by " + ", ".join(f"{t} [{lo:g}, {hi:g}]" for t, (lo, hi) in r["normalised"].items())
        if r["normalised"]
        else ""
    )
    lines = [
        f"sweep {r['sweep']}: {len(r['configurations'])} configurations, {len(r['runs'])} runs "
        f"(seeds {', '.join(map(str, r['seeds']))}) on {', '.join(r['tasks'])}",
        f"  score: {r['score']}{norm}; final (at the run's end) and area under the curve (mean over env frames)",
        f"  IQM, mean, median with {100 * r['bootstrap']['confidence']:.0f}% stratified bootstrap intervals "
        f"({r['bootstrap']['reps']} resamples, seed {r['bootstrap']['seed']}; rliable)"
        + (f"; optimality gap to {r['optimality_gap_to']:g}" if r["optimality_gap_to"] is not None else ""),
    ]
    if r["command"]:
        lines.append(f"  made by: {r['command']}")
    width = max(len(n) for n in r["configurations"]) + 2
    stats = [
        s
        for s in ("iqm", "mean", "median", "optimality_gap")
        if s != "optimality_gap" or r["optimality_gap_to"] is not None
    ]
    for kind, title in (("final", "final score"), ("auc", "area under the curve")):
        lines += ["", f"{title}:", (f"  {'configuration':<{width}}" + "".join(f"{s:<26}" for s in stats)).rstrip()]
        for name, by_kind in r["configurations"].items():
            cells = [by_kind[kind][s] for s in stats]
            lines.append(
                (
                    f"  {name:<{width}}"
                    + "".join(f"{c['value']:<8.4g} [{c['low']:.4g}, {c['high']:.4g}]".ljust(26) for c in cells)
                ).rstrip()
            )
    return "\n".join(lines)


def write_plots(r: dict, directory: Path, references: dict[str, tuple[float, float]] | None = None) -> list[Path]:
    """intervals.png (each statistic's estimate and interval per configuration, final and AUC) and
    profiles.png (the fraction of runs scoring above each threshold, final scores, with 95% bands)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from rliable import library, plot_utils

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    names = list(r["configurations"])
    colors = dict(zip(names, plt.get_cmap("tab10").colors))  # type: ignore[attr-defined]  # a ListedColormap
    stats = [s for s in STATISTICS if s != "optimality_gap" or r["optimality_gap_to"] is not None]
    paths = []
    for kind in ("final", "auc"):
        points = {n: np.array([r["configurations"][n][kind][s]["value"] for s in stats]) for n in names}
        intervals = {
            n: np.array([[r["configurations"][n][kind][s][b] for s in stats] for b in ("low", "high")]) for n in names
        }
        fig, _ = plot_utils.plot_interval_estimates(
            points,
            intervals,
            metric_names=[s.upper() if s == "iqm" else s.replace("_", " ").title() for s in stats],
            algorithms=names,
            colors=colors,
            xlabel=f"{KIND_LABELS[kind]} {r['score']}",
            subfigure_width=3.6,
            row_height=0.8,
            xlabel_y_coordinate=-0.5,
        )
        path = directory / f"intervals-{kind}.png"
        fig.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(fig)
        paths.append(path)
    scores = [MemberScore(**x) for x in r["runs"]]
    score_dict = matrices(scores, "final", references or {})
    values = np.concatenate([m.ravel() for m in score_dict.values()])
    taus = np.linspace(values.min() - 1e-9, values.max(), 101)
    np.random.seed(r["bootstrap"]["seed"])  # (as in estimates)
    profiles, bands = library.create_performance_profile(score_dict, taus, reps=r["bootstrap"]["reps"])
    fig, ax = plt.subplots(figsize=(6, 4))
    plot_utils.plot_performance_profiles(
        profiles,
        taus,
        performance_profile_cis=bands,
        colors=colors,
        ax=ax,
        xlabel=f"final {r['score']}" + (" (normalised)" if r["normalised"] else "") + r" $(\tau)$",
    )
    ax.legend([plt.Line2D([0], [0], color=colors[n]) for n in names], names, loc="lower left", fontsize="small")
    path = directory / "profiles.png"
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return [*paths, path]
