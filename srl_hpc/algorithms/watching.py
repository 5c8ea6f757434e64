"""How a trained policy is watched, the same way by evaluation workers, rating workers and `srl-launch enjoy`:
either the algorithm's greedy() or its act() as its least exploring actor would choose."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from srl_hpc.algorithm_spec import HIDDEN, spec
from srl_hpc.streams.contract import Contract


def watching_policy(cfg, actors: int, greedy: bool) -> tuple[Callable, dict]:
    """(act(model, obs, explore, generator), explore settings), either the algorithm's greedy() or its act() as
    the least exploring of `actors` actors chooses (PPO: sampled; DQN: that actor's epsilon)."""
    algorithm = spec(cfg)
    implementation = algorithm.load()
    if not greedy:
        return implementation.act, algorithm.explore(cfg, actors - 1, actors)
    if not hasattr(implementation, "greedy"):
        raise ValueError(
            f"algorithm {cfg.name!r} has no greedy(model, obs): evaluate it with its own act() "
            "(workers.eval.greedy: false, or srl-launch enjoy without --greedy)"
        )
    return (lambda model, obs, _explore, _generator, *hidden: implementation.greedy(model, obs, *hidden)), {}


def policy_function(
    exp, greedy: bool, contract: Contract, seed: int | None = None
) -> Callable[
    [nn.Module, np.ndarray | dict, torch.Tensor | None], tuple[int | float | np.ndarray, torch.Tensor | None]
]:
    """model, one env's observation, recurrent state (None without) -> (the env's action, next state), as
    evaluation workers choose it; sampled actions from a generator seeded with `seed` (default: the run's)."""
    act, explore = watching_policy(exp.algorithm, exp.workers.actor.count, greedy)
    explore = {k: torch.tensor([v], dtype=torch.float32) for k, v in explore.items()}
    generator = torch.Generator().manual_seed(exp.seed if seed is None else seed)

    def choose(
        model: nn.Module, obs: np.ndarray | dict, hidden: torch.Tensor | None
    ) -> tuple[int | float | np.ndarray, torch.Tensor | None]:
        batch = contract.obs.pack(
            {k: np.asarray(v)[None] for k, v in obs.items()} if isinstance(obs, dict) else np.asarray(obs)[None]
        )
        out = act(model, torch.from_numpy(batch), explore, generator, *(() if hidden is None else (hidden,)))
        action = contract.action.to_env(out["actions"].numpy())[0]
        return (action.item() if action.ndim == 0 else action), out.get(HIDDEN)

    return choose
