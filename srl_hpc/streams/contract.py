"""What the messages between workers hold, derived in one place from the env's spaces and the algorithm's spec.

Every stream carries numpy arrays (srl_hpc.streams.wire); this module says which, with their dtypes and
shapes, so that actors, policy workers, buffers, trainers and evaluation workers agree without importing
each other:

- observations: a Box as itself (its dtype, its shape). A Dict is one row of bytes per observation
  (uint8, (nbytes,)), its keys' arrays side by side in a packed record (`ObsContract.record`): every
  stream, shared-memory slot, segment and replay buffer then carries one array whatever the space, and
  only the env side (`pack`) and the model (srl_hpc.models.torsos.ObsDecoder) know the keys. A key named
  `action_mask` (PettingZoo's convention) is the mask of the actions the policy may choose.
- actions: Discrete (int64, ()), MultiDiscrete (int64, (heads,)) or Box (float32, its shape). A Box
  action in messages is the policy's raw sample; `to_env` maps it into the env's bounds (clipped, or
  squashed by tanh and rescaled), so the log-probabilities the trainer recomputes are of what was sampled.
- replies, segments and replay items: the algorithm's fields (srl_hpc.algorithms), each step's scalars
  and the action's shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import gymnasium
import numpy as np

from srl_hpc.algorithm_spec import HIDDEN, AlgorithmSpec
from srl_hpc.streams.layout import BATCH, Layout, integer, number, one_of, within

ACTION_MASK = "action_mask"  # a Dict observation's key: 1 where the action may be chosen
BASE_FIELDS = ("obs", "actions", "rewards", "dones", "valid", "versions")  # every algorithm's segments have these
STEP_DTYPES = {
    "rewards": "<f4",
    "dones": "|b1",
    "valid": "|b1",
    "versions": "<i8",
    "next_values": "<f4",
    "terminated": "|b1",
    "logp": "<f4",
    "values": "<f4",
    "discounted_returns": "<f4",
}  # per-step scalars; "actions" are the action space's
ACTION_SPACES = ("Discrete", "MultiDiscrete", "Box")
FIELD_SPACES = (
    gymnasium.spaces.Box,
    gymnasium.spaces.Discrete,
    gymnasium.spaces.MultiDiscrete,
    gymnasium.spaces.MultiBinary,
)  # what a Dict observation's values may be


class SpaceError(ValueError):
    """A space the contract cannot carry (named, with what it can)."""


class ObsContract:
    """How observations of `space` travel: `dtype` and `shape` of one row; for a Dict, `fields`
    ((key, dtype, shape, byte offset) each) inside rows of `record.itemsize` bytes."""

    record: np.dtype | None
    dtype: np.dtype
    shape: tuple[int, ...]

    def __init__(self, space: gymnasium.Space) -> None:
        self.space = space
        self.fields: tuple[tuple[str, np.dtype, tuple[int, ...], int], ...] = ()
        if isinstance(space, gymnasium.spaces.Dict):
            for key, sub in space.spaces.items():
                if not isinstance(sub, FIELD_SPACES):
                    raise SpaceError(
                        f"observation key {key!r} is {sub}; a Dict observation's values must be "
                        f"Box, Discrete, MultiDiscrete or MultiBinary"
                    )
            self.record = np.dtype([(key, sub.dtype, sub.shape) for key, sub in space.spaces.items()])  # packed
            assert self.record.fields is not None  # (a structured dtype)
            self.fields = tuple(
                (key, self.record.fields[key][0].base, self.record.fields[key][0].shape, self.record.fields[key][1])
                for key in space.spaces
            )
            self.dtype, self.shape = np.dtype(np.uint8), (self.record.itemsize,)
        elif isinstance(space, gymnasium.spaces.Box):
            self.record = None
            self.dtype, self.shape = np.dtype(space.dtype), tuple(space.shape)
        else:
            raise SpaceError(f"observation space {space}: observations must be a Box or a Dict of arrays")

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(f[0] for f in self.fields)

    def pack(self, obs) -> np.ndarray:
        """A batch as it travels: a Box batch unchanged, a Dict batch (key -> (B, ...)) as (B, nbytes) uint8."""
        if self.record is None:
            return np.asarray(obs, self.dtype)
        rows = np.empty(len(obs[self.fields[0][0]]), self.record)
        for key in self.keys:
            rows[key] = obs[key]
        return rows.view(np.uint8).reshape(len(rows), self.record.itemsize)

    def unpack(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """Packed rows (..., nbytes) -> key -> (..., *shape) arrays (copies)."""
        records = np.ascontiguousarray(rows).view(cast(np.dtype, self.record)).reshape(rows.shape[:-1])
        return {key: np.array(records[key]) for key in self.keys}


class ActionContract:
    """How actions of `space` travel (`dtype`, `shape` per row), which values a receiver accepts, and how
    a Box action reaches the env (`squash`: "clip" or "tanh")."""

    dtype: np.dtype
    shape: tuple[int, ...]
    start: int | np.ndarray
    high: np.int64 | np.ndarray

    def __init__(self, space: gymnasium.Space, squash: str = "clip") -> None:
        self.space, self.squash = space, squash
        self.kind = type(space).__name__
        if isinstance(space, gymnasium.spaces.Discrete):
            self.dtype, self.shape, self.start = np.dtype(np.int64), (), int(space.start)
            self.high = np.int64(space.n)
        elif isinstance(space, gymnasium.spaces.MultiDiscrete):
            if space.nvec.ndim != 1:
                raise SpaceError(f"action space {space}: MultiDiscrete actions must be one vector of choices")
            self.dtype, self.shape, self.start = np.dtype(np.int64), (len(space.nvec),), space.start.astype(np.int64)
            self.high = space.nvec.astype(np.int64)
        elif isinstance(space, gymnasium.spaces.Box):
            if len(space.shape) != 1:
                raise SpaceError(f"action space {space}: Box actions must be one vector")
            self.dtype, self.shape = np.dtype(np.float32), tuple(space.shape)
            if squash == "tanh" and not (np.isfinite(space.low).all() and np.isfinite(space.high).all()):
                raise SpaceError(
                    f"action space {space}: tanh squashing needs finite bounds (use model.action_squash: clip)"
                )
        else:
            raise SpaceError(
                f"action space {space}: actions must be one of {', '.join(ACTION_SPACES)} "
                "(a Tuple or Dict of them is not supported)"
            )

    def valid(self, actions: np.ndarray) -> bool:
        """Choices within range (what a policy can have sampled; a Box sample is any finite number)."""
        if self.kind == "Box" or actions.size == 0:
            return True
        return bool((actions >= 0).all() and (actions < self.high).all())

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        """What the env steps with: a choice shifted by the space's start, a Box sample into its bounds."""
        if self.kind != "Box":
            return actions + self.start if np.any(self.start) else actions
        low, high = cast(gymnasium.spaces.Box, self.space).low, cast(gymnasium.spaces.Box, self.space).high
        if self.squash == "tanh":
            return (low + (np.tanh(actions) + 1.0) * 0.5 * (high - low)).astype(self.space.dtype)
        return np.clip(actions, low, high).astype(self.space.dtype)


