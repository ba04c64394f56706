"""Indexing against numpy: take, take_along_axis, put_along_axis, slice/slice_update with
array starts, view, as_strided, `x[...]` with integer arrays and mixed indices,
`x[...] = v` (ints, slices, arrays, masks, broadcasting) and `x.at[...]` updates (checked
against `np.add.at` and friends for duplicate indices). Out-of-range index arrays are
clamped by gathers and dropped by scatters (MLX leaves them undefined).
"""

import kiln.core as mx
import numpy as np
import pytest
from conftest import (
    ALL,
    FLOATS,
    INTS,
    NP,
    RTOL,
    assert_matches,
    dt,
    is_float,
    looser,
    make,
    to_np,
    view_variants,
)


def same(result, expected):
    """Exact equality (data movement never rounds); NaN equals NaN."""
    assert_matches(result, np.asarray(expected), rtol=0, atol=0)


WIDTHS = ["bool_", "uint8", "float16", "bfloat16", "int32", "float64"]
INDEX_DTYPES = INTS


def index_array(values, name="int32"):
    """An index array of dtype `name` (unsigned dtypes get non-negative values only)."""
    return mx.array(np.asarray(values, dtype=NP[name]))


# ---------------------------------------------------------------------------------------
# take / take_along_axis / put_along_axis
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", WIDTHS)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_take(name, index_dtype, rng, device):
    signed = not index_dtype.startswith("u")
    for kind, a, x in view_variants(name, (3, 4), rng, special=True):
        for raw in ([[0, 2], [1, 2]], [2, 0, 0], 1, []):
            vals = np.asarray(raw, dtype=np.int64)
            idx = index_array(vals, index_dtype)
            for axis in (1, -2, None):
                same(mx.take(a, idx, axis=axis), np.take(x, vals, axis=axis))
        if signed:
            neg = np.array([-1, -4, 2])
            same(mx.take(a, index_array(neg, index_dtype), axis=1), np.take(x, neg, axis=1))


def test_take_scalars_and_errors():
    a = mx.arange(6).reshape(2, 3)
    assert mx.take(a, 1, axis=1).tolist() == [1, 4]
    assert mx.take(a, -1, axis=1).tolist() == [2, 5]
    assert mx.take(a, 5).tolist() == 5
    assert mx.take(a, [0, 1], axis=1).shape == (2, 2)
    assert mx.take(mx.array(5), mx.array([0, 0])).tolist() == [5, 5]
    assert mx.take(mx.zeros((2, 3)), mx.array([], dtype=mx.int32), axis=1).shape == (2, 0)
    with pytest.raises(IndexError):
        mx.take(a, mx.array([0]), axis=2)
    with pytest.raises(IndexError):
        mx.take(mx.array(5), 0, axis=0)
    with pytest.raises(ValueError, match="empty axis"):
        mx.take(mx.zeros((0, 3)), mx.array([0]), axis=0)
    with pytest.raises(ValueError):
        mx.take(a, mx.array([1.0]))
    with pytest.raises(ValueError):
        mx.take(a, mx.array([True]), axis=1)


def test_take_out_of_range_clamps():
    # Negative indices count from the end once; what is still out of range is clamped.
    x = np.arange(10, dtype=np.float32)
    raw = np.array([0, 12, 13, -1, -13, -100, 9])
    wrapped = np.where(raw < 0, raw + 10, raw)
    want = np.take(x, wrapped, mode="clip")
    same(mx.take(mx.array(x), mx.array(raw)), want)
    huge = mx.array(np.array([2**64 - 1, 2**63], dtype=np.uint64))
    same(mx.take(mx.array(x), huge), [9, 9])


@pytest.mark.parametrize(
    "shape,ishape,axis",
    [
        ((2, 3), (2, 1), 1),
        ((2, 3), (1, 2), 1),
        ((2, 3), (4, 3), 0),
        ((3, 4, 5), (3, 2, 5), 1),
        ((3, 4, 5), (1, 4, 3), -1),
        ((1, 4), (3, 2), 1),
        ((2, 3), (2, 0), 1),
        ((6,), (4,), None),
    ],
    ids=str,
)
@pytest.mark.parametrize("name", WIDTHS)
def test_take_along_axis(shape, ishape, axis, name, rng, device):
    for kind, a, x in view_variants(name, shape, rng, special=True):
        dim = x.size if axis is None else x.shape[axis]
        vals = rng.integers(-dim, dim, size=ishape)
        got = mx.take_along_axis(a, mx.array(vals), axis=axis)
        same(got, np.take_along_axis(x, vals, axis=axis))
    assert mx.take_along_axis(mx.arange(6).reshape(2, 3), mx.array([[1]])).tolist() == [[1], [4]]


def test_take_along_axis_errors():
    a = mx.arange(6).reshape(2, 3)
    with pytest.raises(ValueError, match="dimension"):
        mx.take_along_axis(a, mx.array([0, 2]), axis=1)
    with pytest.raises(ValueError, match="dimension"):
        mx.take_along_axis(a, mx.array([[5, 0, -1]]), axis=None)
    with pytest.raises(ValueError):
        mx.take_along_axis(a, mx.array([[0, 2, 1, 1]]), axis=0)
    with pytest.raises(IndexError):
        mx.take_along_axis(a, mx.array([[1]]), axis=2)
    with pytest.raises(ValueError):
        mx.take_along_axis(a, mx.array([[1.0]]))


