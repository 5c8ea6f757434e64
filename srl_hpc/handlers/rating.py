"""Rating handler: the evaluation workers (workers.eval) of a self-play run (opponents.rule set). Scoring the
newest weights by their return means nothing in a game against oneself, so they rate the stored versions
against each other and against fixed players instead (the evaluation manager of the SRL paper).

A round starts `workers.eval.interval` seconds after the previous one, once the parameter database holds a
snapshot not rated yet (the newest such; one skipped while a round ran is never rated). The snapshot plays
`workers.eval.episodes` games against each of: the fixed players (srl_hpc/envs/fixed_players.py: random, and
one-ply in Connect Four), the two snapshots rated last, and two earlier ones drawn at random. Each version
samples its moves from its policy (two greedy versions would replay one game over and over), the seats
alternate. Elo ratings are then fitted to every game so far (srl_hpc/population/ratings.py; the random player is 0),
written to the database (RUN/parameters/<policy>/ratings.json: the games, and each player's rating),
recorded in the trace (table `rating`: every player's rating after each round, the fixed players as negative
versions -1, -2, ... in their order), and the best-rated snapshot is tagged `best` with its rating.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import cast

import numpy as np
import torch

from srl_hpc.algorithm_spec import spec
from srl_hpc.algorithms.watching import policy_function
from srl_hpc.envs.backends import first_seed, make_env, spaces
from srl_hpc.envs.fixed_players import FIXED_PLAYERS
from srl_hpc.envs.turns import TurnTaking, play
from srl_hpc.handlers import Handler
from srl_hpc.models.building import build_model
from srl_hpc.models.weights import load_arrays
from srl_hpc.population.ratings import elo
from srl_hpc.services import parameter_db
from srl_hpc.services.parameter_db import ParameterDB, VersionNotFound
from srl_hpc.streams.contract import Contract

ANCHOR = "random"
SEED_OFFSET = 2**30 + 2**28  # game seeds: apart from the actors' and the evaluation workers'
RECENT, EARLIER = 2, 2  # snapshots each new one plays: the last rated, and earlier ones at random


class RatingHandler(Handler):
    kind = "rating"

    def __init__(self, worker) -> None:
        super().__init__(worker)
        exp, self.cfg = self.exp, self.exp.workers.eval
        torch.set_num_threads(1)
        index = self.graph.worker(self.name).index
        self.seed = SEED_OFFSET + worker.seed * 1_000_003 + index * 100_000
        self.rng = np.random.default_rng(self.seed)
        self.env = cast(TurnTaking, make_env(exp.env))  # (ratings: a self-play game's)
        self.fixed = {}
        for name, make in FIXED_PLAYERS.items():
            try:
                self.fixed[name] = make(self.env, self.rng)
            except ValueError:  # a player of another game (one-ply: Connect Four)
                continue
        self.obs_space, self.action_space = spaces(exp.env)
        contract = Contract.of(self.obs_space, self.action_space, spec(exp.algorithm), exp)
        self.choose = policy_function(exp, False, contract, seed=self.seed)  # sampled moves, as an actor's
        self.db = ParameterDB(worker.run_dir.parameters_of(""))
        self.games: list[list] | None = None  # [a, b, a's points, games]: read from the database at the first round
        self.rated: list[int] = []
        self.rounds = 0
        self.next_round_at = time.monotonic() + self.cfg.interval

    def poll(self, timeout_ms) -> None:
        wait = self.next_round_at - time.monotonic()
        if wait > 0:
            time.sleep(min(wait, timeout_ms / 1000))
            return
        if self.games is None:  # a resumed run's games so far (the trainer pruned those of discarded versions)
            record = self.db.ratings()
            self.games = record.get("games", [])
            self.rated = sorted({p for g in self.games for p in g[:2] if isinstance(p, int)})
        snapshots = sorted(
            info["version"] for tag, info in self.db.tags().items() if tag.startswith(parameter_db.SNAPSHOT)
        )
        new = [v for v in snapshots if v not in self.rated]
        if not new:
            self.next_round_at = time.monotonic() + min(1.0, self.cfg.interval)
            return
        self._round(new[-1])
        self.next_round_at = time.monotonic() + self.cfg.interval

    def _round(self, version: int) -> None:
        assert self.games is not None  # (read in poll first)
        started = time.monotonic()
        earlier = self.rated[:-RECENT]
        opponents: list[str | int] = [
            *self.fixed,
            *self.rated[-RECENT:],
            *(int(v) for v in self.rng.choice(earlier, min(EARLIER, len(earlier)), replace=False)),
        ]
        player = self._player(version)
        for opponent in opponents:
            try:
                other = self.fixed[opponent] if isinstance(opponent, str) else self._player(opponent)
            except VersionNotFound:  # untagged by hand and collected since it was rated
                continue
            points = 0.0
            for game in range(self.cfg.episodes):
                seat = game % 2
                players = [player, other] if seat == 0 else [other, player]
                seed = first_seed(self.seed + len(self.games) * self.cfg.episodes + game, 1)
                (rewards,) = play(self.env, players, 1, seed=seed)
                result = rewards[self.env.possible_agents[seat]]
                points += 1.0 if result > 0 else 0.5 if result == 0 else 0.0
            self.games.append([version, opponent, points, self.cfg.episodes])
        self.rated.append(version)
        self.rounds += 1
        ratings = elo(self._totals(), ANCHOR)
        self.db.write_ratings({"anchor": ANCHOR, "games": self.games, "elo": [[p, r] for p, r in ratings.items()]})
        names = list(self.fixed)
        for p, rating in ratings.items():
            self.trace.record(
                "rating", round=self.rounds, version=-1 - names.index(p) if isinstance(p, str) else p, elo=rating
            )
        self.trace.record("rating_round", version=version, opponents=len(opponents), seconds=time.monotonic() - started)
        best = max((p for p in ratings if isinstance(p, int)), key=cast(Callable[[int], float], ratings.get))
        self.db.tag(parameter_db.BEST, best, elo=ratings[best], worker=self.name)

    def _totals(self) -> dict[tuple, list]:
        totals: dict[tuple, list] = {}
        assert self.games is not None  # (read in poll first)
        for a, b, points, games in self.games:
            entry = totals.setdefault((a, b), [0.0, 0])
            entry[0] += points
            entry[1] += games
        return totals

    def _player(self, version: int) -> Callable[[dict], int]:
        """A stored version as a player: its move sampled from its policy, for the mover's observation."""
        model = build_model(self.exp, self.obs_space, self.action_space)
        load_arrays(model, self.db.get(version)[1])
        model.eval()

        def choose(obs: dict) -> int:
            with torch.inference_mode():
                return int(self.choose(model, obs, None)[0])

        return choose

    def close(self) -> None:
        self.env.close()

    def stats(self) -> dict:
        return {"eval_rounds": self.rounds}
