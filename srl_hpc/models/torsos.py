"""Torsos: what turns an observation into features (MLP, NatureCNN for images, DictTorso for a Dict
observation, which ObsDecoder unpacks from the bytes it travels as)."""

from __future__ import annotations

from typing import TypeVar, cast

import gymnasium
import numpy as np
import torch
from torch import nn

from srl_hpc.models.normalization import RunningMeanStd
from srl_hpc.streams.contract import ACTION_MASK, ObsContract

Layer = TypeVar("Layer", bound=nn.Module)


def init_layer(layer: Layer, gain: float) -> Layer:
    nn.init.orthogonal_(cast(torch.Tensor, layer.weight), gain)
    nn.init.zeros_(cast(torch.Tensor, layer.bias))
    return layer


class MLP(nn.Module):
    """Vector observations -> features (tanh layers).

    forward calls the layers' functions, not the modules: on a policy worker's small batches each module
    call's own overhead is a large part of the model's forward pass (docs/benchmarks.md)."""

    def __init__(self, obs_dim: int, hidden_sizes: tuple[int, ...], normalize: bool = False) -> None:
        super().__init__()
        self.normalize = RunningMeanStd(obs_dim) if normalize else None
        layers, width = [], obs_dim
        for h in hidden_sizes:
            layers += [init_layer(nn.Linear(width, h), np.sqrt(2)), nn.Tanh()]
            width = h
        self.body = nn.Sequential(*layers)  # (the checkpoints' parameter names: body.0.weight, ...)
        self.linears = [layer for layer in layers if isinstance(layer, nn.Linear)]
        self.width = width

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.flatten(1)
        if self.normalize is not None:
            x = self.normalize(x.float())  # in fp32 whatever the model's precision
        x = x.to(self.linears[0].weight.dtype)  # (bf16 when an engine runs in bf16)
        for layer in self.linears:
            x = torch.tanh(nn.functional.linear(x, layer.weight, layer.bias))
        return x


class NatureCNN(nn.Module):
    """The DQN-Nature torso on uint8 stacked frames (C, 84, 84), scaled to [0, 1] inside.

    Convolutions run channels-last, the layout oneDNN runs fastest on CPU (docs/benchmarks.md)."""

    def __init__(self, obs_shape: tuple[int, ...]) -> None:
        super().__init__()
        c = obs_shape[0]
        self.conv = nn.Sequential(
            init_layer(nn.Conv2d(c, 32, 8, stride=4), np.sqrt(2)),
            nn.ReLU(),
            init_layer(nn.Conv2d(32, 64, 4, stride=2), np.sqrt(2)),
            nn.ReLU(),
            init_layer(nn.Conv2d(64, 64, 3, stride=1), np.sqrt(2)),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            width = self.conv(torch.zeros(1, *obs_shape)).shape[1]
        self.fc = nn.Sequential(init_layer(nn.Linear(width, 512), np.sqrt(2)), nn.ReLU())
        self.conv.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        self.width = 512

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        # channels-last while still uint8; then the weights' dtype (bf16 when an engine runs the model in bf16)
        x = obs.contiguous(memory_format=torch.channels_last).to(cast(nn.Linear, self.fc[0]).weight.dtype) / 255.0
        return self.fc(self.conv(x))


class ObsDecoder(nn.Module):
    """Packed Dict observations (..., nbytes) uint8 -> key -> (..., *shape) tensors of each key's dtype
    (srl_hpc/streams/contract.py packs them); a Box observation passes through unchanged."""

    def __init__(self, obs_space: gymnasium.Space) -> None:
        super().__init__()
        contract = ObsContract(obs_space)
        self.fields = [
            (key, _torch_dtype(dtype), shape, offset, dtype.itemsize * int(np.prod(shape, dtype=np.int64)))
            for key, dtype, shape, offset in contract.fields
        ]

    def forward(self, obs: torch.Tensor) -> torch.Tensor | dict[str, torch.Tensor]:
        if not self.fields:
            return obs
        lead = obs.shape[:-1]
        return {
            key: obs[..., offset : offset + size]
            .clone(memory_format=torch.contiguous_format)
            .view(dtype)
            .reshape(*lead, *shape)
            for key, dtype, shape, offset, size in self.fields
        }

    def mask(self, obs: torch.Tensor) -> torch.Tensor | None:
        """The observation's action mask, if it has one."""
        for key, dtype, shape, offset, size in self.fields:
            if key == ACTION_MASK:
                return (
                    obs[..., offset : offset + size]
                    .clone(memory_format=torch.contiguous_format)
                    .view(dtype)
                    .reshape(*obs.shape[:-1], *shape)
                )
        return None


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.zeros(0, dtype)).dtype


class OneHot(nn.Module):
    """A Discrete entry (an index) as n floats, one of them 1, for the MLP after it."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def forward(self, index: torch.Tensor) -> torch.Tensor:
        return nn.functional.one_hot(index.long(), self.n).float()


class DictTorso(nn.Module):
    """A Dict observation: an encoder per key (NatureCNN for image keys, uint8 of 3 dimensions; an MLP
    otherwise, on a one-hot Discrete entry), their features concatenated. The action mask is not an input."""

    def __init__(self, obs_space: gymnasium.spaces.Dict, hidden_sizes: tuple[int, ...], normalize: bool) -> None:
        super().__init__()
        self.decode = ObsDecoder(obs_space)
        self.encoders = nn.ModuleDict()
        for key, sub in obs_space.spaces.items():
            if key == ACTION_MASK:
                continue
            assert sub.shape is not None  # (ObsDecoder accepted the space: every value has a shape)
            if isinstance(sub, gymnasium.spaces.Discrete):
                self.encoders[key] = nn.Sequential(OneHot(int(sub.n)), MLP(int(sub.n), hidden_sizes))
                self.encoders[key].width = cast(nn.Sequential, self.encoders[key])[1].width
            elif sub.dtype == np.uint8 and len(sub.shape) == 3:  # an image
                self.encoders[key] = NatureCNN(tuple(sub.shape))
            else:
                self.encoders[key] = MLP(int(np.prod(sub.shape)), hidden_sizes, normalize)
        self.width = sum(cast(int, e.width) for e in self.encoders.values())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        fields = self.decode(obs)
        return torch.cat([encoder(fields[key]) for key, encoder in self.encoders.items()], -1)