@pytest.mark.parametrize("name", ALL)
def test_put_along_axis(name, rng):
    for kind, a, x in view_variants(name, (3, 4), rng):
        # Unique positions per row, so the result does not depend on write order.
        vals = np.argsort(rng.random((3, 4)), axis=1)[:, :2]
        v, vn = make(name, (3, 2), rng)
        want = x.copy()
        np.put_along_axis(want, vals, vn, axis=1)
        same(mx.put_along_axis(a, mx.array(vals), v, axis=1), want)
        want = x.copy()
        np.put_along_axis(want, vals[:, :1] - 4, vn[:, :1], axis=1)
        same(mx.put_along_axis(a, mx.array(vals[:, :1] - 4), v[:, :1], axis=1), want)
    flat = mx.put_along_axis(mx.zeros((2, 3)), mx.array([1, 5]), mx.array([7, 8]), axis=None)
    same(flat, [[0, 7, 0], [0, 0, 8]])


def test_put_along_axis_broadcasting_and_errors():
    z = mx.zeros((2, 3))
    # Indices and values broadcast together, then over the other axes (as MLX).
    out = mx.put_along_axis(z, mx.array([[0], [2]]), mx.array([[1, 2, 3]]), axis=1)
    same(out, [[3, 0, 0], [0, 0, 3]])
    out = mx.put_along_axis(z, mx.array([[0, 0]]), mx.array([[1, 2]]), axis=1)
    same(out, [[2, 0, 0], [2, 0, 0]])
    out = mx.put_along_axis(mx.zeros((2, 3), dtype=mx.int32), mx.array([[0], [2]]), 2.5, axis=1)
    assert out.dtype == mx.int32 and out.tolist() == [[2, 0, 0], [0, 0, 2]]
    # Out of range positions are dropped.
    out = mx.put_along_axis(z, mx.array([[3], [-4]]), 1.0, axis=1)
    same(out, np.zeros((2, 3)))
    with pytest.raises(ValueError, match="dimension"):
        mx.put_along_axis(z, mx.array([[0], [2]]), mx.array([[1], [2]]))
    with pytest.raises(ValueError):
        mx.put_along_axis(z, mx.array([[0], [2], [1]]), 2, axis=1)
    with pytest.raises(IndexError):
        mx.put_along_axis(z, mx.array([[0]]), 2, axis=5)


# ---------------------------------------------------------------------------------------
# slice / slice_update with array starts
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("index_dtype", ["int32", "uint8", "int64"])
@pytest.mark.parametrize("name", WIDTHS)
def test_dynamic_slice(index_dtype, name, rng):
    for kind, a, x in view_variants(name, (3, 4), rng):
        for start, axes, size in [
            ([1], (0,), (2, 2)),
            ([1, 1], (0, 1), (2, 2)),
            ([2, 3], (0, 1), (1, 1)),
            ([0], (-1,), (3, 0)),
            ([], (), (2, 2)),
            ([2, 3], (1, 0), (3, 4)),
        ]:
            got = mx.slice(a, index_array(start, index_dtype), axes, size)
            begin = [0, 0]
            for s, ax in zip(start, axes):
                begin[ax % 2] = s
            # Starts clamp so the block fits.
            begin = [min(max(b, 0), d - n) for b, d, n in zip(begin, x.shape, size)]
            same(got, x[begin[0] : begin[0] + size[0], begin[1] : begin[1] + size[1]])
        same(mx.slice(a, mx.array(1), (0,), (1, 2)), x[1:2, :2])


def test_dynamic_slice_clamps_and_errors():
    a, x = mx.arange(12).reshape(3, 4), np.arange(12).reshape(3, 4)
    # Starts count from the end when negative, then clamp so the block fits.
    same(mx.slice(a, mx.array([2, 3]), (0, 1), (2, 2)), x[1:3, 2:4])
    same(mx.slice(a, mx.array([-1, 0]), (0, 1), (2, 2)), x[1:3, 0:2])
    same(mx.slice(a, mx.array([-9, 9]), (0, 1), (2, 2)), x[0:2, 2:4])
    with pytest.raises(ValueError, match="slice size"):
        mx.slice(a, mx.array([1, 1]), (0, 1), (4, 2))
    with pytest.raises(ValueError, match="slice size"):
        mx.slice(a, mx.array([1]), (0,), (-1, 2))
    with pytest.raises(ValueError, match="Number of starting"):
        mx.slice(a, mx.array([1, 1]), (0,), (2, 2))
    with pytest.raises(ValueError, match="slice size"):
        mx.slice(a, mx.array([1, 1]), (0, 1), (2,))
    with pytest.raises(ValueError, match="integers"):
        mx.slice(a, mx.array([1.0]), (0,), (2, 2))
    with pytest.raises(IndexError):
        mx.slice(a, mx.array([1]), (2,), (2, 2))
    with pytest.raises(ValueError, match="one dimensional"):
        mx.slice(a, mx.array([[1]]), (0,), (2, 2))
    with pytest.raises(ValueError, match="Repeat"):
        mx.slice(a, mx.array([1, 1]), (0, 0), (2, 2))


