"""MAPPO: PPO with a centralised value function, for cooperative multi-agent envs (Yu et al., 2022).

One policy acts for every agent from the agent's own observation (parameters shared: the agents are rows
of one batch, srl_hpc/envs/agents.py); the value function reads the env's global state: the env's own
where it has one (PettingZoo's state(), carried at the end of every row's observation), else every
agent's observation side by side (on MPE the two are the same). Knowing what the others
see lets the value tell apart situations one agent cannot, so advantages are less noisy than with each
agent's own view (independent PPO: `algorithm.name: ppo` on the same env).

Everything else is PPO's (srl_hpc/algorithms/ppo.py): sampling, GAE per agent row, the clipped
objective, the epochs of minibatches. What this file adds is where the critic's input comes from:
`inputs` puts each step's global state into the batch (without an env state of its own: built from the
segment's rows, whole envs of `agents` rows each), and `evaluate` passes it to the model, since a
minibatch mixes rows of many envs.
"""

from __future__ import annotations

import numpy as np
import torch

from srl_hpc.algorithms.ppo import PPO
from srl_hpc.models.heads import global_state


class MAPPO(PPO):
    def __init__(self, model, cfg, device, bf16: bool = False, total_frames: int | None = None) -> None:
        super().__init__(model, cfg, device, bf16, total_frames)
        self.agents, self.env_state = model.agents, model.state_size > 0  # (before the trainer may wrap it for DDP)

    def inputs(self, seg: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Observations and global states (N, T, ...): the segment's rows are whole envs, env-major."""
        obs = seg["obs"]
        if self.env_state:  # the env's own state is in every observation
            return {"obs": obs}
        n, t = obs.shape[:2]
        by_step = torch.from_numpy(obs).transpose(0, 1).reshape(t * n, *obs.shape[2:])  # each step's rows together
        state = global_state(by_step, self.agents).reshape(t, n, -1).transpose(0, 1)
        return {"obs": obs, "state": state.numpy()}

    def evaluate(self, mb: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        return self.model(mb["obs"], mb.get("state"))
