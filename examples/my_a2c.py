"""A worked example of your own algorithm by dotted path (see docs/architecture.md): A2C.

    algorithm: {name: "my_a2c:A2CConfig", lr: 1.0e-3}

Three things make an algorithm: its config (a frozen dataclass: a `name` field, the hyper-parameters,
an optional `check()`), its spec (what the policy replies, what segments carry, the model head, whether
it needs replay), and the torch side named by the spec (`act` for policy handlers; `prepare`, `update`,
`state_dict`, `load_state_dict` for trainers). A2C reuses PPO's reply and segment fields, so it reuses
PPO's `act` and `gae`; what differs is the update: one gradient step per batch on the plain policy
gradient.

The module must be importable by every worker: on PYTHONPATH (as `experiments/user_algorithm.yaml` is
run by the tests: PYTHONPATH=examples) or installed into the environment the workers use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from srl_hpc.algorithm_spec import SPECS, AlgorithmSpec
from srl_hpc.algorithms.ppo import act, gae


@dataclass(frozen=True)
class A2CConfig:
    name: str = "my_a2c:A2CConfig"
    gamma: float = 0.99
    gae_lambda: float = 0.95
    lr: float = 1e-3
    value_coef: float = 0.5
    entropy_coef: float = 0.01
    max_grad_norm: float = 0.5
    max_policy_lag: int | None = 4  # the trainer drops segments older than this (A2C has no ratio clip)

    spec: ClassVar[AlgorithmSpec] = AlgorithmSpec(
        "my_a2c:A2C", reply=SPECS["ppo"].reply, segment=SPECS["ppo"].segment, head="actor_critic"
    )

    def check(self) -> list[tuple[str, str]]:
        """(key, message) per problem; the loader adds the YAML line."""
        problems = [
            (k, f"must be in [0, 1], got {getattr(self, k)}")
            for k in ("gamma", "gae_lambda")
            if not 0.0 <= getattr(self, k) <= 1.0
        ]
        if self.lr <= 0:
            problems.append(("lr", f"must be > 0, got {self.lr}"))
        return problems


class A2C:
    act = staticmethod(act)  # sample from the logits; keep log-prob and value (the segment fields)

    def __init__(
        self,
        model: nn.Module,
        cfg: A2CConfig,
        device: torch.device,
        bf16: bool = False,
        total_frames: int | None = None,
    ):
        self.model = model  # the trainer may swap in its DDP wrapper
        self.cfg = cfg
        self.device = device
        self.optimizer = torch.optim.RMSprop(model.parameters(), lr=cfg.lr, alpha=0.99, eps=1e-5)

    def prepare(self, seg: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        """Segments (N, T, ...) -> flat CPU tensors: observations, actions, advantages and returns."""
        adv, ret = gae(
            seg["rewards"], seg["values"], seg["next_values"], seg["dones"], self.cfg.gamma, self.cfg.gae_lambda
        )
        valid = seg["valid"].reshape(-1)  # steps of an env's auto-reset carry no transition
        flat = {
            "obs": seg["obs"].reshape(-1, *seg["obs"].shape[2:])[valid],
            "actions": seg["actions"].reshape(-1).astype(np.int64)[valid],
            "advantages": adv.reshape(-1)[valid],
            "returns": ret.reshape(-1)[valid],
        }
        return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in flat.items()}

    def update(self, batch: dict[str, torch.Tensor], frames_done: int) -> tuple[dict[str, float], dict]:
        """One gradient step: policy gradient with normalised advantages, value regression, entropy bonus."""
        logits, values = self.model(batch["obs"])
        logp_all = logits.float().log_softmax(-1)
        logp = logp_all.gather(1, batch["actions"].unsqueeze(1)).squeeze(1)
        adv = batch["advantages"]
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        policy_loss = -(adv * logp).mean()
        value_loss = 0.5 * (values.float() - batch["returns"]).pow(2).mean()
        entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
        loss = policy_loss + self.cfg.value_coef * value_loss - self.cfg.entropy_coef * entropy
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.max_grad_norm)
        self.optimizer.step()
        return {"policy_loss": float(policy_loss), "value_loss": float(value_loss), "entropy": float(entropy)}, {}

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
