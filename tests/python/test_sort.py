"""sort, argsort, partition, argpartition, topk and searchsorted against numpy: every dtype, axes (the
default -1, None flattens, negatives), 0-d/empty/view inputs, NaN (last, as numpy) and
+-inf, stability, the partition property, argument errors, and MLX itself where
installed."""

import kiln.core as mx
import numpy as np
import pytest
from conftest import ALL, FLOATS, assert_matches, dt, make, to_np, view_variants
from mlx_parity import assert_same_as_mlx

# (shape, axis); "default" means the argument is left out (MLX's -1).
SORT_AXES = [
    ((5,), "default"), ((5,), 0), ((5,), None), ((3, 4), "default"), ((3, 4), 0), ((3, 4), -2),
    ((3, 4), None), ((2, 3, 4), 1), ((2, 3, 4), -1), ((2, 3, 4), None), ((), None), ((0,), "default"),
    ((2, 0, 3), 1), ((2, 0, 3), 2), ((4, 9), 1),
]  # fmt: skip


def call(f, a, axis, *args):
    return f(a, *args) if axis == "default" else f(a, *args, axis=axis)


def np_axis(x, axis):
    """numpy's input and axis for kiln's (None flattens, the default is -1)."""
    if axis is None:
        return x.reshape(-1), 0
    return x, -1 if axis == "default" else axis


def sort_inputs(name, shape, rng):
    # Few distinct values: ties exercise stability; floats add NaN and +-inf.
    yield from view_variants(name, shape, rng, low=-3, high=3, special=True)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("shape,axis", SORT_AXES, ids=str)
def test_sort_argsort(name, shape, axis, rng, device):
    for kind, a, x in sort_inputs(name, shape, rng):
        y, ax = np_axis(x, axis)
        out = call(mx.sort, a, axis)
        assert out.dtype == a.dtype, kind
        assert_matches(out, np.sort(y, axis=ax, kind="stable"))
        idx = call(mx.argsort, a, axis)
        assert idx.dtype == mx.uint32
        # Stable: equal elements (and NaNs) keep their order, so indices match exactly.
        assert_matches(idx, np.argsort(y, axis=ax, kind="stable"), "uint32")


def lines(x, axis):
    """The array as rows along `axis` (one row per line)."""
    n = x.shape[axis]
    return np.moveaxis(x, axis, -1).reshape(-1, n)


def nan_le(a, b):
    """a <= b in the sort order (NaN last)."""
    return np.isnan(b) | (~np.isnan(a) & (a <= b))


def assert_partitioned(out, x, kth, axis):
    """`out` is a rearrangement of `x` with the kth element in place, nothing greater before
    it and nothing smaller after it (along `axis`)."""
    assert out.shape == x.shape
    if out.size == 0:
        return
    for o, row in zip(lines(out.astype(np.float64), axis), lines(x.astype(np.float64), axis)):
        ref = np.sort(row)
        np.testing.assert_array_equal(np.sort(o), ref)
        np.testing.assert_array_equal(o[kth], ref[kth])
        assert nan_le(o[:kth], o[kth]).all() and nan_le(o[kth], o[kth + 1 :]).all(), o


PARTITION_CASES = [
    ((5,), "default", 0), ((5,), "default", 2), ((5,), "default", 4), ((5,), "default", -1),
    ((5,), "default", -5), ((3, 4), 0, 1), ((3, 4), -1, 3), ((3, 4), None, 7), ((2, 3, 4), 1, -2),
    ((2, 3, 4), None, 0), ((), None, 0), ((2, 0, 3), 2, 1), ((9,), 0, 4), ((4, 9), 1, 8),
]  # fmt: skip


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("shape,axis,kth", PARTITION_CASES, ids=str)
def test_partition(name, shape, axis, kth, rng, device):
    for kind, a, x in sort_inputs(name, shape, rng):
        y, ax = np_axis(x, axis)
        k = kth % y.shape[ax] if y.shape[ax] else kth
        out = call(mx.partition, a, axis, kth)
        assert out.dtype == a.dtype, kind
        assert_partitioned(to_np(out), y, k, ax)
        idx = call(mx.argpartition, a, axis, kth)
        assert idx.dtype == mx.uint32
        taken = np.take_along_axis(y, to_np(idx).astype(np.int64), axis=ax)
        assert_partitioned(taken, y, k, ax)