@dataclass(frozen=True)
class Contract:
    """The arrays of replies, segments and replay items of one policy of an experiment."""

    obs: ObsContract
    action: ActionContract
    algorithm: AlgorithmSpec
    state_size: int = 0  # floats of recurrent state per row (0: feed-forward)
    scale_rewards: bool = False  # segments carry each step's discounted return (the trainer scales rewards by it)

    @classmethod
    def of(cls, obs_space, action_space, algorithm: AlgorithmSpec, exp) -> Contract:
        """The contract of an experiment's policy with these spaces (srl_hpc.envs.backends.spaces)."""
        return cls(
            ObsContract(obs_space),
            ActionContract(action_space, exp.model.action_squash),
            algorithm,
            exp.model.state_size,
            bool(getattr(exp.algorithm, "scale_rewards", False)),
        )

    def reply_fields(self) -> tuple[tuple[str, str, tuple[int, ...]], ...]:
        """(name, dtype, shape per observation) of every reply array: the algorithm's, and the next recurrent state."""
        fields = tuple((name, *self._step(name, dtype)) for name, dtype in self.algorithm.reply)
        return fields + (((HIDDEN, "<f4", (self.state_size,)),) if self.state_size else ())

    def segment_fields(self) -> tuple[str, ...]:
        """The arrays of a segment: BASE_FIELDS, the algorithm's, and a recurrent model's state at its start."""
        extra = ("discounted_returns",) if self.scale_rewards else ()
        return BASE_FIELDS + self.algorithm.segment + extra + ((HIDDEN,) if self.state_size else ())

    def segment_arrays(self, rows: int, length: int) -> dict[str, np.ndarray]:
        """An empty segment of `rows` envs and `length` steps, as RingGroup fills it."""
        seg = {"obs": np.empty((rows, length, *self.obs.shape), self.obs.dtype)}
        for name in self.segment_fields()[1:]:
            if name == HIDDEN:
                seg[HIDDEN] = np.empty((rows, self.state_size), np.float32)
            else:
                dtype, shape = self._step(name)
                seg[name] = np.empty((rows, length, *shape), dtype)
        return seg

    def segment_layout(self, segment_length: int, actors: list[str]) -> Layout:
        """What a segment consumer accepts: exactly the segments RingGroup makes."""
        arrays: dict[str, tuple[str | None, tuple]] = {
            "obs": (self.obs.dtype.str, (BATCH, segment_length, *self.obs.shape))
        }
        for name in self.segment_fields()[1:]:
            if name == HIDDEN:
                arrays[HIDDEN] = ("<f4", (BATCH, self.state_size))
            else:
                dtype, shape = self._step(name)
                arrays[name] = (dtype, (BATCH, segment_length, *shape))
        return Layout(
            "segment",
            arrays,
            {
                "actor": one_of(actors),
                "incarnation": integer(),
                "group": integer(),
                "frames": integer(),
                "fill_seconds": lambda v: number(v) and cast(float, v) >= 0,
            },
            values=self._values,
        )

    def replay_layout(self, buffers: list[str], team: int = 0, sequence: tuple[int, int] | None = None) -> Layout:
        """A sampled batch as a trainer accepts it (n-step fields, weights, indices); with `team` agents, each
        item an env's agents together; with `sequence` (length, state size), sequences."""
        obs, (a_dtype, a_shape) = (self.obs.dtype.str, self.obs.shape), self._step("actions")
        meta = {"buffer": one_of(buffers), "incarnation": integer()}
        if sequence is not None:
            length, state_size = sequence
            steps = {k: (STEP_DTYPES[k], (BATCH, length)) for k in ("rewards", "dones", "terminated", "valid")}
            return Layout(
                "replay",
                {
                    "obs": (obs[0], (BATCH, length, *obs[1])),
                    "actions": (a_dtype, (BATCH, length, *a_shape)),
                    **steps,
                    HIDDEN: ("<f4", (BATCH, state_size)),
                    "weights": ("<f4", (BATCH,)),
                    "indices": ("<i8", (BATCH,)),
                },
                meta,
                values=self._values,
            )
        agents = (team,) if team else ()
        obs_array = (obs[0], (BATCH, *agents, *obs[1]))
        return Layout(
            "replay",
            {
                "obs": obs_array,
                "next_obs": obs_array,
                "actions": (a_dtype, (BATCH, *agents, *a_shape)),
                "returns": ("<f4", (BATCH,)),
                "discounts": ("<f4", (BATCH,)),
                "weights": ("<f4", (BATCH,)),
                "indices": ("<i8", (BATCH,)),
            },
            meta,
            values=self._values,
        )

    def _step(self, name: str, dtype: str | None = None) -> tuple[str, tuple[int, ...]]:
        """(dtype, shape per step) of a per-step field."""
        if name == "actions":
            return self.action.dtype.str, self.action.shape
        return dtype or STEP_DTYPES[name], ()

    def _values(self, arrays: dict[str, np.ndarray]) -> bool:
        versions = arrays.get("versions")
        if versions is not None and versions.size and (int(versions.min()) < 0 or int(versions.max()) >= 2**62):
            return False
        return self.action.valid(arrays["actions"])


def segment_frames(segment: dict, frames_per_step: int) -> int:
    """Env frames in segments: their valid steps (an auto-reset step is not a transition) x frame skip."""
    return int(segment["valid"].sum()) * frames_per_step


def priorities_layout(capacity: int) -> Layout:
    """New priorities from a trainer, for items of this buffer (an index past its capacity is not one)."""
    return Layout(
        "priorities",
        {"indices": ("<i8", (BATCH,)), "priorities": (None, (BATCH,))},
        {"incarnation": integer()},
        values=within("indices", 0, capacity),
    )
