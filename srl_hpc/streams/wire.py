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
        frames.append(memoryview(arr).cast("B") if arr.size else b"")  # type: ignore[arg-type]
    header = json.dumps({"k": kind, "m": meta or {}, "a": specs}, separators=(",", ":")).encode()
    return [header, *frames]


def unpack(frames) -> Message:
    """Inverse of pack. Arrays are read-only views on the received frames (no copy). Checked as strictly as
    pack checks what it sends: anything else (a foreign client, a damaged frame) is a WireError, never
    another exception, so a receiver can drop it and go on."""
    if not frames:
        raise WireError("empty message")
    try:
        header = json.loads(bytes(frames[0].buffer if hasattr(frames[0], "buffer") else frames[0]))
    except (ValueError, TypeError) as e:
        raise WireError(f"bad header: {e}") from None
    if not (
        isinstance(header, dict)
        and isinstance(header.get("k"), str)
        and isinstance(header.get("m"), dict)
        and isinstance(header.get("a"), list)
    ):
        raise WireError("bad header: expected {'k': str, 'm': dict, 'a': list}")
    kind, meta, specs = header["k"], header["m"], header["a"]
    if len(specs) != len(frames) - 1:
        raise WireError(f"header names {len(specs)} arrays but {len(frames) - 1} frames follow")
    arrays = {}
    for spec, frame in zip(specs, frames[1:]):
        name, dt, shape = _array_spec(spec)
        buf = frame.buffer if hasattr(frame, "buffer") else frame
        expected = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        if len(buf) != expected:
            raise WireError(f"array {name!r}: {len(buf)} bytes for dtype {dt.str} shape {shape} ({expected} expected)")
        arrays[name] = np.frombuffer(buf, dtype=dt).reshape(shape)
    return Message(kind, meta, arrays)


def _array_spec(spec) -> tuple[str, np.dtype, tuple[int, ...]]:
    """[name, dtype, shape] of one array, checked: a numeric or bool dtype, a shape of non-negative ints."""
    if not (
        isinstance(spec, list)
        and len(spec) == 3
        and isinstance(spec[0], str)
        and isinstance(spec[1], str)
        and isinstance(spec[2], list)
    ):
        raise WireError(f"bad array spec {str(spec)[:80]}: expected [name, dtype, shape]")
    name, dtype, shape = spec
    try:
        dt = np.dtype(dtype)
    except (TypeError, ValueError):
        raise WireError(f"array {name!r}: unknown dtype {dtype[:40]!r}") from None
    if dt.kind not in _ALLOWED_KINDS or dt.hasobject or dt.fields is not None or dt.subdtype is not None:
        raise WireError(f"array {name!r}: dtype {dtype[:40]!r} does not travel (numeric and bool only)")
    if not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 2**40 for n in shape) or len(shape) > 32:
        raise WireError(f"array {name!r}: bad shape {str(shape)[:80]}")
    return name, dt, tuple(shape)
