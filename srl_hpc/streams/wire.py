"""The wire format of every stream: a small JSON header frame, then one raw frame per numpy array.

No pickle: a header names each array's dtype and shape, the array bytes travel as their own ZMQ frame
(sent without copying, received as a view on the frame). Object arrays cannot be sent.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

_ALLOWED_KINDS = "biufc"  # bool, signed, unsigned, float, complex


class WireError(ValueError):
    """A message that does not follow the wire format."""


@dataclass
class Message:
    kind: str
    meta: dict = field(default_factory=dict)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


def pack(kind: str, meta: dict | None = None, arrays: dict[str, np.ndarray] | None = None) -> list:
    """Frames for socket.send_multipart(frames, copy=False)."""
    arrays = arrays or {}
    specs, frames = [], []
    for name, arr in arrays.items():
        arr = np.asarray(arr)
        if arr.dtype.kind not in _ALLOWED_KINDS:
            raise WireError(f"array {name!r} has dtype {arr.dtype}; only numeric and bool arrays travel")
        arr = arr if arr.flags.c_contiguous else arr.copy(order="C")  # (ascontiguousarray makes 0-d 1-d)
        specs.append([name, arr.dtype.str, list(arr.shape)])
        frames.append(memoryview(arr).cast("B") if arr.size else b"")
    header = json.dumps({"k": kind, "m": meta or {}, "a": specs}, separators=(",", ":")).encode()
    return [header, *frames]


def unpack(frames) -> Message:
    """Inverse of pack. Arrays are read-only views on the received frames (no copy)."""
    if not frames:
        raise WireError("empty message")
    try:
        header = json.loads(bytes(frames[0].buffer if hasattr(frames[0], "buffer") else frames[0]))
        kind, meta, specs = header["k"], header["m"], header["a"]
    except (ValueError, KeyError, TypeError) as e:
        raise WireError(f"bad header: {e}") from None
    if len(specs) != len(frames) - 1:
        raise WireError(f"header names {len(specs)} arrays but {len(frames) - 1} frames follow")
    arrays = {}
    for (name, dtype, shape), frame in zip(specs, frames[1:]):
        buf = frame.buffer if hasattr(frame, "buffer") else frame
        dt = np.dtype(dtype)
        expected = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        if len(buf) != expected:
            raise WireError(f"array {name!r}: {len(buf)} bytes for dtype {dtype} shape {shape} ({expected} expected)")
        arrays[name] = np.frombuffer(buf, dtype=dt).reshape(shape)
    return Message(kind, meta, arrays)
