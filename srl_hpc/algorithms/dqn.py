"""Ape-X DQN: distributed prioritised replay with n-step double Q-learning and a dueling network.

Reads top to bottom: `act` is what a policy handler runs (greedy actions, each actor with its own epsilon),
`td_targets` and `dqn_loss` are the objective, and `DQN.update` takes one prioritised batch from a buffer
worker and returns new priorities (|TD error|) for it. The replay itself (sum tree, n-step transitions)
is numpy in replay.py and runs in buffer workers, not here.

Hyper-parameters (srl_hpc.config.schema.DQNConfig): gamma, n_step, lr, batch_size, double, dueling,
target_update_interval, max_grad_norm, priority_alpha/beta, epsilon/epsilon_alpha, max_replay_ratio.
"""
from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn


def act(model: nn.Module, obs: torch.Tensor, explore: dict, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Epsilon-greedy on the action values: each row explores with its actor's epsilon (the Ape-X schedule)."""
    q = model(obs).float()
    greedy = q.argmax(-1)
    random = torch.randint(q.shape[1], greedy.shape, generator=generator, device=q.device)
    explore_now = torch.rand(greedy.shape, generator=generator, device=q.device) < explore["epsilon"]
    return {"actions": torch.where(explore_now, random, greedy)}


def greedy(model: nn.Module, obs: torch.Tensor) -> dict[str, torch.Tensor]:
    """The action of the highest value (evaluation workers)."""
    return {"actions": model(obs).argmax(-1)}


def td_targets(online: nn.Module, target: nn.Module, next_obs, returns, discounts, double: bool) -> torch.Tensor:
    """n-step targets: R + gamma^m * Q_target(s', a*), a* from the online net (double) or the target net.
    `discounts` is gamma^m, or 0 where the episode terminated within the n steps."""
    with torch.no_grad():
        next_q = target(next_obs).float()
        if double:
            best = online(next_obs).float().argmax(-1, keepdim=True)
        else:
            best = next_q.argmax(-1, keepdim=True)
        return returns + discounts * next_q.gather(1, best).squeeze(1)


def dqn_loss(q_taken: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Importance-weighted Huber loss, and the TD errors (new priorities come from their size)."""
    td = targets - q_taken
    loss = (weights * nn.functional.smooth_l1_loss(q_taken, targets, reduction="none")).mean()
    return loss, td.detach()


class DQN:
    act = staticmethod(act)
    greedy = staticmethod(greedy)

    def __init__(self, model: nn.Module, cfg, device: torch.device, bf16: bool = False, total_frames: int | None = None):
        self.model = model  # the trainer may swap in its DDP wrapper
        self.target = copy.deepcopy(model).requires_grad_(False)
        self.cfg = cfg
        self.device = device
        self.bf16 = bf16  # forward passes under bf16 autocast, as in PPO
        self.optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, eps=1.5e-4)
        self.updates = 0

    def prepare(self, batch: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        """A buffer's sampled batch -> CPU tensors (the trainer moves them to its device)."""
        return {k: torch.from_numpy(np.ascontiguousarray(batch[k]))
                for k in ("obs", "actions", "returns", "next_obs", "discounts", "weights")}

    def update(self, batch: dict[str, torch.Tensor], frames_done: int) -> tuple[dict[str, float], dict]:
        """One gradient step. Returns (diagnostics, {"priorities": |TD error| per transition}) for the buffer."""
        cfg = self.cfg
        with torch.autocast(self.device.type, torch.bfloat16, enabled=self.bf16):
            q = self.model(batch["obs"]).float()
        q_taken = q.gather(1, batch["actions"].long().unsqueeze(1)).squeeze(1)
        targets = td_targets(self.model, self.target, batch["next_obs"], batch["returns"], batch["discounts"], cfg.double)
        return self._step(q_taken, targets, batch["weights"])

    def _step(self, q_taken: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor) -> tuple[dict[str, float], dict]:
        """The gradient step on the Huber loss, the target network's copy when due, and the new priorities."""
        cfg = self.cfg
        loss, td = dqn_loss(q_taken, targets, weights)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
        self.optimizer.step()
        self.updates += 1
        if self.updates % cfg.target_update_interval == 0:
            self.target.load_state_dict(_unwrapped(self.model).state_dict())
        stats = {"loss": loss.item(), "q_mean": q_taken.detach().mean().item(), "td_abs_mean": td.abs().mean().item(),
                 "grad_norm": float(grad_norm)}
        return stats, {"priorities": td.abs().cpu().numpy()}

    def state_dict(self) -> dict:
        """What a checkpoint needs besides the model's weights."""
        return {"optimizer": self.optimizer.state_dict(), "target": self.target.state_dict(), "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        """A resumed run: the optimizer's moments, the target network and the update count come back."""
        self.optimizer.load_state_dict(state["optimizer"])
        self.target.load_state_dict(state["target"])
        self.updates = state["updates"]


def _unwrapped(model: nn.Module) -> nn.Module:
    """The model inside a DDP wrapper (the target net copies plain weights)."""
    return getattr(model, "module", model)