TOPK_CASES = [
    ((5,), "default", 1), ((5,), "default", 3), ((5,), "default", 5), ((5,), "default", 0),
    ((3, 4), 0, 2), ((3, 4), -1, 4), ((3, 4), None, 5), ((2, 3, 4), 1, 2), ((), None, 1),
    ((), None, 0), ((2, 0, 3), 2, 1), ((2, 0, 3), 1, 0), ((0,), "default", 0), ((4, 9), 1, 6),
]  # fmt: skip


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("shape,axis,k", TOPK_CASES, ids=str)
def test_topk(name, shape, axis, k, rng):
    for kind, a, x in sort_inputs(name, shape, rng):
        y, ax = np_axis(x, axis)
        out = call(mx.topk, a, axis, k)
        assert out.dtype == a.dtype, kind
        n = y.shape[ax]
        # The k largest, ascending (MLX leaves the order open; kiln sorts them).
        expected = np.take(np.sort(y, axis=ax, kind="stable"), range(n - k, n), axis=ax)
        assert_matches(out, expected)


SEARCH_VALUES = [(), (4,), (3, 4), (0,), (2, 0, 3)]


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("n", [0, 1, 6])
@pytest.mark.parametrize("vshape", SEARCH_VALUES, ids=str)
@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted(name, n, vshape, side, rng, device):
    s, seq = make(name, (n,), rng, low=-3, high=3, special=True)
    seq_sorted = np.sort(seq)  # NaN last, as kiln orders it
    s = mx.sort(s)
    for kind, v, vals in view_variants(name, vshape, rng, low=-4, high=4, special=True):
        out = mx.searchsorted(s, v, side=side)
        assert out.dtype == mx.uint32 and out.shape == vshape, kind
        assert_matches(out, np.searchsorted(seq_sorted, vals, side=side), "uint32")
    # A negative-stride sequence: the descending buffer read backwards.
    backwards = mx.array(np.ascontiguousarray(seq_sorted[::-1]), dtype=dt(name))[::-1]
    v, vals = make(name, (5,), rng, low=-4, high=4)
    assert_matches(
        mx.searchsorted(backwards, v, side=side),
        np.searchsorted(seq_sorted, vals, side=side),
        "uint32",
    )


def test_searchsorted_promotion_and_values():
    seq = mx.array([1, 2, 3], dtype=mx.uint8)
    # Compared in the promoted dtype: -1 and 300 stay themselves.
    assert mx.searchsorted(seq, mx.array([-1, 300])).tolist() == [0, 3]
    assert mx.searchsorted(mx.array([1, 2, 3]), mx.array([2.5])).tolist() == [2]
    f = mx.array([-0.0, 0.0])
    assert mx.searchsorted(f, mx.array([0.0, -0.0])).tolist() == [0, 0]  # -0.0 and 0.0 tie
    assert mx.searchsorted(f, mx.array([0.0, -0.0]), side="right").tolist() == [2, 2]
    nan = mx.array([1.0, 2.0, np.nan, np.nan])
    assert mx.searchsorted(nan, mx.array([np.nan, np.inf])).tolist() == [2, 2]
    assert mx.searchsorted(nan, mx.array([np.nan]), "right").tolist() == [4]
    assert mx.searchsorted(mx.array([1.0, 3.0]), mx.array(2.0)).shape == ()


@pytest.mark.parametrize("name", FLOATS)
def test_special_values(name, device):
    nan, inf = np.nan, np.inf
    a = mx.array([3.0, nan, 1.0, -inf, nan, inf, -0.0, 0.0], dtype=dt(name))
    s = to_np(mx.sort(a))
    assert s[:6].tolist() == [-inf, 0.0, 0.0, 1.0, 3.0, inf] and np.isnan(s[6:]).all()
    assert np.signbit(s[1]) and not np.signbit(s[2])  # -0.0 and 0.0 tie: input order kept
    assert mx.argsort(a).tolist() == [3, 6, 7, 2, 0, 5, 1, 4]
    top = to_np(mx.topk(a, 3))
    assert top[0] == inf and np.isnan(top[1:]).all()  # NaN counts as the largest
    p = to_np(mx.partition(a, 5))
    assert p[5] == inf and np.isnan(p[6:]).all()


