"""Action distributions over a policy head's output, one per action space (srl_hpc.streams.contract):

  Discrete       categorical over n logits (masked logits are MASKED: never sampled, no entropy);
  MultiDiscrete  one categorical per head over its slice of sum(nvec) logits; log-probs and entropies add;
  Box            diagonal Gaussian: the head gives the means and a state-independent log-std per dimension,
                 side by side (2 x dims), as in the standard continuous PPO.

Each has sample(generator), log_prob(actions), entropy() and mode(), in float32 whatever the model's
precision. Written for the policy workers' small batches: a categorical samples by the Gumbel-max trick
(argmax of log-probabilities plus Gumbel noise, -log of exponential draws), without torch.distributions'
argument checks, which doubled the cost of acting.
"""

from __future__ import annotations

import math
from typing import cast

import gymnasium
import torch

MASKED = -1e9  # a masked action's logit: exp() is exactly 0, and 0 * MASKED is 0, not nan


class Categorical:
    def __init__(self, logits: torch.Tensor) -> None:
        self.logp_all = logits.float().log_softmax(-1)

    def sample(self, generator: torch.Generator) -> torch.Tensor:
        return self.sample_with_log_prob(generator)[0]

    def sample_with_log_prob(self, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """(actions, their log-probabilities) in one pass: what a policy worker needs per request."""
        noise = torch.empty_like(self.logp_all).exponential_(generator=generator).log()
        actions = (self.logp_all - noise).argmax(-1, keepdim=True)
        return actions.squeeze(-1), self.logp_all.gather(-1, actions).squeeze(-1)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return self.logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        return -(self.logp_all.exp() * self.logp_all).sum(-1)

    def mode(self) -> torch.Tensor:
        return self.logp_all.argmax(-1)


class MultiCategorical:
    def __init__(self, logits: torch.Tensor, nvec: tuple[int, ...]) -> None:
        self.heads = [Categorical(part) for part in logits.split(nvec, -1)]

    def sample(self, generator: torch.Generator) -> torch.Tensor:
        return torch.stack([head.sample(generator) for head in self.heads], -1)

    def sample_with_log_prob(self, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        actions = self.sample(generator)
        return actions, self.log_prob(actions)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return cast(torch.Tensor, sum(head.log_prob(actions[..., i]) for i, head in enumerate(self.heads)))

    def entropy(self) -> torch.Tensor:
        return cast(torch.Tensor, sum(head.entropy() for head in self.heads))

    def mode(self) -> torch.Tensor:
        return torch.stack([head.mode() for head in self.heads], -1)


class DiagGaussian:
    def __init__(self, params: torch.Tensor) -> None:
        self.mean, self.log_std = params.float().chunk(2, -1)

    def sample(self, generator: torch.Generator) -> torch.Tensor:
        noise = torch.empty_like(self.mean).normal_(generator=generator)
        return self.mean + self.log_std.exp() * noise

    def sample_with_log_prob(self, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        actions = self.sample(generator)
        return actions, self.log_prob(actions)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        z = (actions.float() - self.mean) * (-self.log_std).exp()
        return (-0.5 * z.pow(2) - self.log_std - 0.5 * math.log(2 * math.pi)).sum(-1)

    def entropy(self) -> torch.Tensor:
        return (self.log_std + 0.5 * (1.0 + math.log(2 * math.pi))).sum(-1).expand(self.mean.shape[:-1])

    def mode(self) -> torch.Tensor:
        return self.mean


class ActionDistribution:
    """The distribution of one action space over a policy head's output of `width` numbers per row."""

    def __init__(self, space: gymnasium.Space) -> None:
        self.kind = type(space).__name__
        if isinstance(space, gymnasium.spaces.Discrete):
            self.width = int(space.n)
        elif isinstance(space, gymnasium.spaces.MultiDiscrete):
            self.nvec = tuple(int(n) for n in space.nvec)
            self.width = sum(self.nvec)
        elif isinstance(space, gymnasium.spaces.Box):
            self.dims = int(math.prod(space.shape))
            self.width = 2 * self.dims
        else:
            raise ValueError(f"no action distribution for {space}: Discrete, MultiDiscrete or Box")

    @property
    def gaussian(self) -> bool:
        return self.kind == "Box"

    def __call__(self, params: torch.Tensor) -> Categorical | MultiCategorical | DiagGaussian:
        if self.kind == "Discrete":
            return Categorical(params)
        if self.kind == "MultiDiscrete":
            return MultiCategorical(params, self.nvec)
        return DiagGaussian(params)
