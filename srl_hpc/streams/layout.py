"""What a receiver accepts: the exact layout of one message kind (its arrays' dtypes and shapes, the types
of its meta values, the ranges of its values).

`wire.unpack` checks that a message is well formed; a Layout checks that it is the message this receiver
expects. A well-formed but foreign message (a fuzzer, a client of another version) is then dropped and
counted instead of being indexed into a batch, a sum tree or a reply table, where it would crash a worker.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from srl_hpc.streams.wire import Message

BATCH = "B"  # a shape entry: the message's batch size, the same in every array that has it, at least 1


@dataclass(frozen=True)
class Layout:
    kind: str
    arrays: Mapping[str, tuple[str | None, tuple]]  # name -> (dtype, or None: any real; shape of ints, BATCH, None)
    meta: Mapping[str, Callable[[object], bool]] = field(default_factory=dict)  # key -> test of its value
    values: Callable[[dict[str, np.ndarray]], bool] = lambda arrays: True  # ranges, once the shapes hold

    def accepts(self, msg: Message) -> bool:
        """Exactly these arrays with these dtypes and shapes, finite floats, these meta keys with valid values."""
        if msg.kind != self.kind or msg.arrays.keys() != self.arrays.keys():
            return False
        if not all(key in msg.meta and valid(msg.meta[key]) for key, valid in self.meta.items()):
            return False
        batch = None
        for name, (dtype, shape) in self.arrays.items():
            a = msg.arrays[name]
            dtype_ok = a.dtype.kind in "biuf" if dtype is None else a.dtype == np.dtype(dtype)
            if not dtype_ok or a.ndim != len(shape):
                return False
            for n, want in zip(a.shape, shape):
                if want == BATCH:
                    batch = n if batch is None else batch
                    if n != batch or n < 1:
                        return False
                elif want is not None and n != want:
                    return False
            if a.dtype.kind == "f" and not np.isfinite(a).all():
                return False
        return self.values(msg.arrays)


def number(value) -> bool:
    """A finite int or float (JSON's true and false are not numbers here)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def integer(low: int = 0, high: int | None = None) -> Callable[[object], bool]:
    def valid(value) -> bool:
        return (
            isinstance(value, int) and not isinstance(value, bool) and value >= low and (high is None or value < high)
        )

    return valid


def one_of(choices) -> Callable[[object], bool]:
    choices = frozenset(choices)
    return lambda value: isinstance(value, str) and value in choices


def within(name: str, low: int, high: int) -> Callable[[dict[str, np.ndarray]], bool]:
    """Every entry of integer array `name` in [low, high) (actions of n choices, indices of a buffer)."""

    def valid(arrays) -> bool:
        a = arrays[name]
        return a.size == 0 or (int(a.min()) >= low and int(a.max()) < high)

    return valid
