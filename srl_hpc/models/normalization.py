"""Running mean and variance of observations (and of discounted returns, for reward scaling), owned by the
trainer.

The statistics are buffers of the model, so they travel with the weights the trainer publishes and every
policy and evaluation worker normalises exactly as the trainer does, and checkpoints keep them. The
trainer updates them once per batch, before its SGD steps, from the batch's observations: each batch's
count, mean and sum of squared deviations merge into the running ones by the parallel-variance formula,
so merging batches in any grouping gives the statistics of all the data. Data-parallel trainers merge
their batches' moments in one all-reduce first, and stay identical.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

CLIP = 10.0  # normalised observations and scaled rewards are clipped to [-CLIP, CLIP]
EPSILON = 1e-8


def moments(x: torch.Tensor) -> torch.Tensor:
    """(count, sum, sum of squares) of rows x (N, *shape) in float64, flattened into one vector."""
    x = x.double().flatten(1) if x.dim() > 1 else x.double().unsqueeze(1)
    n = torch.tensor([float(len(x))], dtype=torch.float64, device=x.device)
    return torch.cat([n, x.sum(0), x.pow(2).sum(0)])


def all_reduced(m: torch.Tensor) -> torch.Tensor:
    """The moments summed over data-parallel trainers (unchanged for one)."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        m = m.clone()
        dist.all_reduce(m)
    return m


class RunningMeanStd(nn.Module):
    """Statistics of rows of `dims` numbers; forward normalises (and clips) x (..., dims)."""

    count: torch.Tensor
    mean: torch.Tensor
    var: torch.Tensor

    def __init__(self, dims: int) -> None:
        super().__init__()
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.register_buffer("mean", torch.zeros(dims, dtype=torch.float64))
        self.register_buffer("var", torch.ones(dims, dtype=torch.float64))
        self.collecting = False  # set by `collecting(model)`: forward also merges x into the statistics

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.collecting:
            self.merge(all_reduced(moments(x.reshape(-1, x.shape[-1]))))
        mean, std = self.mean.to(x.dtype), (self.var.double() + EPSILON).sqrt().to(x.dtype)
        return ((x - mean) / std).clamp(-CLIP, CLIP)

    @torch.no_grad()
    def merge(self, m: torch.Tensor) -> None:
        """Merge a batch's (count, sum, sum of squares) into the running statistics."""
        dims = self.mean.numel()
        n, total, squares = m[0], m[1 : 1 + dims], m[1 + dims :]
        if n <= 0:
            return
        mean = total / n
        var = (squares / n - mean.pow(2)).clamp(min=0.0)
        count = self.count + n
        delta = mean - self.mean
        m2 = self.var * self.count + var * n + delta.pow(2) * self.count * n / count
        self.mean.copy_(self.mean + delta * n / count)
        self.var.copy_(m2 / count)
        self.count.copy_(count)


def exact_statistics(model: nn.Module) -> nn.Module:
    """The model with its statistics back in float64 after a conversion of the whole model (an inference
    engine's to bf16 or fp32), so that it normalises as the trainer does."""
    for m in model.modules():
        if isinstance(m, RunningMeanStd):
            m.double()
    return model


@contextlib.contextmanager
def collecting(model: nn.Module) -> Iterator[bool]:
    """Inside, every RunningMeanStd of `model` merges what passes through it (the trainer runs one forward
    pass over a batch here, without gradients, before training on it)."""
    stats = [m for m in model.modules() if isinstance(m, RunningMeanStd)]
    for m in stats:
        m.collecting = True
    try:
        yield bool(stats)
    finally:
        for m in stats:
            m.collecting = False


def has_statistics(model: nn.Module) -> bool:
    return any(isinstance(m, RunningMeanStd) for m in model.modules())


class ReturnScale:
    """Reward scaling: rewards divided by the running standard deviation of the discounted return (which
    actors compute per env and send with each step), then clipped. Kept in the trainer's checkpoint."""

    def __init__(self) -> None:
        self.stats = RunningMeanStd(1)

    def update(self, returns_moments: torch.Tensor) -> None:
        """Merge a batch's moments(discounted returns), summed over data-parallel trainers."""
        self.stats.merge(all_reduced(returns_moments))

    def scale(self, rewards: np.ndarray) -> np.ndarray:
        std = float((self.stats.var[0] + EPSILON).sqrt())
        return (rewards / std).clip(-CLIP, CLIP)

    def state_dict(self) -> dict:
        return self.stats.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.stats.load_state_dict(state)
