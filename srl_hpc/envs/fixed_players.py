"""The fixed players a trained policy of a turn-taking game is measured against (`srl-launch enjoy RUN
--against NAME`, the rating worker's table, self-play's fixed opponents), by name: each is (env, rng) -> a
function (the mover's observation) -> move."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from srl_hpc.envs import connect_four
from srl_hpc.envs.turns import TurnTaking


def random_player(env: TurnTaking, rng: np.random.Generator) -> Callable[[dict], int]:
    """A fixed player: a uniformly random legal move."""

    def choose(obs: dict) -> int:
        return int(rng.choice(np.flatnonzero(np.asarray(obs["action_mask"])[: env.moves])))

    return choose


def one_ply_player(env: TurnTaking, rng: np.random.Generator) -> Callable[[dict], int]:
    """A fixed player (Connect Four only): a winning move, else a block of the other's, else a random one."""
    if env.moves != connect_four.COLUMNS or env.observation_space(env.possible_agents[0])["observation"].shape != (
        connect_four.ROWS,
        connect_four.COLUMNS,
        2,
    ):
        raise ValueError("the one-ply player plays Connect Four only")
    return connect_four.one_ply_player(rng)


FIXED_PLAYERS = {"random": random_player, "one-ply": one_ply_player}  # name -> (env, rng) -> player
