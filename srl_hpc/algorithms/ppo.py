"""PPO: clipped surrogate objective, GAE advantages, value loss, entropy bonus.

Reads top to bottom: `act` is what a policy handler runs (sample from the logits, keep the log-prob and
the value), `gae` turns trajectory segments into advantages and returns, `ppo_losses` is the objective
for one minibatch, and `PPO.update` runs several epochs of minibatch SGD over one batch.
Segments come from actors that may run a slightly older policy (the version is recorded per step);
the clipped ratio against the behaviour log-probs keeps those updates safe. With a recurrent model
(model.rnn) minibatches are whole segments, unrolled from the state their first step was chosen with,
and the loss counts their valid steps only.
The action distribution is the model's (`model.action_dist`: categorical, multi-categorical or diagonal
Gaussian, srl_hpc/models/distributions.py). The options of the continuous-control recipe are here too:
observation statistics updated once per batch before its SGD steps (they live in the model, so they are
published with the weights), rewards scaled by the running deviation of the discounted return, and the
clipped value loss.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, cast

import numpy as np
import torch
from torch import nn

from srl_hpc.algorithm_spec import HIDDEN
from srl_hpc.models.normalization import ReturnScale, collecting, moments

if TYPE_CHECKING:
    from srl_hpc.models.distributions import ActionDistribution


def act(
    model: nn.Module, obs: torch.Tensor, explore: dict, generator: torch.Generator, *hidden: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Actions sampled from the policy, with their log-probabilities and the state values (the behaviour
    policy's, recorded in segments); a recurrent model takes each row's state and returns the next."""
    params, values, *state = model(obs, *hidden)
    actions, logp = cast("ActionDistribution", model.action_dist)(params).sample_with_log_prob(generator)
    out = {"actions": actions, "logp": logp, "values": values.float()}
    return out | ({HIDDEN: state[0].float()} if state else {})


def greedy(model: nn.Module, obs: torch.Tensor, *hidden: torch.Tensor) -> dict[str, torch.Tensor]:
    """The most likely action (evaluation workers)."""
    params, _, *state = model(obs, *hidden)
    return {"actions": cast("ActionDistribution", model.action_dist)(params).mode()} | (
        {HIDDEN: state[0].float()} if state else {}
    )


def gae(
    rewards: np.ndarray, values: np.ndarray, next_values: np.ndarray, dones: np.ndarray, gamma: float, lam: float
) -> tuple[np.ndarray, np.ndarray]:
    """Generalised advantage estimation over segments of shape (N, T).

    next_values[t] is the value of the state after step t: 0 when the episode terminated there, the value of
    the final observation when it was truncated, V(s_{t+1}) otherwise. Accumulation stops at episode ends.
    Returns (advantages, returns), both (N, T) float32.
    """
    rewards, values, next_values = (np.asarray(a, np.float32) for a in (rewards, values, next_values))
    not_done = 1.0 - np.asarray(dones, np.float32)
    advantages = np.zeros_like(rewards)
    last = np.zeros(rewards.shape[0], np.float32)
    for t in reversed(range(rewards.shape[1])):
        delta = rewards[:, t] + gamma * next_values[:, t] - values[:, t]
        last = delta + gamma * lam * not_done[:, t] * last
        advantages[:, t] = last
    return advantages, advantages + values


def ppo_losses(
    new_logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    new_values: torch.Tensor,
    returns: torch.Tensor,
    entropy: torch.Tensor,
    clip_coef: float,
    old_values: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """The three loss terms of one minibatch (each a scalar tensor), plus diagnostics. With old_values the
    value loss is clipped: the larger of the new value's error and that of the old value moved by at most
    clip_coef."""
    log_ratio = new_logp - old_logp
    ratio = log_ratio.exp()
    policy_loss = torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - clip_coef, 1 + clip_coef)).mean()
    value_loss = 0.5 * (new_values - returns).pow(2)
    if old_values is not None:
        clipped = old_values + (new_values - old_values).clamp(-clip_coef, clip_coef)
        value_loss = torch.max(value_loss, 0.5 * (clipped - returns).pow(2))
    value_loss = value_loss.mean()
    with torch.no_grad():
        approx_kl = ((ratio - 1) - log_ratio).mean()
        clip_fraction = ((ratio - 1).abs() > clip_coef).float().mean()
    return {
        "policy_loss": policy_loss,
        "value_loss": value_loss,
        "entropy": entropy.mean(),
        "approx_kl": approx_kl,
        "clip_fraction": clip_fraction,
    }