@pytest.mark.parametrize("name", ALL)
def test_dynamic_slice_update(name, rng):
    for kind, a, x in view_variants(name, (3, 4), rng):
        u, un = make(name, (2, 3), rng)
        for start, axes, begin in [
            ([1, 1], (0, 1), (1, 1)),
            ([1], (1,), (0, 1)),
            ([2, 3], (0, 1), (1, 1)),  # clamped so the block fits
            ([-1, -9], (0, 1), (1, 0)),
        ]:
            want = x.copy()
            want[begin[0] : begin[0] + 2, begin[1] : begin[1] + 3] = un
            same(mx.slice_update(a, u, mx.array(start), axes), want)
        # Fewer update dims: leading 1s; a 0-d update; an update of another dtype.
        want = x.copy()
        want[1, 1:4] = un[0]
        same(mx.slice_update(a, u[0], mx.array([1, 1]), (0, 1)), want)
        want = x.copy()
        want[2, 0] = un[0, 0]
        same(mx.slice_update(a, u[0, 0], mx.array(2), (0,)), want)


def test_dynamic_slice_update_errors():
    z = mx.zeros((3, 3))
    out = mx.slice_update(mx.zeros((3, 3), dtype=mx.int32), mx.array([[1.5, 2]]), mx.array([1, 1]), (0, 1))
    assert out.dtype == mx.int32 and out.tolist() == [[0, 0, 0], [0, 1, 2], [0, 0, 0]]
    assert mx.slice_update(z, 5, mx.array([1, 1]), (0, 1)).tolist()[1][1] == 5
    with pytest.raises(ValueError):
        mx.slice_update(z, mx.ones((4, 2)), mx.array([1]), (1,))
    with pytest.raises(ValueError):
        mx.slice_update(z, mx.ones((1, 1, 1, 2)), mx.array([1]), (1,))
    with pytest.raises(ValueError):
        mx.slice_update(z, mx.ones((1, 2)), mx.array([1.0]), (1,))


# ---------------------------------------------------------------------------------------
# view / as_strided
# ---------------------------------------------------------------------------------------

VIEW_DTYPES = ["bool_", "uint8", "int8", "uint16", "int16", "float16", "int32", "float32",
               "uint32", "int64", "float64", "uint64"]  # fmt: skip


@pytest.mark.parametrize("src", VIEW_DTYPES)
@pytest.mark.parametrize("to", VIEW_DTYPES)
def test_view(src, to, rng, device):
    for kind, a, x in view_variants(src, (2, 8), rng, special=True):
        got = mx.view(a, dt(to))
        want = np.ascontiguousarray(x).view(NP[to])
        if to == "bool_":
            want = np.ascontiguousarray(x).view(np.uint8) != 0
            want = want.reshape(got.shape)
        if to in FLOATS:
            np.testing.assert_array_equal(to_np(got).view(np.uint8), want.view(np.uint8))
        else:
            same(got, want)


def test_view_bfloat16_and_errors():
    b = mx.view(mx.array([2.0]), mx.bfloat16)
    assert b.shape == (2,) and b.tolist() == [0.0, 2.0]
    assert mx.view(mx.array([1.0, 2.0]), mx.int16).tolist() == [0, 16256, 0, 16384]
    assert mx.view(1.5, mx.int32).tolist() == 1069547520
    assert mx.arange(3).view(mx.float32).shape == (3,)
    assert mx.view(mx.zeros((2, 0)), mx.int64).shape == (2, 0)
    with pytest.raises(ValueError, match="scalar"):
        mx.view(mx.array(1.0), mx.int16)
    with pytest.raises(ValueError, match="multiple"):
        mx.view(mx.array([1.0, 2.0, 3.0]), mx.int64)


@pytest.mark.parametrize("name", WIDTHS)
def test_as_strided(name, rng, device):
    for kind, a, x in view_variants(name, (12,), rng):
        flat = np.ascontiguousarray(x)
        item = flat.itemsize
        for shape, strides, offset in [
            ((3, 3), (1, 1), 0),
            ((3, 3), (3, 1), 1),
            ((3, 3), (-1, 1), 5),
            ((3, 3), (0, 1), 0),
            ((4,), (3,), 0),
            ((0, 3), (100, 1), 0),
            ((), (), 11),
        ]:
            got = mx.as_strided(a, shape, strides, offset)
            base = flat[offset:] if offset else flat
            if any(s < 0 for s in strides):
                base = flat
                start = offset
                want = np.array(
                    [[flat[start + i * strides[0] + j * strides[1]] for j in range(shape[1])]
                     for i in range(shape[0])]
                )
            else:
                want = np.lib.stride_tricks.as_strided(
                    base, shape, tuple(s * item for s in strides)
                )
            same(got, want)
    assert mx.as_strided(mx.arange(10), (3, 3)).tolist() == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    t = mx.arange(6).reshape(2, 3).T
    assert mx.as_strided(t, (6,), (1,)).tolist() == [0, 3, 1, 4, 2, 5]


def test_as_strided_errors():
    a = mx.arange(10)
    with pytest.raises(ValueError, match="outside"):
        mx.as_strided(a, (3, 3), (5, 1))
    with pytest.raises(ValueError, match="outside"):
        mx.as_strided(a, strides=(2,))
    with pytest.raises(ValueError, match="outside"):
        mx.as_strided(a, (2,), (-1,), 0)
    with pytest.raises(ValueError, match="strides"):
        mx.as_strided(a, (3, 3), (1,))
    with pytest.raises(ValueError, match="Negative"):
        mx.as_strided(a, (-3, 3), (1, 1))
    with pytest.raises(ValueError):
        mx.as_strided(a, (2,), (1,), -1)


