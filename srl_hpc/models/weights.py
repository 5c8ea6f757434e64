"""A model's weights as named numpy arrays, as the parameter service publishes them, and their checksum."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from srl_hpc.services.parameters import arrays_checksum


def state_arrays(model: nn.Module) -> dict[str, np.ndarray]:
    """Weights as numpy copies (a copy: the optimizer keeps changing the tensors in place)."""
    return {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}


def parameter_checksum(model: nn.Module) -> int:
    """A 63-bit digest of every weight's bytes: equal on two data-parallel trainers only if they hold
    bit-identical parameters."""
    return arrays_checksum(state_arrays(model))


def load_arrays(model: nn.Module, arrays: dict[str, np.ndarray]) -> None:
    model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in arrays.items()})
