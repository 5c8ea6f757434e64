"""What a run's traces say it learned: episode returns over time, evaluation rounds, self-play ratings and a
population's copies. Pure functions over trace.reader's tables, as analysis.py's are; summarize() gathers them."""

from __future__ import annotations

from typing import Any

import numpy as np

from srl_hpc.trace.reader import RunTrace

RETURN_WINDOW = 20  # episodes in the "first" and "last" mean returns


def returns_over_time(run: RunTrace, bins: int = 10, policy: int | None = None) -> dict:
    """Episode returns of all actors (with several policies, of run.policies[policy]'s agents): first and last
    window means, and the mean per time bin."""
    t0 = run.t0
    tables = [w.table("episode") for w in run.hosting("actor") if "episode_return" in w.table("episode")]
    if policy is not None:
        tables = [{k: v[tab["policy"] == policy] for k, v in tab.items()} for tab in tables]
    if not tables:
        return {"episodes": 0}
    t = np.concatenate([tab["t"] for tab in tables]) - t0
    r = np.concatenate([tab["episode_return"] for tab in tables])
    order = np.argsort(t)
    t, r = t[order], r[order]
    out: dict[str, Any] = {"episodes": int(len(r))}
    if not len(r):
        return out
    out["first"] = float(r[:RETURN_WINDOW].mean())
    out["last"] = float(r[-RETURN_WINDOW:].mean())
    edges = np.linspace(t[0], t[-1] + 1e-9, bins + 1)
    which = np.digitize(t, edges[1:-1])
    out["over_time"] = [
        {
            "start": float(edges[i]),
            "end": float(edges[i + 1]),
            "episodes": int((which == i).sum()),
            "mean_return": float(r[which == i].mean()) if (which == i).any() else None,
        }
        for i in range(bins)
    ]
    return out


def evaluation(run: RunTrace) -> dict:
    """Evaluation rounds of every eval worker, in time order: the version played, mean return and length."""
    rounds: list[dict[str, Any]] = []
    for worker in run.hosting("eval"):
        tab = worker.table("eval_round")
        if "mean_return" in tab:
            rounds += [
                {
                    "worker": worker.name,
                    "t": float(t) - run.t0,
                    "version": int(v),
                    "mean_return": float(r),
                    "mean_length": float(n),
                    "seconds": float(d),
                }
                for t, v, r, n, d in zip(
                    tab["t"], tab["version"], tab["mean_return"], tab["mean_length"], tab["seconds"]
                )
            ]
    rounds.sort(key=lambda e: e["t"])
    out: dict[str, Any] = {"rounds": len(rounds)}
    if rounds:
        out.update(last=rounds[-1], best=max(rounds, key=lambda e: e["mean_return"]), all=rounds)
    return out


def ratings(run: RunTrace) -> dict:
    """Self-play: the rating workers' Elo after their last round (versions; the fixed players as negative
    versions, srl_hpc/handlers/rating.py) and the actors' games by opponent (-1: the newest weights)."""
    out: dict[str, Any] = {"rounds": 0}
    for worker in run.hosting("rating"):
        tab = worker.table("rating")
        if "elo" in tab and len(tab["round"]):
            last = tab["round"] == tab["round"].max()
            out = {
                "rounds": int(tab["round"].max()),
                "elo": {int(v): float(e) for v, e in zip(tab["version"][last], tab["elo"][last])},
            }
    opponents = run.pooled("actor", "game", "opponent")
    if len(opponents):
        versions, counts = np.unique(opponents, return_counts=True)
        out["games"] = {int(v): int(n) for v, n in zip(versions, counts)}
    return out


def population(run: RunTrace) -> dict:
    """Population-based training: the copies the manager made (its trace table `copy`), in order, each with
    the new values of what explore changes."""
    copies = []
    for worker in run.hosting("population"):
        tab = worker.table("copy")
        values = [k for k in tab if k.startswith("new_")]
        for i in range(len(tab["t"])):
            copies.append(
                {
                    "t": float(tab["t"][i] - run.t0),
                    "round": int(tab["round"][i]),
                    "target": run.policies[int(tab["target"][i])],
                    "source": run.policies[int(tab["source"][i])],
                    "values": {k.removeprefix("new_"): float(tab[k][i]) for k in values},
                }
            )
    return {"copies": copies}