# ---------------------------------------------------------------------------------------
# __getitem__ with arrays and mixed indices
# ---------------------------------------------------------------------------------------

S = slice(None)
GETITEMS = [
    [0, 2],
    [[0, 1], [1, 0]],
    (S, [0, 1, 2]),
    (S, [0, 1, 2], S, [1, 2, 0]),
    (0, S, [0, 1]),
    (S, 0, S, [0, 1]),
    ([0], S, 0),
    (None, [0, 1], Ellipsis, [1, 0]),
    (S, [0, 1], None, [1, 0]),
    (S, [[0], [1]], [1, 0, 2]),
    (Ellipsis, [1, 0]),
    ([1, 0], Ellipsis, [1, 0]),
    (S, [1, 0], [1, 0], S),
    (S, [1, 0], 1, S),
    (1, [1, 0], 1, S),
    (S, 1, [1, 0], S),
    (slice(None, None, -1), [1, 0], slice(1, 3), [0, 4]),
    ([1, 0], None, [1, 2]),
    (None, None, 1, [0, 2]),
    (1, None, [0, 2]),
    ([[1]], 1, None, [0, 2]),
    ([-1, -2], slice(None, None, -2), [-4, 3], slice(4, 0, -2)),
    (S, [2, -3, 0], Ellipsis),
    ([], ),
    (S, S, S, [[]]),
]


def np_key(key):
    if not isinstance(key, tuple):
        key = (key,)
    return tuple(np.asarray(k, dtype=np.int64) if isinstance(k, list) else k for k in key)


def kiln_key(key, index_dtype):
    if not isinstance(key, tuple):
        key = (key,)
    return tuple(
        mx.array(np.asarray(k, dtype=NP[index_dtype])) if isinstance(k, list) else k for k in key
    )


def signed_ok(key):
    return all(np.min(k, initial=0) >= 0 for k in key if isinstance(k, list))


@pytest.mark.parametrize("key", GETITEMS, ids=str)
@pytest.mark.parametrize("name", WIDTHS)
def test_getitem_advanced(key, name, rng):
    for kind, a, x in view_variants(name, (3, 3, 4, 5), rng, special=True):
        want = x[np_key(key)]
        same(a[kiln_key(key, "int32")], want)
        if signed_ok(key if isinstance(key, tuple) else (key,)):
            same(a[kiln_key(key, "uint16")], want)


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_getitem_index_dtypes_and_lists(index_dtype, rng):
    a, x = make("float32", (4, 3), rng)
    idx = np.array([3, 0, 1])
    same(a[mx.array(idx.astype(NP[index_dtype]))], x[idx])
    same(a[[3, 0, 1]], x[[3, 0, 1]])
    same(a[np.array([3, 0, 1])], x[[3, 0, 1]])
    same(a[[[0], [2]], [0, 1]], x[[[0], [2]], [0, 1]])
    same(a[mx.array(1)], x[1])
    same(a[mx.array([], dtype=mx.int32)], x[np.array([], dtype=np.int64)])
    e, xe = make("int8", (0, 3), rng)
    same(e[mx.array([], dtype=mx.int32)], xe[np.array([], dtype=np.int64)])


def test_getitem_out_of_range_clamps_and_errors():
    a = mx.arange(12).reshape(3, 4)
    same(a[mx.array([0, 5, -1, -7])], np.arange(12).reshape(3, 4)[[0, 2, 2, 0]])
    for bad in ([True, False, True], mx.array([True, False, True])):
        with pytest.raises(ValueError, match="boolean"):
            a[bad]
    for bad in (True, 1.0, "x", [1.0], mx.array([1.0])):
        with pytest.raises(ValueError):
            a[bad]
    with pytest.raises(ValueError):
        a[[]]
    with pytest.raises(ValueError, match="Too many"):
        a[mx.array([0]), 0, 0]
    with pytest.raises(ValueError, match="ellipsis"):
        a[..., mx.array([0]), ...]
    with pytest.raises(IndexError):
        a[mx.array([0]), 4]
    with pytest.raises(IndexError):
        mx.zeros((0, 3))[mx.array([0])]
    with pytest.raises(ValueError):
        a[mx.array([0, 1]), mx.array([0, 1, 2])]
    with pytest.raises(IndexError):
        a[5]


# ---------------------------------------------------------------------------------------
# __setitem__
# ---------------------------------------------------------------------------------------

SETITEMS = [
    (1, ()),
    (1, (4,)),
    (1, (1, 1, 4)),
    ((S, 1), (3,)),
    ((slice(None, None, -1), slice(None, None, 2)), ()),
    ((slice(None, None, -1), slice(None, None, 2)), (3, 2)),
    ((slice(1, None), slice(None, None, -3)), (1, 2)),
    (Ellipsis, ()),
    (None, (4,)),
    ((Ellipsis, 0), (3,)),
    ((S, None, 1), (3, 1)),
    ([0, 2], (2, 1)),
    (([0, 2], [1, 3]), (2,)),
    (([2, 0], slice(None, None, 2)), (2, 2)),
    (([2, 0], slice(1, 3)), ()),
    ((-1, [3, 0]), (2,)),
    ((S, [3, 1]), (3, 2)),
    ((slice(None, None, -1), [3, 1]), (1, 2)),
    (([[0], [1]], [0, 1]), (2, 2)),
    ((slice(2, 2), S), (4,)),
    (([], S), (4,)),
]


