"""Ape-X DQN: distributed prioritised replay with n-step double Q-learning and a dueling network.

Reads top to bottom: `act` is what a policy handler runs (greedy actions, each actor with its own epsilon),
`td_targets` and `dqn_loss` are the objective, and `DQN.update` takes one prioritised batch from a buffer
worker and returns new priorities (|TD error|) for it. The replay itself (sum tree, n-step transitions)
is numpy in replay.py and runs in buffer workers, not here.

With a recurrent model (model.rnn, R2D2-style) a replay item is a sequence: one env's segment, the first
n_step steps of its next segment (the lookahead of its last steps' targets) and, with `burn_in`, its
previous segment in front. `sequence_update` unrolls the online and the target net through the burn-in
without gradients, from the state the actors stored at its start, then trains on the segment's steps from
the state that rebuilt: the current network's state, not the one the actors acted with weights ago.

Hyper-parameters (srl_hpc.config.algorithms.DQNConfig): gamma, n_step, lr, batch_size, double, dueling,
target_update_interval, max_grad_norm, priority_alpha/beta, epsilon/epsilon_alpha, max_replay_ratio, burn_in.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn

from srl_hpc.algorithm_spec import HIDDEN
from srl_hpc.algorithms.replay import nstep_returns

PRIORITY_MAX_SHARE = 0.9  # a sequence's priority: 0.9 x its largest |TD error| + 0.1 x its mean (R2D2)


def q_and_state(model: nn.Module, obs: torch.Tensor, hidden: tuple) -> tuple[torch.Tensor, dict]:
    """Action values, and {"hidden": the next state} for a recurrent model (given its state)."""
    if not hidden:
        return model(obs).float(), {}
    q, state = model(obs, hidden[0])
    return q.float(), {HIDDEN: state.float()}


def act(
    model: nn.Module, obs: torch.Tensor, explore: dict, generator: torch.Generator, *hidden
) -> dict[str, torch.Tensor]:
    """Epsilon-greedy on the action values: each row explores with its actor's epsilon (the Ape-X schedule)."""
    q, state = q_and_state(model, obs, hidden)
    greedy = q.argmax(-1)
    random = torch.randint(q.shape[1], greedy.shape, generator=generator, device=q.device)
    explore_now = torch.rand(greedy.shape, generator=generator, device=q.device) < explore["epsilon"]
    return {"actions": torch.where(explore_now, random, greedy), **state}


