"""Elo ratings from game results, fitted all at once (the Bradley-Terry model) rather than updated game by game:
the same results give the same ratings whatever order they were played in.

Player i has a strength g_i; i scores against j with probability g_i / (g_i + g_j), a draw counting half a
win to each. The strengths that make the results most likely are found by the minorise-maximise iteration
g_i <- W_i / sum_j n_ij / (g_i + g_j) (W_i: i's points, n_ij: games between i and j). Each player also has
one imagined draw against the anchor, so that one who won every game still gets a finite rating. Ratings are
400 log10(g_i), the anchor's 0: a 200-point gap means the stronger scores about 76%.
"""

from __future__ import annotations

import numpy as np

ITERATIONS = 10_000


def elo(results: dict[tuple, list], anchor) -> dict:
    """results: (a, b) -> [a's points, games] (points: wins + draws / 2); players are any hashable names.
    Returns every player's rating, the anchor's 0."""
    players = [anchor] + sorted({p for pair in results for p in pair} - {anchor}, key=str)
    index = {p: i for i, p in enumerate(players)}
    n = len(players)
    points, games = np.zeros(n), np.zeros((n, n))
    for (a, b), (won, played) in results.items():
        i, j = index[a], index[b]
        points[i] += won
        points[j] += played - won
        games[i, j] += played
        games[j, i] += played
    points[1:] += 0.5  # the imagined draw of every player against the anchor
    points[0] += 0.5 * (n - 1)
    games[0, 1:] += 1
    games[1:, 0] += 1
    if n == 1:
        return {anchor: 0.0}
    strength = np.ones(n)
    for _ in range(ITERATIONS):
        new = points / (games / (strength[:, None] + strength[None, :])).sum(1)
        new /= new[0]
        if np.allclose(new, strength, rtol=1e-10, atol=0):
            break
        strength = new
    return {p: float(400 * np.log10(strength[index[p]])) for p in players}


def expected_score(rating: float, other: float) -> float:
    """The score the model expects of a player rated `rating` against one rated `other`."""
    return 1.0 / (1.0 + 10 ** ((other - rating) / 400))
