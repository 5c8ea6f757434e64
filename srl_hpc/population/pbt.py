"""Population-based training (PBT): which member copies which, and with what hyper-parameters.

A population (experiment `population`) is `size` PPO members trained side by side, each with its own actors,
policy workers and trainer (srl_hpc/graph.py). Every `interval` seconds the population manager (the
"population" handler beside the controller) ranks the members that are ready (`stop.return_window` episodes
ended since their last copy) by their mean return over those; each of the worst `fraction` copies one of the
best `fraction`, drawn at random: its weights (exploit), and its hyper-parameters with each `explore` key
multiplied by one of that key's factors (explore). The copying member's trainer applies it between two
updates. Pure: the decision only, from scores; the handler does the messaging and the lineage.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import numpy as np

PREFIX = "member-"


def members(size: int) -> list[str]:
    """The members' names: each is its policy's name (parameter tag, checkpoint and database directory)."""
    return [f"{PREFIX}{k}" for k in range(size)]


def starting_values(population, algorithm, member: str) -> dict[str, float]:
    """The hyper-parameters `member` starts with: its value of each `init` key, and the algorithm's of each
    `explore` key that `init` does not set."""
    k = int(member.removeprefix(PREFIX))
    values = {key: float(getattr(algorithm, key)) for key in population.explore}
    values.update({key: float(per_member[k]) for key, per_member in population.init.items()})
    return values


@dataclass(frozen=True)
class Copy:
    """One exploit/explore: `target` takes `source`'s weights and `values` as its hyper-parameters."""

    round: int
    target: str
    source: str
    values: dict[str, float]  # the target's hyper-parameters from now on
    previous: dict[str, float]  # the target's before
    scores: dict[str, float]  # every ranked member's score this round


class Population:
    def __init__(self, cfg, algorithm, return_window: int, rng: np.random.Generator) -> None:
        self.cfg, self.window, self.rng = cfg, return_window, rng
        self.members = members(cfg.size)
        self.values = {m: starting_values(cfg, algorithm, m) for m in self.members}
        self.episodes_at_change = {m: 0 for m in self.members}
        self.rounds = 0
        self.last_round = 0.0

    def replay(self, copies: list[dict]) -> None:
        """A resumed run: the lineage so far (its records, oldest first) gives each member's hyper-parameters
        and the round count; every member is ready again after a full window of new episodes."""
        for record in copies:
            self.values[record["target"]] = dict(record["values"])
            self.rounds = max(self.rounds, record["round"])

    def due(self, now: float) -> bool:
        return now - self.last_round >= self.cfg.interval

    def round(self, now: float, scores: dict[str, tuple[float | None, int]]) -> list[Copy]:
        """A round at `now` (seconds into the run), given each member's (mean return of its last window of
        episodes, episodes ended so far). Returns the copies decided; none while fewer than two are ready."""
        ready = {
            m: mean
            for m, (mean, ended) in scores.items()
            if mean is not None and ended - self.episodes_at_change[m] >= self.window
        }
        if len(ready) < 2:
            return []
        self.last_round = now
        self.rounds += 1
        ranked = sorted(ready, key=cast(Callable[[str], float], ready.get))  # worst first
        n = max(1, math.floor(self.cfg.fraction * len(ranked)))
        worst, best = ranked[:n], ranked[-n:]
        copies = []
        for target in worst:
            source = best[int(self.rng.integers(len(best)))]
            values = dict(self.values[source])
            for key, factors in self.cfg.explore.items():
                values[key] *= float(factors[int(self.rng.integers(len(factors)))])
            copies.append(
                Copy(
                    self.rounds, target, source, values, dict(self.values[target]), {m: float(ready[m]) for m in ranked}
                )
            )
            self.values[target] = values
            self.episodes_at_change[target] = scores[target][1]
        return copies
