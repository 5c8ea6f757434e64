"""Self-play opponents: in a game of several seats (a turn-taking game, srl_hpc/envs/turns.py), the learner
plays one seat of each env with the newest weights and a version of its own past plays the others; only the
learner's seat is trained on. Which version, `opponents.rule` decides afresh for every episode:

- latest:  the newest weights on every seat (the other seats still not trained on);
- uniform: any of the newest `opponents.pool` snapshots in the parameter database
           (workers.trainer.snapshot_every), each as likely;
- pfsp:    prioritised fictitious self-play: of the same snapshots, v with weight
           (1 - p_v) ** opponents.pfsp_power, p_v the learner's score against v so far (win 1, draw 1/2,
           loss 0; 1/2 before any game), so the versions it still loses to are played most.

Fixed players (`opponents.fixed`, srl_hpc/envs/turns.py: random, one-ply) can take a share of the games
whatever the rule: a league's fixed opponents, which punish what the learner's own past versions do not (the
one-ply player never misses a win and always blocks one). Their rows still ask the policy worker (for the
newest weights), and the actor plays the fixed player's move instead of the reply's.

Until the first snapshot is stored, the opponent is the newest weights. The learner's seat moves round the
env's seats from one episode to the next. Each actor keeps its own scores from its own games (no traffic
between workers); numpy only: actors never import torch.
"""

from __future__ import annotations

import time

import numpy as np

from srl_hpc.envs.fixed_players import FIXED_PLAYERS
from srl_hpc.services.parameter_db import SNAPSHOT, ParameterDB

NEWEST = -1  # the version an inference request's row asks for: whatever the policy worker has newest
FIXED = -2  # a fixed player's opponent code: FIXED - its index in FIXED_PLAYERS (random -2, one-ply -3)
RULES = ("latest", "uniform", "pfsp")
REFRESH_SECONDS = 5.0  # between looks at the parameter database for new snapshots


class OpponentPool:
    """The versions an actor's opponents are drawn from (the database's snapshots) and its scores against them."""

    def __init__(
        self,
        db: ParameterDB,
        rule: str,
        rng: np.random.Generator,
        pfsp_power: float = 2.0,
        size: int = 8,
        fixed: dict[str, float] | None = None,
        env=None,
    ) -> None:
        """fixed: fixed player -> its share of the games; env: the game (a TurnTaking) they play."""
        if rule not in RULES:
            raise ValueError(f"opponents.rule must be one of {RULES}, got {rule!r}")
        self.db, self.rule, self.rng, self.pfsp_power, self.size = db, rule, rng, pfsp_power, size
        self.shares = {fixed_code(name): share for name, share in (fixed or {}).items()}
        self.players = {fixed_code(name): FIXED_PLAYERS[name](env, rng) for name in fixed or {}}  # code -> player
        self.snapshots: list[int] = []
        self.scores: dict[int, list[float]] = {}  # version -> [points, games]
        self._looked_at = float("-inf")

    def refresh(self) -> None:
        """Take in snapshots stored since the last look (at most every REFRESH_SECONDS); the oldest beyond
        `size` leave the pool, so that the policy workers never hold more than a few more engines than that."""
        now = time.monotonic()
        if self.rule == "latest" or now - self._looked_at < REFRESH_SECONDS:
            return
        self._looked_at = now
        self.snapshots = sorted(info["version"] for tag, info in self.db.tags().items() if tag.startswith(SNAPSHOT))[
            -self.size :
        ]

    def score(self, version: int) -> float:
        """The learner's mean score against `version` (1/2 before any game: one won and one lost, imagined)."""
        points, games = self.scores.get(version, (0.0, 0))
        return (points + 1.0) / (games + 2)

    def weights(self) -> np.ndarray:
        """Each snapshot's probability of being the next opponent."""
        if self.rule == "uniform":
            weights = np.ones(len(self.snapshots))
        else:
            weights = np.array([(1.0 - self.score(v)) ** self.pfsp_power for v in self.snapshots])
        return weights / weights.sum()

    def sample(self) -> int:
        """The next game's opponent: a fixed player's code, NEWEST, or a snapshot's version."""
        if self.shares:
            u = self.rng.random()
            for code, share in self.shares.items():
                if u < share:
                    return code
                u -= share
        self.refresh()
        if self.rule == "latest" or not self.snapshots:
            return NEWEST
        return int(self.rng.choice(self.snapshots, p=self.weights()))

    def record(self, version: int, learner_return: float) -> None:
        """A finished game against `version`, by the learner's return (> 0 a win, 0 a draw, < 0 a loss)."""
        entry = self.scores.setdefault(version, [0.0, 0])
        entry[0] += 1.0 if learner_return > 0 else 0.5 if learner_return == 0 else 0.0
        entry[1] += 1


class Seats:
    """Per env of a ring group (`k` seats each, rows env-major): the learner's seat this episode and the version
    playing the others."""

    def __init__(self, num_envs: int, k: int, pool: OpponentPool, first: int = 0) -> None:
        self.k, self.pool = k, pool
        self.learner = (first + np.arange(num_envs)) % k  # envs start on different seats
        self.opponent = np.array([pool.sample() for _ in range(num_envs)], np.int64)

    def learner_rows(self) -> np.ndarray:
        rows = np.zeros((len(self.learner), self.k), bool)
        rows[np.arange(len(self.learner)), self.learner] = True
        return rows.reshape(-1)

    def versions(self) -> tuple[int, ...]:
        """Per row, the version its request asks for: NEWEST for the learner's and a fixed player's (whose move
        replaces the reply's), the opponent's for the others."""
        per_row = np.repeat(self.opponent, self.k)
        per_row[self.learner_rows() | (per_row <= FIXED)] = NEWEST
        return tuple(int(v) for v in per_row)

    def fixed_moves(self, actions: np.ndarray, obs: np.ndarray, unpack) -> np.ndarray:
        """`actions` (one per row) with the moves of the fixed players whose turn it is in place of the
        policy's; obs: the rows' packed observations, unpack: packed rows -> key -> (rows, ...) (an
        ObsContract's). A player not to move keeps the pass."""
        per_row = np.repeat(self.opponent, self.k)
        rows = np.flatnonzero(~self.learner_rows() & (per_row <= FIXED))
        if not len(rows):
            return actions
        actions = np.array(actions)
        fields = unpack(obs[rows])
        for i, row in enumerate(rows):
            mine = {key: value[i] for key, value in fields.items()}
            if mine["action_mask"][:-1].any():  # its turn (else its only legal action is the pass)
                actions[row] = self.pool.players[int(per_row[row])](mine)
        return actions

    def episode_over(self, env: int, learner_return: float) -> tuple[int, int]:
        """Env `env`'s game ended with the learner's `learner_return`: scored, then the next game's learner seat
        and opponent are chosen. Returns (the opponent, the learner's seat) of the game that ended."""
        ended = int(self.opponent[env]), int(self.learner[env])
        self.pool.record(ended[0], learner_return)
        self.learner[env] = (self.learner[env] + 1) % self.k
        self.opponent[env] = self.pool.sample()
        return ended


def fixed_code(name: str) -> int:
    """The opponent code of the fixed player `name` (in versions(), the traces' games)."""
    return FIXED - list(FIXED_PLAYERS).index(name)


def fixed_name(code: int) -> str:
    """The fixed player whose opponent code is `code` (fixed_code's inverse)."""
    return list(FIXED_PLAYERS)[FIXED - code]