@pytest.mark.parametrize("key,vshape", SETITEMS, ids=str)
@pytest.mark.parametrize("name", ALL)
def test_setitem(key, vshape, name, rng, device):
    for kind, a, x in view_variants(name, (3, 4), rng):
        v, vn = make(name, vshape, rng)
        want = x.copy()
        want[np_key(key) if isinstance(key, (tuple, list)) else key] = vn
        before = a
        a[kiln_key(key, "int64") if isinstance(key, (tuple, list)) else key] = v
        same(a, want)
        assert before is a  # the same Python object now holds the new array


def test_setitem_rebinds_and_python_values():
    a = mx.arange(12).reshape(3, 4)
    b = a  # the same object: it sees the assignment
    c = a[0]  # an earlier result keeps its values
    a[0] = 100
    assert b.tolist()[0] == [100] * 4 and c.tolist() == [0, 1, 2, 3]
    a[1] = 5.7  # cast to the array's dtype
    assert a.dtype == mx.int32 and a.tolist()[1] == [5] * 4
    a[2] = True
    assert a.tolist()[2] == [1] * 4
    a[0] = [1, 2, 3, 4]
    a[1] = np.array([5, 6, 7, 8])
    assert a.tolist()[:2] == [[1, 2, 3, 4], [5, 6, 7, 8]]
    a[1] += 5
    assert a.tolist()[1] == [10, 11, 12, 13]
    f = mx.zeros((2,), dtype=mx.float16)
    f[0] = 1e10  # floats round (to inf here), no range check
    assert f.tolist()[0] == float("inf")


def test_setitem_duplicates_and_out_of_range(device):
    a = mx.arange(12).reshape(3, 4)
    a[[0, 0]] += 5  # read once, written twice: +5, as numpy
    assert a.tolist()[0] == [5, 6, 7, 8]
    a[mx.array([5, -4])] = 0  # out-of-range array indices are dropped
    assert a.tolist()[0] == [5, 6, 7, 8]
    a[mx.array([-1])] = 0
    assert a.tolist()[2] == [0, 0, 0, 0]


@pytest.mark.parametrize("name", ALL)
def test_setitem_mask(name, rng, device):
    a, x = make(name, (3, 4), rng)
    for mask_np, vshape in [
        (x != x.flat[0], ()),
        (np.array([True, False, True]), (4,)),
        (np.array([True, False, True]), (2, 4)),
        (np.array([True, False, True]), (2, 1)),
        (np.zeros((3, 4), dtype=bool), ()),
        (np.ones((3, 4), dtype=bool), (12,)),
    ]:
        v, vn = make(name, vshape, rng)
        want = x.copy()
        want[mask_np] = vn
        b = a[...]  # a new Python object: assigning to it leaves `a` alone
        b[mx.array(mask_np)] = v
        same(b, want)


def test_setitem_mask_rules(device):
    a = mx.arange(12).reshape(3, 4)
    a[a > 5] = mx.arange(7) + 100  # rows (here elements) are taken in order
    assert a.tolist() == [[0, 1, 2, 3], [4, 5, 100, 101], [102, 103, 104, 105]]
    a[[True, False, True]] = 1
    assert a.tolist()[0] == [1] * 4 and a.tolist()[2] == [1] * 4
    a[mx.array(True)] = 7
    assert a.tolist() == [[7] * 4] * 3
    with pytest.raises(ValueError, match="mask"):
        a[mx.array([True, False])] = 1
    with pytest.raises(ValueError, match="mask"):
        a[mx.array([[True, False, True, True]])] = 1
    with pytest.raises(ValueError):
        a[mx.array([True, False, True])] = mx.arange(8)
    with pytest.raises(ValueError):
        a[a > 5] = mx.arange(12).reshape(3, 4)
    with pytest.raises(RuntimeError, match="enough"):
        a[a > 0] = mx.array([1, 2])
        a.tolist()
    with pytest.raises(ValueError, match="boolean"):
        a[0, mx.array([True, False, True, True])] = 1


def test_setitem_errors():
    a = mx.arange(12).reshape(3, 4)
    with pytest.raises(ValueError):
        a[1] = mx.array([1, 2])
    with pytest.raises(ValueError):
        a[1:2] = mx.zeros((2, 4))
    with pytest.raises(ValueError):
        a[1:1] = mx.zeros((2, 4))
    with pytest.raises(ValueError):
        a[:, [1]] = mx.zeros((3,))
    with pytest.raises(ValueError):
        a[mx.array([[0, 1]])] = mx.zeros((2, 1, 2, 4))
    with pytest.raises(ValueError, match="Too many"):
        a[0, 0, 0] = 1
    with pytest.raises(ValueError):
        a[1.5] = 1
    with pytest.raises(ValueError):
        a[mx.array([1.5])] = 1
    with pytest.raises(ValueError, match="overflow"):
        a[0, 0] = 2**40
    with pytest.raises(ValueError, match="overflow"):
        mx.zeros((2,), dtype=mx.uint8)[0] = -1
    with pytest.raises(ValueError):
        a[0] = "x"
    with pytest.raises(IndexError):
        a[5] = 1
    assert a.tolist() == np.arange(12).reshape(3, 4).tolist()  # failed assignments change nothing