def greedy(model: nn.Module, obs: torch.Tensor, *hidden) -> dict[str, torch.Tensor]:
    """The action of the highest value (evaluation workers)."""
    q, state = q_and_state(model, obs, hidden)
    return {"actions": q.argmax(-1), **state}


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

    def __init__(
        self, model: nn.Module, cfg, device: torch.device, bf16: bool = False, total_frames: int | None = None
    ) -> None:
        self.model = model  # the trainer may swap in its DDP wrapper
        self.target = copy.deepcopy(model).requires_grad_(False)
        self.cfg = cfg
        self.device = device
        self.bf16 = bf16  # forward passes under bf16 autocast, as in PPO
        self.optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, eps=1.5e-4)
        self.updates = 0

    def prepare(self, batch: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        """A buffer's sampled batch -> CPU tensors (the trainer moves them to its device). Sequences (a
        recurrent model) get their n-step targets' parts here, in numpy, off the update's path."""
        if HIDDEN in batch:
            return self.prepare_sequences(batch)
        return {
            k: torch.from_numpy(np.ascontiguousarray(batch[k]))
            for k in ("obs", "actions", "returns", "next_obs", "discounts", "weights")
        }

    def prepare_sequences(self, batch: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        """Sequences (N, L): burn-in (`burn_in` steps), trained steps, n_step lookahead. Per trained step:
        its n-step return, bootstrap step (index into the trained part and lookahead) and discount."""
        n, length = self.cfg.n_step, batch["valid"].shape[1]
        burn_in = (length - n) // 2 if self.cfg.burn_in else 0  # the previous segment, as long as the trained one
        count = length - burn_in - n  # the trained steps
        returns, steps, discounts = nstep_returns(batch, n, self.cfg.gamma, burn_in, count)
        valid = batch["valid"]
        resets = np.zeros_like(valid)
        resets[:, 1:] = ~valid[:, :-1]  # the step after an auto-reset is an episode's first: actors zero its state
        out = {
            "obs": batch["obs"],
            "actions": batch["actions"][:, burn_in : burn_in + count].astype(np.int64),
            "returns": returns,
            "bootstrap": np.arange(count)[None, :] + steps,
            "discounts": discounts,
            "valid": valid[:, burn_in : burn_in + count],
            "resets": resets,
            HIDDEN: batch[HIDDEN],
            "weights": batch["weights"],
        }
        return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in out.items()}

    def update(self, batch: dict[str, torch.Tensor], frames_done: int) -> tuple[dict[str, float], dict]:
        """One gradient step. Returns (diagnostics, {"priorities": |TD error| per transition}) for the buffer."""
        cfg = self.cfg
        if HIDDEN in batch:
            return self.sequence_update(batch)
        with torch.autocast(self.device.type, torch.bfloat16, enabled=self.bf16):
            q = self.model(batch["obs"]).float()
        q_taken = q.gather(1, batch["actions"].long().unsqueeze(1)).squeeze(1)
        targets = td_targets(
            self.model, self.target, batch["next_obs"], batch["returns"], batch["discounts"], cfg.double
        )
        return self._step(q_taken, targets, batch["weights"])

    def sequence_update(self, batch: dict[str, torch.Tensor]) -> tuple[dict[str, float], dict]:
        """Recurrent DQN on sequences: burn-in without gradients, then double Q-learning on the trained steps,
        each sequence's loss over its valid steps; a sequence's priority mixes its largest and mean |TD error|."""
        obs, resets, count = batch["obs"], batch["resets"], batch["actions"].shape[1]
        burn_in = obs.shape[1] - count - self.cfg.n_step
        trained = slice(burn_in, None)  # the trained steps and their lookahead
        with torch.no_grad():
            if burn_in:
                _, state = self.model(obs[:, :burn_in], batch[HIDDEN], resets[:, :burn_in])
            else:
                state = batch[HIDDEN]
            target_q, _ = self.target(obs, batch[HIDDEN], resets)
        with torch.autocast(self.device.type, torch.bfloat16, enabled=self.bf16):
            q, _ = self.model(obs[:, trained], state, resets[:, trained])
        q = q.float()
        q_taken = q[:, :count].gather(2, batch["actions"].unsqueeze(2)).squeeze(2)
        with torch.no_grad():  # double: the online net picks the next action, the target net values it
            next_q = target_q[:, trained].float()
            best = next_q.gather(2, (q.detach() if self.cfg.double else next_q).argmax(-1, keepdim=True)).squeeze(2)
            targets = batch["returns"] + batch["discounts"] * best.gather(1, batch["bootstrap"])
        valid = batch["valid"].float()
        td = (targets - q_taken) * valid
        per_step = nn.functional.smooth_l1_loss(q_taken, targets, reduction="none") * valid
        per_sequence = per_step.sum(1) / valid.sum(1).clamp(min=1)
        loss = (batch["weights"] * per_sequence).mean()
        grad_norm = self._descend(loss)
        size = td.detach().abs()
        mean = size.sum(1) / valid.sum(1).clamp(min=1)
        priorities = PRIORITY_MAX_SHARE * size.max(1).values + (1 - PRIORITY_MAX_SHARE) * mean
        stats = {
            "loss": loss.item(),
            "q_mean": (q_taken.detach() * valid).sum().item() / max(1.0, valid.sum().item()),
            "td_abs_mean": mean.mean().item(),
            "grad_norm": float(grad_norm),
        }
        return stats, {"priorities": priorities.cpu().numpy()}

    def _descend(self, loss: torch.Tensor) -> float:
        """The gradient step (clipped; its norm returned), and the target network's copy when due."""
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.max_grad_norm)
        self.optimizer.step()
        self.updates += 1
        if self.updates % self.cfg.target_update_interval == 0:
            self.target.load_state_dict(_unwrapped(self.model).state_dict())
        return float(grad_norm)

    def _step(
        self, q_taken: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor
    ) -> tuple[dict[str, float], dict]:
        """The gradient step on the Huber loss, and the new priorities."""
        loss, td = dqn_loss(q_taken, targets, weights)
        grad_norm = self._descend(loss)
        stats = {
            "loss": loss.item(),
            "q_mean": q_taken.detach().mean().item(),
            "td_abs_mean": td.abs().mean().item(),
            "grad_norm": float(grad_norm),
        }
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
