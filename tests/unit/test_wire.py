"""dlkit/wire.py: what crosses between the judge and a student's kernel is plain data, both ways, and nothing else.

Round trips keep values, exact types, dtypes, shapes, strides, devices and autograd flags; whatever a
kernel could send that is not a message of the format (a NaN literal, a duplicate key, an object
dtype, data of the wrong length, a handle where none may come) is refused whole, never half-decoded.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from dlkit import wire

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True, database=None)


def round_trip(value, handle=None, resolve=None):
    text = wire.dumps({"v": wire.Encoder(handle=handle).encode(value)})
    return wire.Decoder(resolve=resolve).decode(wire.loads(text)["v"])


scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20),
                    st.binary(max_size=20), st.complex_numbers(allow_nan=False))
arrays = hnp.arrays(st.sampled_from([np.float32, np.float64, np.int64, np.int8, np.uint16, np.bool_, np.complex64]),
                    hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))
values = st.recursive(st.one_of(scalars, arrays), lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.tuples(inner, inner), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=12)


def same(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return a == b or (a != a and b != b)


@SETTINGS
@given(values)
def test_plain_data_round_trips_with_its_exact_types(value):
    assert same(round_trip(value), value)


@SETTINGS
@given(st.sampled_from([torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.bool]),
       st.lists(st.integers(0, 4), min_size=0, max_size=3))
def test_tensors_keep_dtype_shape_and_values(dtype, shape):
    t = (torch.randn(shape) * 10).to(dtype)
    back = round_trip(t)
    assert type(back) is torch.Tensor and back.dtype == dtype and back.shape == t.shape and torch.equal(back, t)


def test_strided_views_arrive_as_views_and_hostile_strides_as_plain_arrays():
    """A function that reads a view's memory as if it were contiguous must be graded on the view the test made."""
    every_other = torch.arange(48.0).reshape(6, 8)[::2, ::2]
    back = round_trip(every_other.requires_grad_())
    assert back.stride() == every_other.stride() and torch.equal(back, every_other) and back.requires_grad
    array = np.arange(48.0).reshape(6, 8)[::2, ::3]
    back_array = round_trip(array)
    assert back_array.strides == array.strides and np.array_equal(back_array, array) and back_array.flags.writeable
    record = wire.Encoder().encode(torch.zeros(2, 2))
    for strides in ([2**40, 1], [1, 1], [0, 1], [-1, 1], ["1", 1]):  # a memory bomb, overlapping, broadcast, junk
        back = wire.Decoder().decode({**record, "stride": strides})
        assert back.is_contiguous() and torch.equal(back, torch.zeros(2, 2))


def test_views_autograd_flags_and_identity_survive():
    leaf = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    leaf.grad = torch.ones(3, 4, dtype=torch.float64)
    back_leaf, back_t, back_again = round_trip([leaf, leaf.T * 2, leaf])
    assert back_leaf.requires_grad and back_leaf.is_leaf and torch.equal(back_leaf.grad, leaf.grad)
    assert back_t.stride() == (1, 4) and not back_t.is_leaf and back_t.requires_grad
    assert back_again is back_leaf, "one object sent twice arrives as one object"
    param = round_trip(torch.nn.Parameter(torch.zeros(2)))
    assert type(param) is torch.nn.Parameter
    fortran = round_trip(np.asfortranarray(np.arange(6.0).reshape(2, 3)))
    assert fortran.flags.f_contiguous and not fortran.flags.c_contiguous
    assert type(round_trip(np.int64(3))) is np.int64 and type(round_trip(True)) is bool


def test_fakegpu_tensors_stay_on_the_simulated_device():
    from dlkit import fakegpu

    with fakegpu.active():
        t = torch.arange(4.0, device="meta")
        back = round_trip(t)
    assert isinstance(back, fakegpu.FakeGpuTensor) and torch.equal(back.elem, t.elem)


class LyingInt(int):
    def __eq__(self, other):
        return True


class LyingArray(np.ndarray):
    def __array__(self, *args, **kwargs):
        raise RuntimeError("reads the caller's frames")


NOT_PLAIN = [LyingInt(3), np.zeros(3).view(LyingArray), object(), lambda: 1, np.array([object()])]


@pytest.mark.parametrize("value", NOT_PLAIN)
def test_anything_not_plain_data_becomes_a_handle_or_is_refused(value):
    handles = []
    encoded = wire.Encoder(handle=lambda v: handles.append(v) or {"t": "handle", "v": 1}).encode(value)
    assert encoded == {"t": "handle", "v": 1} and handles == [value]
    with pytest.raises(wire.WireError):
        wire.Encoder().encode(value)


@pytest.mark.parametrize("text", [
    '{"v": NaN}',
    '{"v": 1, "v": 2}',
    '[1, 2]',
    "not json",
    '{"v": ' + "[" * 5000 + "]" * 5000 + "}",
])
def test_malformed_messages_are_refused(text):
    with pytest.raises(wire.WireError):
        wire.loads(text)


@pytest.mark.parametrize("data", [
    {"t": "ndarray", "dtype": "|O", "shape": [1], "data": "AAAAAAAAAAA="},
    {"t": "ndarray", "dtype": "<f8", "shape": [2], "data": "AAAAAAAAAAA="},
    {"t": "ndarray", "dtype": "<f8", "shape": [10**9, 10**9], "data": ""},
    {"t": "tensor", "dtype": "float32", "shape": [3], "data": "AAAA"},
    {"t": "tensor", "dtype": "int64", "shape": [1], "requires_grad": True, "data": "AAAAAAAAAAA="},
    {"t": "handle", "v": 1},
    {"t": "ref", "v": 5},
    {"t": "pickle", "v": "gASVAAAAAAAAAAB9lC4="},
    {"t": "float", "v": "1e5"},
    {"t": "builtin_type", "v": "object"},
    {"no": "tag"},
])
def test_malformed_values_are_refused(data):
    with pytest.raises(wire.WireError):
        wire.Decoder().decode(data)