# ---------------------------------------------------------------------------------------
# .at[...] updates
# ---------------------------------------------------------------------------------------

AT_OPS = [
    ("add", np.add, ALL),
    ("subtract", np.subtract, [n for n in ALL if n != "bool_"]),
    ("multiply", np.multiply, ALL),
    ("divide", np.divide, FLOATS),
    ("maximum", np.maximum, ALL),
    ("minimum", np.minimum, ALL),
]

AT_KEYS = [
    ([0, 0, 2, 0], (4, 4)),
    ([0, 0, 2, 0], ()),
    (([1, 1, 2], [3, 3, 0]), (3,)),
    ((S, [1, 1]), (3, 2)),
    (([2, 2], slice(None, None, -2)), (2, 2)),
    ((1, slice(1, 3)), (2,)),
    (Ellipsis, ()),
]


@pytest.mark.parametrize("key,vshape", AT_KEYS, ids=str)
@pytest.mark.parametrize("op,ufunc,names", AT_OPS, ids=[o[0] for o in AT_OPS])
def test_at(key, vshape, op, ufunc, names, rng, device):
    for name in names:
        if name == "float64" and device == mx.gpu:
            continue  # no float64 on the GPU
        low = 1 if op == "divide" else -4
        for kind, a, x in view_variants(name, (3, 4), rng, low=low, high=4):
            v, vn = make(name, vshape, rng, low=1 if op == "divide" else -4, high=4)
            if op == "divide":
                vn = np.where(vn == 0, 1, vn).astype(vn.dtype)
                v = mx.array(vn, dtype=dt(name))
            want = x.copy()
            nk = np_key(key) if isinstance(key, (tuple, list)) else key
            ufunc.at(want, nk, vn)
            got = getattr(a.at[kiln_key(key, "int32") if isinstance(key, (tuple, list)) else key], op)(v)
            if name in FLOATS:
                assert_matches(got, want)
            else:
                same(got, want)
            same(a, x)  # .at never modifies the array


def test_at_mlx_rules():
    # Values take the array's dtype; integer divide multiplies by a truncated reciprocal.
    assert mx.arange(5).at[mx.array([0, 0, 1])].divide(2).tolist() == [0, 0, 2, 3, 4]
    assert mx.arange(5).at[1:3].add(1.5).tolist() == [0, 2, 3, 3, 4]
    out = mx.arange(5).at[mx.array([1, 1])].maximum(mx.array([2.5, 4.5]))
    assert out.dtype == mx.int32 and out.tolist() == [0, 4, 2, 3, 4]
    assert mx.arange(5).astype(mx.bool_).at[mx.array([1])].add(1).tolist() == [
        False, True, True, True, True
    ]
    out = mx.arange(5).astype(mx.float16).at[mx.array([0, 0])].add(1)
    assert out.dtype == mx.float16 and out.tolist() == [2.0, 1.0, 2.0, 3.0, 4.0]
    # Leading dims of size 1 on the value are dropped, out-of-range indices dropped.
    assert mx.arange(5).at[mx.array([1, 1])].add(mx.array([[[2, 4]]])).tolist()[1] == 7
    assert mx.arange(5).at[mx.array([9, -9])].add(1).tolist() == [0, 1, 2, 3, 4]
    assert mx.arange(5).at[mx.array([-1])].add(1).tolist() == [0, 1, 2, 3, 5]
    with pytest.raises(ValueError, match="Too many"):
        mx.arange(5).at[1, 2].add(1)
    with pytest.raises(ValueError):
        mx.arange(5).at.add(1)
    with pytest.raises(ValueError, match="boolean"):
        mx.arange(5).at[mx.array([True, False, True, False, True])].add(1)


# ---------------------------------------------------------------------------------------
# The same expressions on MLX, where it is installed
# ---------------------------------------------------------------------------------------

MLX_EXPRESSIONS = [
    "mx.arange(120).reshape(2,3,4,5)[:, [[0],[1]], [1,0,2]]",
    "mx.arange(120).reshape(2,3,4,5)[1, None, [0,2]]",
    "mx.arange(24).reshape(2,3,4)[:, mx.array([0,1,2]), ..., mx.array([1,0,1])]",
    "mx.pad(mx.arange(3), 4, mode='reflect')",
    "mx.roll(mx.arange(6).reshape(2,3), (1,2,3), (0,1))",
    "mx.put_along_axis(mx.zeros((2,3)), mx.array([[0],[2]]), mx.array([[1,2,3]]), axis=1)",
    "mx.slice_update(mx.zeros((3,3)), mx.ones((1,2)), mx.array([1]), (1,))",
    "mx.view(mx.arange(8).astype(mx.int8).reshape(2,4).T, mx.int16)",
    "mx.arange(6).reshape(2,3).at[mx.array([0,0]), 1:].add(mx.array([1,2]))",
    "mx.split(mx.arange(6), [3, 1])",
    "mx.take_along_axis(mx.arange(6).reshape(2,3), mx.array([5,0,-1]), axis=None)",
]

