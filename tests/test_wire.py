"""The wire format over a real ZMQ socket pair: arrays arrive bit-identical, no pickle."""

import json

import numpy as np
import pytest
import zmq

from srl_hpc.streams import control, wire


@pytest.fixture
def pair():
    ctx = zmq.Context()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    a.bind("inproc://wire")
    b.connect("inproc://wire")
    yield a, b
    ctx.destroy(linger=0)


def roundtrip(pair, kind, meta, arrays):
    a, b = pair
    a.send_multipart(wire.pack(kind, meta, arrays), copy=False)
    return wire.unpack(b.recv_multipart(copy=False))


@pytest.mark.parametrize(
    "dtype", [np.float32, np.float64, np.float16, np.int8, np.int64, np.uint8, np.uint64, np.bool_, np.complex64]
)
def test_every_dtype_round_trips_exactly(pair, dtype):
    arr = (np.arange(24) % 7).astype(dtype).reshape(2, 3, 4)
    got = roundtrip(pair, "x", {}, {"a": arr}).arrays["a"]
    assert got.dtype == arr.dtype and got.shape == arr.shape and np.array_equal(got, arr)


def test_shapes_meta_and_several_arrays(pair):
    arrays = {"scalar": np.array(3.5), "vec": np.arange(5), "img": np.ones((2, 4, 84, 84), np.uint8)}
    msg = roundtrip(pair, "segment", {"actor": "actor/3", "n": [1, 2]}, arrays)
    assert msg.kind == "segment" and msg.meta == {"actor": "actor/3", "n": [1, 2]}
    for k, v in arrays.items():
        assert msg.arrays[k].shape == v.shape and np.array_equal(msg.arrays[k], v)


def test_empty_arrays_round_trip_with_their_shapes(pair):
    msg = roundtrip(pair, "x", {}, {"e": np.zeros((0, 4), np.float32), "f": np.array([], np.int64)})
    assert msg.arrays["e"].shape == (0, 4) and msg.arrays["f"].shape == (0,)


def test_a_large_array_round_trips_exactly(pair):
    arr = np.random.default_rng(0).integers(0, 255, size=(64, 4, 84, 84 * 4), dtype=np.uint8)  # ~29 MB
    assert np.array_equal(roundtrip(pair, "x", {}, {"a": arr}).arrays["a"], arr)


def test_non_contiguous_array_is_sent_correctly(pair):
    arr = np.arange(100).reshape(10, 10)[:, ::3]
    assert np.array_equal(roundtrip(pair, "x", {}, {"a": arr}).arrays["a"], arr)


def test_object_arrays_are_refused():
    with pytest.raises(wire.WireError, match="dtype object"):
        wire.pack("x", {}, {"a": np.array([{"no": "pickle"}], dtype=object)})


def test_frame_size_mismatch_is_detected():
    frames = wire.pack("x", {}, {"a": np.zeros(4, np.float32)})
    with pytest.raises(wire.WireError, match="bytes"):
        wire.unpack([frames[0], b"\0" * 12])


def test_a_message_missing_frames_is_refused():
    frames = wire.pack("x", {}, {"a": np.zeros(4), "b": np.zeros(2)})
    with pytest.raises(wire.WireError, match="2 arrays"):
        wire.unpack(frames[:2])


@pytest.mark.parametrize(
    "header, frames",
    [
        (b"not json", []),
        (b'["a", "list"]', []),
        (b'{"k": 1, "m": {}, "a": []}', []),
        (b'{"k": "x", "m": [], "a": []}', []),
        (b'{"k": "x", "m": {}, "a": [["a", "|O", [1]]]}', [b"\0" * 8]),  # an object array: pickle by the back door
        (b'{"k": "x", "m": {}, "a": [["a", "V8", [1]]]}', [b"\0" * 8]),
        (b'{"k": "x", "m": {}, "a": [["a", "nonsense", [1]]]}', [b"\0" * 8]),
        (b'{"k": "x", "m": {}, "a": [["a", "<f4", [-1, -2]]]}', [b"\0" * 8]),  # negative dimensions
        (b'{"k": "x", "m": {}, "a": [["a", "<f4", [1.5]]]}', [b"\0" * 6]),
        (b'{"k": "x", "m": {}, "a": [["a", "<f4"]]}', [b"\0" * 4]),
        (b'{"k": "x", "m": {}, "a": [7]}', [b"\0" * 4]),
    ],
)
def test_a_malformed_message_is_a_wire_error_and_nothing_else(header, frames):
    with pytest.raises(wire.WireError):
        wire.unpack([header, *frames])