def test_stability_and_shapes(device):
    x = mx.array([1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0])
    assert mx.argsort(x).tolist() == [4, 5, 6, 7, 11, 12, 13, 0, 1, 2, 3, 8, 9, 10]
    m = mx.array([[3, 1], [2, 0]])
    assert mx.sort(m).tolist() == [[1, 3], [0, 2]]
    assert mx.sort(m, axis=0).tolist() == [[2, 0], [3, 1]]
    assert mx.sort(m, axis=None).tolist() == [0, 1, 2, 3]
    assert mx.argsort(m, axis=None).tolist() == [3, 1, 2, 0]
    assert mx.argsort(m.T).tolist() == [[1, 0], [1, 0]]
    assert mx.sort(mx.array(3), axis=None).shape == (1,)
    assert mx.topk(mx.array(3), 0, axis=None).shape == (0,)
    assert mx.topk(m, 1, axis=0).tolist() == [[3, 1]]
    assert mx.topk(mx.array([5, 3, 1, 4, 2, 9, 7, 8]), 3).tolist() == [7, 8, 9]
    assert mx.sort(mx.broadcast_to(mx.array([[2], [1]]), (2, 3)), axis=0).tolist() == [
        [1] * 3,
        [2] * 3,
    ]
    b = mx.array([True, False, True, False])
    assert mx.sort(b).tolist() == [False, False, True, True]
    assert mx.argsort(b).tolist() == [1, 3, 0, 2]


# Rows the GPU sorts in shared memory (up to 2048) and in global memory, along the last
# axis and across others; few distinct values, so ties test stability.
GPU_SORT_SHAPES = [((7, 300), 1), ((300, 5), 0), ((3, 2049), -1), ((2, 5000), 1), ((4, 1), 1),
                   ((6, 7, 8), 1)]  # fmt: skip


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16", "int32", "uint8", "int64",
                                  "bool_"])
@pytest.mark.parametrize("shape,axis", GPU_SORT_SHAPES, ids=str)
def test_sort_row_lengths(name, shape, axis, rng, device):
    a = mx.array(rng.integers(-5, 6, size=shape).astype(np.float32)).astype(dt(name))
    x = to_np(a)
    assert_matches(mx.sort(a, axis=axis), np.sort(x, axis=axis, kind="stable"))
    assert_matches(mx.argsort(a, axis=axis), np.argsort(x, axis=axis, kind="stable"), "uint32")
    k = shape[axis] // 2
    assert_partitioned(to_np(mx.partition(a, k, axis=axis)), x, k, axis % len(shape))


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16", "int32", "uint8", "int64"])
@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted_longer_sequences(name, side, rng, device):
    seq = mx.sort(mx.array(rng.integers(0, 20, size=(50,)).astype(np.float32)).astype(dt(name)))
    vals = mx.array(rng.integers(-2, 23, size=(7, 9)).astype(np.float32)).astype(dt(name))
    assert_matches(mx.searchsorted(seq, vals, side=side),
                   np.searchsorted(to_np(seq), to_np(vals), side=side), "uint32")
    if name in FLOATS:
        s2 = [-np.inf, -0.0, 0.0, 1.0, 1.0, np.inf, np.nan, np.nan]
        v2 = [np.nan, 0.0, -0.0, 1.0, np.inf, -np.inf, 5.0]
        got = mx.searchsorted(mx.array(s2).astype(dt(name)), mx.array(v2).astype(dt(name)),
                              side=side)
        assert_matches(got, np.searchsorted(np.array(s2), np.array(v2), side=side), "uint32")


def test_large_integers_keep_their_bits():
    big = [2**63 - 1, -(2**63), 2**53 + 1, 2**53]
    assert mx.sort(mx.array(big, dtype=mx.int64)).tolist() == sorted(big)
    ubig = [2**64 - 1, 0, 2**63, 2**53 + 1]
    assert mx.sort(mx.array(ubig, dtype=mx.uint64)).tolist() == sorted(ubig)