MLX_ASSIGNMENTS = [
    "a[[0,0,2], [1,1,1]] = mx.array([1,2,3])",
    "a[a > 5] = mx.array([1,2,3,4,5,6])",
    "a[mx.array([True,False,True])] = mx.arange(2).reshape(2,1)+100",
    "a[mx.array([0,1]), mx.array([[0],[1]])] = mx.array([[1,2],[3,4]])",
    "a[1:, ::-3] = mx.array([[1, 2]])",
    "a[:, None, 1] = mx.array([[1],[2],[3]])",
]


def _result(module, code, assign):
    env = {"mx": module}
    if assign:
        exec("a = mx.arange(12).reshape(3, 4)\n" + code, env)
        r = env["a"]
    else:
        r = eval(code, env)
    rs = r if isinstance(r, list) else [r]
    return [(x.shape, str(x.dtype).split(".")[-1], np.array(x).tolist()) for x in rs]


@pytest.mark.parametrize("code", MLX_EXPRESSIONS + MLX_ASSIGNMENTS)
def test_same_as_mlx(code):
    mlx = pytest.importorskip("mlx.core")
    assign = code in MLX_ASSIGNMENTS
    assert _result(mx, code, assign) == _result(mlx, code, assign)


def test_cache_style_updates_write_in_place_and_keep_held_values(device):
    # mlx-lm's KVCache: `keys[..., prev:offset, :] = k` on a preallocated buffer. When nothing
    # else holds the buffer the update writes into it (peak memory stays near one buffer); a
    # view the user still holds keeps its values.
    rng = np.random.default_rng(5)
    buf = mx.zeros((1, 4, 2048, 128), mx.float32)  # 4 MiB
    mx.eval(buf)
    want = np.zeros(buf.shape, np.float32)
    held = buf[:, :1]
    mx.eval(held)
    for t in range(3):  # the first update copies (held shares the buffer); later ones do not
        new = rng.standard_normal((1, 4, 1, 128)).astype(np.float32)
        want[..., t : t + 1, :] = new
        buf[..., t : t + 1, :] = mx.array(new)
        mx.eval(buf)
    mx.reset_peak_memory()
    before = mx.get_active_memory()
    for t in range(3, 40):
        new = rng.standard_normal((1, 4, 1, 128)).astype(np.float32)
        want[..., t : t + 1, :] = new
        buf[..., t : t + 1, :] = mx.array(new)
        view = buf[..., : t + 1, :]
        mx.eval(view)
        np.testing.assert_array_equal(np.array(view), want[..., : t + 1, :])
        del view
    assert mx.get_peak_memory() - before < buf.nbytes // 2
    np.testing.assert_array_equal(np.array(buf), want)
    np.testing.assert_array_equal(np.array(held), np.zeros((1, 1, 2048, 128), np.float32))
    # Strided and broadcast updates, in place and not (a held base keeps its values).
    base = mx.array(rng.standard_normal((4, 6)).astype(np.float32))
    mx.eval(base)
    b = np.array(base)
    base[1::2, ::3] = mx.array([[7.0, 8.0]])
    b[1::2, ::3] = [[7.0, 8.0]]
    np.testing.assert_array_equal(np.array(base), b)
    keep = mx.array(b)
    alias = keep
    other = keep[:]  # a second array on the same buffer: no donation
    keep[0] = 1.0
    b2 = b.copy()
    b2[0] = 1.0
    np.testing.assert_array_equal(np.array(alias), b2)  # the same Python object, as in MLX
    np.testing.assert_array_equal(np.array(other), b)


# ---------------------------------------------------------------------------------------
# The GPU's gather and scatter kernels: every dtype they take, index dtypes, duplicates
# ---------------------------------------------------------------------------------------

GPU_DTYPES = ["float32", "float16", "bfloat16", "int8", "uint8", "int16", "int32", "uint32",
              "int64", "bool_"]  # fmt: skip


def typed(shape, name, rng):
    """Values in (-50, 50) converted to `name` by kiln, and their numpy twin."""
    a = mx.array(rng.uniform(-50, 50, size=shape).astype(np.float32)).astype(dt(name))
    return a, to_np(a)


@pytest.mark.parametrize("name", GPU_DTYPES)
def test_concatenate_and_slice_update_of_views(name, rng, device):
    a, x = typed((5, 3, 4), name, rng)
    b, y = typed((5, 2, 4), name, rng)
    same(mx.concatenate([a, b.transpose(0, 1, 2)[:, ::-1]], axis=1),
         np.concatenate([x, y[:, ::-1]], axis=1))
    same(mx.concatenate([a.T, a.T[::2]], axis=0), np.concatenate([x.T, x.T[::2]], axis=0))
    c = a + mx.zeros_like(a) if name != "bool_" else a | False
    c[1:4, 2:0:-1, ::3] = b[1:4, ::-1, ::3]
    want = x.copy()
    want[1:4, 2:0:-1, ::3] = y[1:4, ::-1, ::3]
    same(c, want)