@pytest.mark.slow
def test_fuzzed_frames_either_unpack_or_are_a_wire_error():
    """Valid messages of every real dtype unpack to what was packed; random frames and damaged headers are a
    WireError or, where they happen to follow the format, a message of real arrays (never anything else).
    Both outcomes are counted: a wire that refused everything, or accepted everything, fails."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    spec = st.lists(
        st.one_of(
            st.text(max_size=4),
            st.integers(-3, 3),
            st.lists(st.integers(-2, 8), max_size=3),
            st.sampled_from(["<f4", "|u1", "|O", "<i8", "|b1", "<c8", "V4", "S3"]),
        ),
        max_size=4,
    )
    header = st.fixed_dictionaries(
        {
            "k": st.one_of(st.text(max_size=3), st.integers()),
            "m": st.one_of(
                st.dictionaries(st.text(max_size=3), st.integers(), max_size=2), st.lists(st.integers(), max_size=2)
            ),
            "a": st.lists(spec, max_size=3),
        }
    )
    fuzzed = st.tuples(
        st.one_of(header.map(lambda h: json.dumps(h).encode()), st.binary(max_size=40)),
        st.lists(st.binary(max_size=40), max_size=3),
    ).map(lambda c: [c[0], *c[1]])
    array = st.tuples(
        st.sampled_from(["<f4", "<f8", "|u1", "<i8", "|b1", "<c8", "<u2"]), st.lists(st.integers(0, 3), max_size=3)
    ).map(lambda c: (np.arange(int(np.prod(c[1])), dtype=np.int64) % 3).astype(c[0]).reshape(c[1]))
    valid = st.tuples(
        st.text(min_size=1, max_size=8),
        st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
        st.dictionaries(st.text(min_size=1, max_size=4), array, max_size=3),
    )
    outcomes = {"valid accepted": 0, "fuzzed accepted": 0, "fuzzed refused": 0}

    @settings(max_examples=2000, deadline=None, database=None)
    @given(case=st.one_of(valid.map(lambda m: ("valid", m)), fuzzed.map(lambda f: ("fuzzed", f))))
    def check(case):
        what, value = case
        if what == "valid":
            kind, meta, arrays = value
            msg = wire.unpack(wire.pack(kind, meta, arrays))  # a WireError here fails the test
            assert msg.kind == kind and msg.meta == meta and set(msg.arrays) == set(arrays)
            assert all(msg.arrays[k].dtype == a.dtype and np.array_equal(msg.arrays[k], a) for k, a in arrays.items())
            outcomes["valid accepted"] += 1
            return
        try:
            msg = wire.unpack(value)
        except wire.WireError:
            outcomes["fuzzed refused"] += 1
            return
        assert isinstance(msg.kind, str) and isinstance(msg.meta, dict)
        assert all(a.dtype.kind in "biufc" for a in msg.arrays.values())
        outcomes["fuzzed accepted"] += 1

    check()
    assert outcomes["valid accepted"] > 100 and outcomes["fuzzed refused"] > 100, outcomes


def test_the_controller_takes_in_a_bounded_number_of_heartbeats_however_many_workers_report():
    assert control.report_interval(5) == control.report_interval(control.MAX_REPORTS_PER_S) == 1.0
    for n in (2_000, 15_000, 100_000):
        assert n / control.report_interval(n) == control.MAX_REPORTS_PER_S  # reports per second, all workers