ERRORS = [
    (lambda: mx.sort(mx.array(3)), IndexError, r"\[sort\] Axis -1 is out of bounds"),
    (lambda: mx.argsort(mx.array(3), axis=0), IndexError, r"\[argsort\]"),
    (lambda: mx.sort(mx.arange(3), axis=1), IndexError, r"\[sort\]"),
    (lambda: mx.sort(mx.arange(3), axis=-2), IndexError, r"\[sort\]"),
    (lambda: mx.sort(mx.arange(3), axis=[0]), TypeError, None),
    (lambda: mx.partition(mx.arange(5), 5), ValueError, r"\[partition\] Received invalid kth 5"),
    (lambda: mx.partition(mx.arange(5), -6), ValueError, r"\[partition\]"),
    (lambda: mx.argpartition(mx.array([]), 0), ValueError, r"\[argpartition\]"),
    (lambda: mx.partition(mx.zeros((2, 0)), 0), ValueError, r"\[partition\]"),
    (lambda: mx.partition(mx.array(3), 0), IndexError, r"\[partition\]"),
    (lambda: mx.partition(mx.arange(5), 2.0), TypeError, None),
    (lambda: mx.topk(mx.arange(5), 6), ValueError, r"\[topk\] Received invalid k=6"),
    (lambda: mx.topk(mx.arange(5), -1), ValueError, r"\[topk\]"),
    (lambda: mx.topk(mx.arange(5), 2, axis=1), IndexError, r"\[topk\]"),
    (lambda: mx.topk(mx.array(3), 1), IndexError, r"\[topk\]"),
    (lambda: mx.topk(mx.zeros((4, 50)), 7, axis=0), ValueError, r"\[topk\]"),
    (
        lambda: mx.searchsorted(mx.zeros((2, 2)), mx.array([1.0])),
        ValueError,
        r"must be 1-D but has 2",
    ),
    (lambda: mx.searchsorted(mx.array(1.0), mx.array([1.0])), ValueError, r"\[searchsorted\]"),
    (
        lambda: mx.searchsorted(mx.array([1.0]), mx.array([1.0]), side="middle"),
        ValueError,
        r"Invalid side",
    ),
    (lambda: mx.searchsorted(mx.array([1.0]), mx.array([1.0]), side=None), TypeError, None),
]


@pytest.mark.parametrize("i", range(len(ERRORS)))
def test_errors(i):
    f, exc, match = ERRORS[i]
    with pytest.raises(exc, match=match):
        f()


def parity_cases():
    for d in [
        "bool_",
        "uint8",
        "int8",
        "int32",
        "uint64",
        "float16",
        "bfloat16",
        "float32",
        "float64",
    ]:
        for a in [
            f"mx.array([[3, 0, 1, 3], [2, 5, 1, 1]], dtype=mx.{d})",
            f"mx.arange(24).reshape(2, 3, 4).astype(mx.{d})[:, ::-1, ::2]",
            f"mx.array([], dtype=mx.{d})",
            f"mx.zeros((2, 0), dtype=mx.{d})",
            f"mx.array(1, dtype=mx.{d})",
        ]:
            for f in ["sort", "argsort"]:
                for kw in ["", ", axis=0", ", axis=None", ", axis=-1", ", axis=2"]:
                    yield f"mx.{f}({a}{kw})"
            # Partitions and top-k are compared sorted (their order is open).
            for kw in ["1", "-2", "0, axis=None", "5", "0, axis=0"]:
                yield f"mx.sort(mx.partition({a}, {kw}))"
            for kw in ["1", "0", "2, axis=None", "5", "1, axis=0"]:
                yield f"mx.sort(mx.topk({a}, {kw}))"
        seq = f"mx.array([0, 1, 1, 3, 5], dtype=mx.{d})"
        for vals in [
            f"mx.array([[3, 0, 1], [2, 5, 1]], dtype=mx.{d})",
            "mx.array([-1, 300, 2, 4])",
            "mx.array(2.5)",
        ]:
            yield f"mx.searchsorted({seq}, {vals})"
            yield f"mx.searchsorted({seq}[::-1][::-1], {vals}, side='right')"
    yield "mx.argsort(mx.array([3., nan, 1., -inf, nan, inf, -0.0, 0.0]))"
    yield "mx.sort(mx.array([3., nan, 1., -inf, nan, inf, -0.0, 0.0], dtype=mx.float16))"


PARITY = list(parity_cases())


@pytest.mark.parametrize("chunk", range(8))
def test_same_as_mlx(chunk):
    assert_same_as_mlx(PARITY[chunk::8])
