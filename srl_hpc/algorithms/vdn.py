"""VDN: value decomposition networks (Sunehag et al., 2018), for cooperative multi-agent envs.

The team's action value is the sum of its agents' values, Q_tot(s, a) = sum_k Q(o_k, a_k), each from the
agent's own observation through one shared network. Trained on the team's reward (the agents' mean),
the sum lets each agent act greedily on its own Q while the team's value is what is learnt: an agent is
credited with its part of the team's return, not with what its teammates did.

Everything else is Ape-X DQN's (srl_hpc/algorithms/dqn.py): actors act epsilon-greedy per agent with
their actor's epsilon, buffer workers keep prioritised replay of n-step transitions, now one per env and
step with all its agents (srl_hpc.handlers.buffer.team_steps: obs (B, agents, ...), actions (B, agents)),
and the target network, double Q-learning and the Huber loss are DQN's. What this file adds is the sum.
"""

from __future__ import annotations

import torch

from srl_hpc.algorithms.dqn import DQN


def team_q(model, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """sum_k Q(o_k, a_k) for teams' observations (B, agents, ...) and actions (B, agents) -> (B,)."""
    q = model(obs.flatten(0, 1)).float().unflatten(0, obs.shape[:2])  # (B, agents, A)
    return q.gather(2, actions.long().unsqueeze(2)).squeeze(2).sum(1)


def team_targets(online, target, next_obs, returns, discounts, double: bool) -> torch.Tensor:
    """n-step targets R + gamma^m * sum_k Q_target(o'_k, a*_k); each a*_k from the online net (double) or
    the target net: the sum is maximised agent by agent."""
    with torch.no_grad():
        flat = next_obs.flatten(0, 1)
        next_q = target(flat).float().unflatten(0, next_obs.shape[:2])
        chooser = online(flat).float().unflatten(0, next_obs.shape[:2]) if double else next_q
        best = chooser.argmax(-1, keepdim=True)
        return returns + discounts * next_q.gather(2, best).squeeze(2).sum(1)


class VDN(DQN):
    def update(self, batch: dict[str, torch.Tensor], frames_done: int) -> tuple[dict[str, float], dict]:
        """One gradient step on the team's TD error. Returns (diagnostics, new priorities per team transition)."""
        with torch.autocast(self.device.type, torch.bfloat16, enabled=self.bf16):
            q_taken = team_q(self.model, batch["obs"], batch["actions"])
        targets = team_targets(
            self.model, self.target, batch["next_obs"], batch["returns"], batch["discounts"], self.cfg.double
        )
        return self._step(q_taken, targets, batch["weights"])
