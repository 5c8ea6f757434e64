"""Hypothesis strategies for messages a run's receivers must drop: a valid message of one port with one
defect (any part of it: kind, a meta key or value, an array's presence, dtype, shape or values), or
damaged wire frames. Every one is invalid by construction, so a test can demand that each is dropped
and counted, while the valid rest of the message takes the receiver's checks deep."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from srl_hpc.streams import wire
from srl_hpc.streams.layout import number

KINDS = {
    "heartbeat",
    "failed",
    "final",
    "restarting",
    "segment",
    "infer",
    "reply",
    "replay",
    "priorities",
    "want",
    "credit",
}
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=12))
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=5,
)
NUMERIC = ["|b1", "|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8", "<f2", "<f4", "<f8", "<c8"]


def not_in(values) -> st.SearchStrategy:
    """JSON values other than these."""
    values = list(values)
    return JSON.filter(lambda v: not any(type(v) is type(ok) and v == ok for ok in values))


def not_a_count() -> st.SearchStrategy:
    return JSON.filter(lambda v: not (isinstance(v, int) and not isinstance(v, bool) and v >= 0))


def not_a_number() -> st.SearchStrategy:
    return JSON.filter(lambda v: not number(v))


@dataclass
class Port:
    """A valid message of one port, and what this port refuses in each of its parts."""

    template: wire.Message
    bad_meta: dict[str, st.SearchStrategy]  # a meta key -> values refused for it
    required: tuple[str, ...] | None = None  # meta keys it cannot go without (None: those of bad_meta)
    fixed_dtypes: tuple[str, ...] = ()  # arrays whose dtype is fixed (the others take any real dtype)
    out_of_range: dict[str, st.SearchStrategy] = field(default_factory=dict)  # integer array -> values refused


def _with(msg: wire.Message, kind=None, meta=None, arrays=None) -> wire.Message:
    return dataclasses.replace(
        msg,
        kind=msg.kind if kind is None else kind,
        meta=dict(msg.meta) if meta is None else meta,
        arrays=dict(msg.arrays) if arrays is None else arrays,
    )


def _replace_array(msg, name, value):
    return _with(msg, arrays={**msg.arrays, name: value})


def _reshaped(a: np.ndarray, how: str, axis: int) -> np.ndarray:
    if how == "grow":  # a non-batch axis one longer (axis 0 is every template's batch axis)
        shape = list(a.shape)
        shape[axis] += 1
        return np.resize(a, shape)
    if how == "add":
        return a[..., None]
    return a[..., 0]  # "drop" the last axis


def defects(port: Port) -> st.SearchStrategy:
    """One defect in a valid message of `port`, as wire frames."""
    t = port.template
    names = list(t.arrays)
    required = sorted(port.bad_meta if port.required is None else port.required)
    options = [st.text(max_size=12).filter(lambda k: k not in KINDS).map(lambda k: _with(t, kind=k))]
    if required:
        options.append(
            st.sampled_from(required).map(lambda k: _with(t, meta={m: v for m, v in t.meta.items() if m != k}))
        )
    if port.bad_meta:
        options.append(
            st.sampled_from(sorted(port.bad_meta)).flatmap(
                lambda k: port.bad_meta[k].map(lambda v: _with(t, meta={**t.meta, k: v}))
            )
        )
    if names:
        floats = [n for n in names if t.arrays[n].dtype.kind == "f"]
        options += [
            st.sampled_from(names).map(lambda n: _with(t, arrays={k: v for k, v in t.arrays.items() if k != n})),
            st.text(min_size=1, max_size=8)
            .filter(lambda n: n not in t.arrays)
            .map(lambda n: _replace_array(t, n, np.zeros(1, np.float32))),
            st.tuples(st.sampled_from(names), st.sampled_from(["grow", "add", "drop"]))
            .filter(lambda c: c[1] != "grow" or t.arrays[c[0]].ndim >= 2)
            .flatmap(
                lambda c: st.integers(1, max(1, t.arrays[c[0]].ndim - 1)).map(
                    lambda axis: _replace_array(t, c[0], _reshaped(t.arrays[c[0]], c[1], axis))
                )
            ),
            st.sampled_from(names).flatmap(
                lambda n: st.sampled_from(
                    [d for d in NUMERIC if d != t.arrays[n].dtype.str] if n in port.fixed_dtypes else ["<c8"]
                ).map(lambda d: _replace_array(t, n, t.arrays[n].astype(d)))
            ),
        ]
        if floats:
            options.append(
                st.tuples(st.sampled_from(floats), st.sampled_from([np.nan, np.inf, -np.inf])).map(
                    lambda c: _replace_array(t, c[0], _poisoned(t.arrays[c[0]], c[1]))
                )
            )
    for name, bad in port.out_of_range.items():
        options.append(bad.map(lambda v, n=name: _replace_array(t, n, _poisoned(t.arrays[n], v))))
    message = st.one_of(options).map(lambda m: wire.pack(m.kind, m.meta, m.arrays))
    return st.one_of(message, damaged(port))


def _poisoned(a: np.ndarray, value) -> np.ndarray:
    out = a.copy()
    out.flat[0] = value
    return out


def damaged(port: Port) -> st.SearchStrategy:
    """Frames that do not follow the wire format: random bytes, a header that is not one, frames missing or
    of the wrong size."""
    frames = [bytes(f) for f in wire.pack(port.template.kind, port.template.meta, port.template.arrays)]
    return st.one_of(
        st.lists(st.binary(max_size=64), min_size=1, max_size=3),
        JSON.filter(lambda h: not isinstance(h, dict)).map(lambda h: [json.dumps(h).encode(), *frames[1:]]),
        st.just(frames[:1] + frames[2:]) if len(frames) > 1 else st.just(frames + [b"\0"]),
        st.binary(max_size=16)
        .filter(lambda b: len(frames) > 1 and len(b) != len(frames[1]))
        .map(lambda b: [frames[0], b, *frames[2:]])
        if len(frames) > 1
        else st.just([frames[0], b"x"]),
    )


def draw(strategy: st.SearchStrategy, n: int) -> list[list[bytes]]:
    """n examples of a strategy, drawn by hypothesis (generation only: nothing here fails, so nothing shrinks)."""
    drawn = []

    @settings(
        max_examples=n, database=None, deadline=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck)
    )
    @given(strategy)
    def collect(frames):
        drawn.append(frames)

    collect()
    return drawn