@pytest.mark.parametrize("name", GPU_DTYPES)
@pytest.mark.parametrize("index_dtype", ["int32", "uint8", "int64", "uint64"])
def test_gather_index_dtypes_and_embedding(name, index_dtype, rng, device):
    a, x = typed((7, 6, 5), name, rng)
    raw = rng.integers(0, 7, size=(4, 3))
    idx = mx.array(raw).astype(dt(index_dtype))
    same(mx.take(a, idx, axis=0), np.take(x, raw, axis=0))
    same(mx.take(a, idx % 5, axis=2), np.take(x, raw % 5, axis=2))
    same(a[idx % 5, :, idx % 5], x[raw % 5, :, raw % 5])
    lines = mx.broadcast_to((idx % 5)[:1, :1, None], (1, 6, 5))
    same(mx.take_along_axis(a, lines, 0),
         np.take_along_axis(x, np.broadcast_to((raw % 5)[:1, :1, None], (1, 6, 5)), 0))
    neg = [-1, -7, 3, -2]  # negative indices count from the end
    same(a[mx.array(neg)], x[neg])


def round_like(values, name):
    """float64 values rounded to `name` (bfloat16: to nearest even, through float32)."""
    if name == "bfloat16":
        u = np.asarray(values, np.float32).view(np.uint32).astype(np.uint64)
        r = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)
        return np.where(np.isnan(values), np.float32(np.nan), r)
    return np.asarray(values).astype(NP[name])


@pytest.mark.parametrize("name", GPU_DTYPES)
@pytest.mark.parametrize("mode", ["add", "multiply", "maximum", "minimum", "set"])
def test_scatter_reductions_with_duplicates(name, mode, rng, device):
    if name == "bool_" and mode in ("add", "multiply"):
        pytest.skip("bool takes no add / multiply updates")
    a, x = typed((6, 4), name, rng)
    u, un = typed((5, 4), name, rng)
    rows = [0, 3, 3, 5, -1] if mode != "set" else [0, 3, 2, 5, 1]  # -1 is row 5: duplicates
    if mode == "set":
        got = a + 0 if name != "bool_" else a | False
        got[mx.array(rows)] = u
    else:
        got = getattr(a.at[mx.array(rows)], mode)(u)
    # Updates one at a time in index order, each rounded to the dtype (integers wrap).
    want = x.copy()
    ufunc = {"add": np.add, "multiply": np.multiply, "maximum": np.maximum,
             "minimum": np.minimum, "set": lambda old, new: new}[mode]
    with np.errstate(over="ignore"):
        for i, r in enumerate(rows):
            want[r] = round_like(ufunc(want[r], un[i]), name)
    if is_float(name):
        # On the GPU duplicates combine in any order (atomics): an intermediate rounding
        # (the GPU tests' bound, against the CPU's values of up to 50).
        tol = looser(device, RTOL[name], 4 * {"float32": 1e-5, "float16": 2e-3, "bfloat16": 2e-2}[name])
        assert_matches(got, want, name, rtol=tol, atol=looser(device, None, tol * 50))
    else:
        same(got, want)


def test_scatter_add_of_an_embedding_gradient(rng, device):
    # The embedding backward: many rows, few distinct indices, float32 atomics on the GPU.
    w = rng.uniform(-3, 3, size=(50, 32)).astype(np.float32)
    ids = rng.integers(0, 50, size=(8, 64))
    grad = mx.grad(lambda w: (w[mx.array(ids)] * w[mx.array(ids)]).sum())(mx.array(w))
    counts = np.bincount(ids.ravel(), minlength=50).astype(np.float64)
    np.testing.assert_allclose(np.array(grad), 2 * w * counts[:, None], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["float32", "bfloat16", "int8", "int64"])
def test_plain_scatter_keeps_the_last_duplicate(name, device):
    rows = [4, 1, 4, 1, 1, 0, 4]
    u = mx.array(np.arange(21).reshape(7, 3).astype(np.float32)).astype(dt(name))
    y = mx.zeros((5, 3), dtype=dt(name)) + 0
    y[mx.array(rows)] = u
    want = np.zeros((5, 3))
    for i, r in enumerate(rows):
        want[r] = np.arange(21).reshape(7, 3)[i]
    same(y, want.astype(NP[name]))


@pytest.mark.parametrize("name", ["float32", "bfloat16", "int64", "bool_", "uint8"])
def test_masked_scatter_shapes(name, rng, device):
    a = mx.array(rng.integers(0, 9, size=(5, 3, 4))).astype(dt(name))
    x = to_np(a)
    for mask, vshape in [(rng.integers(0, 2, size=(5,)).astype(bool), (6, 3, 4)),
                         (rng.integers(0, 2, size=(5, 3, 4)).astype(bool), (70,)),
                         (np.zeros((5, 3), dtype=bool), (1, 4))]:
        v = mx.array(rng.integers(10, 20, size=vshape)).astype(dt(name))
        y = a[...]
        y[mx.array(mask)] = v
        # The values are taken in order, as many as the mask selects.
        want = x.copy()
        n = int(mask.sum()) * (x[mask].size // max(1, int(mask.sum())))
        if mask.any():
            want[mask] = to_np(v).reshape(-1)[:n].reshape(x[mask].shape)
        same(y, want)
    y = a[...]
    with pytest.raises(RuntimeError, match="enough"):
        y[mx.array(np.ones((5,), dtype=bool))] = mx.ones((2, 3, 4), dtype=dt(name))
        mx.eval(y)
