"""Connect Four (PettingZoo's connect_four_v3, `pip install -e '.[multiagent]'`) for self-play, and the fixed
one-ply player a trained policy is measured against.

`env.id: "srl_hpc.envs.connect_four:connect_four"`: two seats taking turns (srl_hpc/envs/turns.py), each
observing (6, 7, 2) int8 planes of its own and the other's pieces (row 5 is the bottom) and an action mask over
the 7 columns and the pass. Reward +1 for a win, -1 for a loss, 0 for a draw, on the game's last move.

`one_ply_player`, a fixed player to measure a trained policy against (`srl-launch enjoy RUN --against one-ply`),
reads the mover's observation: it takes a winning column if it has one, else blocks a column where the other
would win, else plays a random legal one.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from srl_hpc.envs.turns import TurnTaking

ROWS, COLUMNS = 6, 7


def connect_four() -> TurnTaking:
    from pettingzoo.classic import connect_four_v3  # pip install -e '.[multiagent]'

    return TurnTaking(connect_four_v3.env())


def has_four(pieces: np.ndarray) -> bool:
    """Whether a (6, 7) bool board has four in a row: across, down or along either diagonal."""
    b = pieces
    return bool(
        (b[:, :-3] & b[:, 1:-2] & b[:, 2:-1] & b[:, 3:]).any()
        or (b[:-3] & b[1:-2] & b[2:-1] & b[3:]).any()
        or (b[:-3, :-3] & b[1:-2, 1:-2] & b[2:-1, 2:-1] & b[3:, 3:]).any()
        or (b[3:, :-3] & b[2:-1, 1:-2] & b[1:-2, 2:-1] & b[:-3, 3:]).any()
    )


def drop(pieces: np.ndarray, occupied: np.ndarray, column: int) -> np.ndarray:
    """`pieces` with one more in `column`, on top of what `occupied` holds there."""
    row = np.flatnonzero(~occupied[:, column])[-1]
    out = pieces.copy()
    out[row, column] = True
    return out


def legal_columns(obs: dict) -> np.ndarray:
    return np.flatnonzero(np.asarray(obs["action_mask"])[:COLUMNS])


def one_ply_player(rng: np.random.Generator) -> Callable[[dict], int]:
    def choose(obs: dict) -> int:
        planes = np.asarray(obs["observation"]).astype(bool)
        mine, theirs = planes[..., 0], planes[..., 1]
        occupied = mine | theirs
        legal = legal_columns(obs)
        for pieces in (mine, theirs):  # win if we can, else block their win
            for column in legal:
                if has_four(drop(pieces, occupied, column)):
                    return int(column)
        return int(rng.choice(legal))

    return choose