def explained_variance(predicted: torch.Tensor, target: torch.Tensor) -> float:
    """1 - Var(target - predicted) / Var(target): 1 for a perfect value function, 0 for a constant one, below
    0 for one worse than a constant (nan when the targets do not vary)."""
    var = target.var().item() if target.numel() > 1 else 0.0
    return 1.0 - (target - predicted).var().item() / var if var > 0 else float("nan")


class PPO:
    act = staticmethod(act)
    greedy = staticmethod(greedy)

    def __init__(
        self, model: nn.Module, cfg, device: torch.device, bf16: bool = False, total_frames: int | None = None
    ) -> None:
        self.model = model  # the trainer may swap in its DDP wrapper
        self.cfg = cfg
        self.total_frames = total_frames  # the horizon for learning-rate annealing
        self.device = device
        self.bf16 = bf16  # forward under bf16 autocast: faster NatureCNN updates on CPUs with bf16 instructions
        # fused: one kernel for the whole step over every parameter, faster on CPU (docs/benchmarks.md)
        self.optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, eps=1e-5, fused=True)
        # (before the trainer may wrap the model for DDP)
        self.action_dist = cast("ActionDistribution", model.action_dist)
        self.return_scale = ReturnScale() if cfg.scale_rewards else None
        self.restarted_with: dict[str, float] = {}  # hyper-parameters changed by restart(), kept by checkpoints

    def prepare(self, seg: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        """Segments (N, T, ...) -> flat CPU training tensors with advantages and returns (the trainer moves
        them to its device). Steps marked invalid (an env's auto-reset) are left out after GAE: an episode
        end stops the accumulation before them. With reward scaling, rewards are scaled by the statistics
        so far, and the batch's discounted returns go with it (update() merges them). Runs in the pre-fetch
        thread."""
        rewards, scale = seg["rewards"], {}
        if self.return_scale is not None:
            rewards = self.return_scale.scale(rewards)
            scale = {"_return_moments": moments(torch.from_numpy(seg["discounted_returns"][seg["valid"]]))}
        adv, ret = gae(rewards, seg["values"], seg["next_values"], seg["dones"], self.cfg.gamma, self.cfg.gae_lambda)
        if HIDDEN in seg:  # a recurrent model: whole segments (N, T), their steps masked instead of left out
            valid = seg["valid"]
            resets = np.zeros_like(valid)
            resets[:, 1:] = ~valid[:, :-1]  # the step after an auto-reset is an episode's first: actors zero its state
            seqs = {
                **self.inputs(seg),
                "actions": seg["actions"],
                "logp": seg["logp"].astype(np.float32),
                "advantages": adv,
                "returns": ret,
                "values": np.asarray(seg["values"], np.float32),
                "valid": valid,
                "resets": resets,
                HIDDEN: seg[HIDDEN],
            }
            return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in seqs.items()} | scale
        flat = {k: v.reshape(-1, *v.shape[2:]) for k, v in self.inputs(seg).items()}
        flat |= {
            "actions": seg["actions"].reshape(-1, *seg["actions"].shape[2:]),
            "logp": seg["logp"].reshape(-1).astype(np.float32),
            "advantages": adv.reshape(-1),
            "returns": ret.reshape(-1),
            "values": np.asarray(seg["values"], np.float32).reshape(-1),  # what the actors' policy predicted
        }
        valid = seg["valid"].reshape(-1)
        if not valid.all():  # (a mask copies: 58 MB of Pong frames per batch, so only when needed)
            flat = {k: v[valid] for k, v in flat.items()}
        return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in flat.items()} | scale

    def inputs(self, seg: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """What the model reads at each step (N, T, ...), a recurrent state aside: the observations."""
        return {"obs": seg["obs"]}

    def evaluate(self, mb: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """The model's logits and values on a minibatch (segments unrolled from their state: (N, T, ...))."""
        if HIDDEN in mb:
            return self.model(mb["obs"], mb[HIDDEN], mb["resets"])[:2]
        return self.model(mb["obs"])

    def update(self, batch: dict[str, torch.Tensor], frames_done: int) -> tuple[dict[str, float], dict]:
        """One batch: `epochs` passes of `minibatches` SGD steps. Returns (mean losses and diagnostics,
        feedback for the batch's source: none for PPO)."""
        cfg = self.cfg
        if cfg.anneal_lr and self.total_frames:
            for group in self.optimizer.param_groups:
                group["lr"] = cfg.lr * max(0.0, 1.0 - frames_done / self.total_frames)
        self.update_statistics(batch)
        recurrent = HIDDEN in batch
        n = batch["actions"].shape[0]  # steps; segments with a recurrent model
        mb_size = max(1, n // cfg.minibatches)
        sums: dict[str, float] = {}
        steps = 0
        for _ in range(cfg.epochs):
            order = torch.randperm(n, device=self.device)
            for start in range(0, mb_size * cfg.minibatches, mb_size):
                mb = {k: v[order[start : start + mb_size]] for k, v in batch.items()}
                with torch.autocast(self.device.type, torch.bfloat16, enabled=self.bf16):
                    params, values = self.evaluate(mb)
                if recurrent:  # the valid steps of the unrolled segments
                    keep = mb["valid"].flatten()
                    params, values = params.flatten(0, 1)[keep], values.flatten()[keep]
                    mb = {k: mb[k].flatten(0, 1)[keep] for k in ("actions", "logp", "advantages", "returns", "values")}
                values = values.float()
                adv = mb["advantages"]
                if cfg.normalize_advantages and adv.numel() > 1:
                    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                dist = self.action_dist(params)
                losses = ppo_losses(
                    dist.log_prob(mb["actions"]),
                    mb["logp"],
                    adv,
                    values,
                    mb["returns"],
                    dist.entropy(),
                    cfg.clip_coef,
                    mb["values"] if cfg.clip_value_loss else None,
                )
                loss = (
                    losses["policy_loss"] + cfg.value_coef * losses["value_loss"] - cfg.entropy_coef * losses["entropy"]
                )
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
                self.optimizer.step()
                for k, v in losses.items():
                    sums[k] = sums.get(k, 0.0) + float(v.detach())
                steps += 1
        stats = {k: v / steps for k, v in sums.items()}
        valid = batch["valid"] if recurrent else slice(None)
        stats["explained_variance"] = explained_variance(batch["values"][valid], batch["returns"][valid])
        stats["lr"] = self.optimizer.param_groups[0]["lr"]
        return stats, {}

    def update_statistics(self, batch: dict[str, torch.Tensor]) -> None:
        """Merge the batch into the running statistics (taken out of the batch: they are not minibatched): the
        discounted returns' moments, and the observations, in one forward pass without gradients."""
        returns = batch.pop("_return_moments", None)
        if returns is not None:
            assert self.return_scale is not None  # (prepare() adds the moments only with reward scaling)
            self.return_scale.update(returns)
        with collecting(self.model) as any_statistics, torch.no_grad():
            if any_statistics:
                self.evaluate(batch)

    def restart(self, values: dict[str, float]) -> None:
        """Population-based training: the model now holds another member's weights, trained from the next
        update with these hyper-parameters (keys of the algorithm's config); the optimizer's moments were the
        old weights' and start afresh."""
        self.cfg = dataclasses.replace(self.cfg, **values)
        self.restarted_with = {**self.restarted_with, **values}
        self.optimizer.state.clear()
        for group in self.optimizer.param_groups:
            group["lr"] = self.cfg.lr

    def state_dict(self) -> dict:
        """What a checkpoint needs besides the model's weights (observation statistics are in the model), and
        the hyper-parameters (a population member's change)."""
        scale = {"return_scale": self.return_scale.state_dict()} if self.return_scale is not None else {}
        return {"optimizer": self.optimizer.state_dict(), "restarted_with": self.restarted_with, **scale}

    def load_state_dict(self, state: dict) -> None:
        """A resumed run: the optimizer's moments and the hyper-parameters come back (the learning-rate
        schedule follows frames_done)."""
        self.optimizer.load_state_dict(state["optimizer"])
        if state.get("restarted_with"):
            self.cfg = dataclasses.replace(self.cfg, **state["restarted_with"])
            self.restarted_with = dict(state["restarted_with"])
        if self.return_scale is not None and "return_scale" in state:
            self.return_scale.load_state_dict(state["return_scale"])
