"""Shape ops against numpy: flatten, unflatten, swapaxes, moveaxis, broadcast_arrays, stack,
split, pad, repeat, tile, roll. Every op runs over all dtypes and view inputs (transposed,
negative-step slices), 0-d and empty shapes, and its errors raise MLX's exception classes.
"""

import kiln.core as mx
import numpy as np
import pytest
from conftest import ALL, assert_matches, dt, make, view_variants


def same(result, expected):
    """Exact equality (data movement never rounds); NaN equals NaN."""
    assert_matches(result, np.asarray(expected), rtol=0, atol=0)


# A few dtypes are enough where the op only moves bytes of one width; ALL is used where
# dtype handling (promotion, casts, bool) matters.
WIDTHS = ["bool_", "int8", "float16", "bfloat16", "int32", "float64"]


# ---------------------------------------------------------------------------------------
# flatten / unflatten
# ---------------------------------------------------------------------------------------

FLATTEN = [
    ((), 0, -1),
    ((5,), 0, -1),
    ((2, 3, 4), 0, -1),
    ((2, 3, 4), 1, -1),
    ((2, 3, 4), 0, 1),
    ((2, 3, 4), -2, -1),
    ((2, 3, 4), 1, 1),
    ((2, 3, 4), -10, 10),
    ((2, 0, 3), 0, 1),
]


def np_flatten(x, start, end):
    n = x.ndim
    if n == 0:
        return x.reshape(1)
    start, end = (start + n if start < 0 else start), (end + n if end < 0 else end)
    start, end = max(start, 0), min(end, n - 1)
    s = x.shape
    return x.reshape(s[:start] + (int(np.prod(s[start : end + 1])),) + s[end + 1 :])


@pytest.mark.parametrize("shape,start,end", FLATTEN, ids=str)
@pytest.mark.parametrize("name", WIDTHS)
def test_flatten(shape, start, end, name, rng):
    for kind, a, x in view_variants(name, shape, rng, special=True):
        same(mx.flatten(a, start, end), np_flatten(x, start, end))
        same(a.flatten(start_axis=start, end_axis=end), np_flatten(x, start, end))


def test_flatten_errors():
    a = mx.zeros((2, 3, 4))
    for start, end in [(1, 0), (2, 1), (5, 7), (0, -5)]:
        with pytest.raises(ValueError, match=r"\[flatten\]"):
            mx.flatten(a, start, end)
    assert mx.flatten(mx.array(3), 0, 0).shape == (1,)


@pytest.mark.parametrize(
    "shape,axis,new",
    [
        ((2, 12), 1, (3, 4)),
        ((2, 12), -1, (-1, 4)),
        ((2, 12), 0, (2, 1)),
        ((6,), 0, (1, 2, -1)),
        ((2, 0), 1, (0, 3)),
        ((4, 2), 0, (4,)),
    ],
    ids=str,
)
def test_unflatten(shape, axis, new, rng):
    a, x = make("float32", shape, rng)
    want = list(x.shape[: axis % x.ndim]) + list(new) + list(x.shape[axis % x.ndim + 1 :])
    same(mx.unflatten(a, axis, new), x.reshape(want))


def test_unflatten_errors():
    a = mx.zeros((2, 12))
    with pytest.raises(ValueError):
        mx.unflatten(a, 1, (5, -1))
    with pytest.raises(ValueError):
        mx.unflatten(a, 1, (-1, -1))
    with pytest.raises(ValueError):
        mx.unflatten(a, 1, (3, 5))
    with pytest.raises(ValueError):
        mx.unflatten(a, 1, (3, -2))
    with pytest.raises(ValueError):
        mx.unflatten(a, 1, ())
    with pytest.raises(ValueError):
        mx.unflatten(mx.zeros((2, 0)), 1, (-1, 0))
    with pytest.raises(IndexError):
        mx.unflatten(a, 2, (3, 4))
    with pytest.raises(IndexError):
        mx.unflatten(mx.array(1), 0, (1,))


# ---------------------------------------------------------------------------------------
# swapaxes / moveaxis / broadcast_arrays
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", WIDTHS)
def test_swapaxes_moveaxis(name, rng):
    for kind, a, x in view_variants(name, (2, 3, 4), rng):
        for i in range(-3, 3):
            for j in range(-3, 3):
                same(mx.swapaxes(a, i, j), np.swapaxes(x, i, j))
                same(mx.moveaxis(a, i, j), np.moveaxis(x, i, j))
        same(a.swapaxes(0, 2), np.swapaxes(x, 0, 2))
        same(a.moveaxis(0, -1), np.moveaxis(x, 0, -1))


def test_swapaxes_moveaxis_errors():
    a = mx.zeros((2, 3, 4))
    for f in (mx.swapaxes, mx.moveaxis):
        with pytest.raises(IndexError):
            f(a, 0, 3)
        with pytest.raises(IndexError):
            f(a, -4, 0)
        with pytest.raises(IndexError):
            f(mx.array(1), 0, 0)
    assert mx.moveaxis(a, 0, 0).shape == (2, 3, 4)


@pytest.mark.parametrize(
    "shapes",
    [[(2, 1), (3,)], [(), (4,)], [(1, 3), (2, 1), (1, 1, 1)], [(0,), (1,)], [(5,)], []],
    ids=str,
)
def test_broadcast_arrays(shapes, rng):
    pairs = [make(n, s, rng) for n, s in zip(["int8", "float32", "bool_"], shapes)]
    got = mx.broadcast_arrays(*[p[0] for p in pairs])
    want = np.broadcast_arrays(*[p[1] for p in pairs])
    assert len(got) == len(want)
    for g, w in zip(got, want):
        same(g, w)
    with pytest.raises(ValueError):
        mx.broadcast_arrays(mx.zeros((2, 1)), mx.zeros((3,)), mx.zeros((2,)))


# ---------------------------------------------------------------------------------------
# stack / split
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(), (3,), (2, 3), (0, 2)], ids=str)
@pytest.mark.parametrize("name", ALL)
def test_stack(shape, name, rng):
    variants = list(view_variants(name, shape, rng))
    arrays = [v[1] for v in variants] * 2
    expected = [v[2] for v in variants] * 2
    for axis in range(-len(shape) - 1, len(shape) + 1):
        same(mx.stack(arrays, axis=axis), np.stack(expected, axis=axis))
    same(mx.stack(arrays[:1]), np.stack(expected[:1]))


def test_stack_promotes_and_errors():
    out = mx.stack([mx.zeros((2,)), mx.zeros((2,), dtype=mx.int8)])
    assert out.dtype == mx.float32 and out.shape == (2, 2)
    assert mx.stack([mx.array(1), mx.array(2)]).tolist() == [1, 2]
    assert mx.stack([mx.arange(2), mx.arange(2)], axis=None).shape == (2, 2)
    with pytest.raises(ValueError, match="No arrays"):
        mx.stack([])
    with pytest.raises(ValueError, match="same shape"):
        mx.stack([mx.zeros((2,)), mx.zeros((3,))])
    with pytest.raises(IndexError):
        mx.stack([mx.zeros((2,)), mx.zeros((2,))], axis=2)
    with pytest.raises(IndexError):
        mx.stack([mx.zeros((2,)), mx.zeros((2,))], axis=-3)


SPLITS = [
    ((6,), 3, 0),
    ((6,), 1, 0),
    ((6,), [1, 3], 0),
    ((6,), [3, 1], 0),
    ((6,), [-2, 10], 0),
    ((6,), [-10], 0),
    ((6,), [], 0),
    ((2, 6), 2, 1),
    ((2, 6), [2, 2, 5], -1),
    ((4, 3), [1], 0),
    ((0,), 2, 0),
    ((0, 3), [1], 1),
]


@pytest.mark.parametrize("shape,spec,axis", SPLITS, ids=str)
@pytest.mark.parametrize("name", WIDTHS)
def test_split(shape, spec, axis, name, rng):
    for kind, a, x in view_variants(name, shape, rng):
        got = mx.split(a, spec, axis=axis)
        want = np.split(x, spec, axis=axis)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            same(g, w)
        assert [p.shape for p in a.split(spec, axis)] == [w.shape for w in want]
    got = mx.split(mx.arange(6), mx.array([1, 3]))
    assert [p.tolist() for p in got] == [[0], [1, 2], [3, 4, 5]]


def test_split_errors():
    a = mx.arange(6)
    with pytest.raises(ValueError, match="equal size"):
        mx.split(a, 4)
    for n in (0, -1):
        with pytest.raises(ValueError, match="positive"):
            mx.split(a, n)
    with pytest.raises(IndexError):
        mx.split(mx.zeros((2, 6)), 2, axis=2)
    with pytest.raises(IndexError):
        mx.split(mx.array(1), 1)


# ---------------------------------------------------------------------------------------
# pad
# ---------------------------------------------------------------------------------------

PAD_WIDTHS = [
    1,
    (1,),
    (1, 2),
    [(1, 2), (0, 1)],
    [(0, 0), (3, 0)],
    [(2, 2)],
    0,
]


def np_widths(width, ndim):
    if isinstance(width, int):
        return [(width, width)] * ndim
    if all(isinstance(w, int) for w in width):
        return [tuple(width) * (2 // len(width))] * ndim
    return list(width) * (ndim if len(width) == 1 else 1)


@pytest.mark.parametrize("width", PAD_WIDTHS, ids=str)
@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "symmetric"])
@pytest.mark.parametrize("name", WIDTHS)
def test_pad(width, mode, name, rng):
    for kind, a, x in view_variants(name, (3, 4), rng):
        got = mx.pad(a, width, mode=mode)
        want = np.pad(x, np_widths(width, 2), mode=mode)
        same(got, want)


@pytest.mark.parametrize("mode", ["reflect", "symmetric", "edge"])
@pytest.mark.parametrize("dim", [1, 2, 3])
def test_pad_wide_mirrors(mode, dim, rng):
    # Pads wider than the axis mirror repeatedly, as numpy.
    a, x = make("int32", (dim,), rng)
    for lo, hi in [(4, 0), (0, 5), (7, 3)]:
        same(mx.pad(a, [(lo, hi)], mode=mode), np.pad(x, [(lo, hi)], mode=mode))


@pytest.mark.parametrize("name", ALL)
def test_pad_constant_values(name, rng):
    a, x = make(name, (2, 3), rng)
    value = True if name == "bool_" else 2
    same(mx.pad(a, 1, constant_values=value), np.pad(x, 1, constant_values=value))
    v = mx.array(value).astype(dt(name))
    same(mx.pad(a, (0, 2), constant_values=v), np.pad(x, (0, 2), constant_values=value))


def test_pad_edge_cases():
    assert mx.pad(mx.array(1), 1).tolist() == 1
    assert mx.pad(mx.array(1), []).tolist() == 1
    out = mx.pad(mx.arange(3), 1, constant_values=2.5)
    assert out.dtype == mx.int32 and out.tolist() == [2, 0, 1, 2, 2]
    assert mx.pad(mx.zeros((1,), dtype=mx.int8), 1, constant_values=mx.array(2)).dtype == mx.int8
    same(mx.pad(mx.zeros((0, 3)), 1), np.zeros((2, 5)))
    # MLX pads an empty axis with zeros in edge mode (numpy refuses).
    same(mx.pad(mx.zeros((0, 3)), 1, mode="edge"), np.zeros((2, 5)))
    same(mx.pad(mx.arange(3), 1, mode="edge", constant_values=5), [0, 0, 1, 2, 2])


def test_pad_errors():
    a = mx.arange(6).reshape(2, 3)
    with pytest.raises(ValueError, match="number of padding"):
        mx.pad(a, [(1, 2), (0, 1), (1, 1)])
    with pytest.raises(ValueError, match="non-negative"):
        mx.pad(a, -1)
    with pytest.raises(ValueError, match="non-negative"):
        mx.pad(a, [(0, 0), (1, -1)])
    with pytest.raises(ValueError, match="Invalid padding mode"):
        mx.pad(a, 1, mode="wrap")
    with pytest.raises(ValueError, match="empty axis"):
        mx.pad(mx.zeros((0,)), 1, mode="reflect")
    with pytest.raises(ValueError, match="overflow"):
        mx.pad(mx.arange(3).astype(mx.uint8), 1, constant_values=-1)
    with pytest.raises(ValueError):
        mx.pad(a, 1, constant_values=mx.array([1, 2]))
    with pytest.raises(TypeError):
        mx.pad(a, [(1, 2, 3)])
    with pytest.raises(TypeError):
        mx.pad(a, 1.5)


# ---------------------------------------------------------------------------------------
# repeat / tile / roll
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(), (4,), (2, 3), (2, 0)], ids=str)
@pytest.mark.parametrize("name", WIDTHS)
def test_repeat(shape, name, rng):
    for kind, a, x in view_variants(name, shape, rng):
        for reps in (0, 1, 3):
            same(mx.repeat(a, reps), np.repeat(x, reps))
            for axis in range(-len(shape), len(shape)):
                same(mx.repeat(a, reps, axis=axis), np.repeat(x, reps, axis=axis))


def test_repeat_errors():
    a = mx.arange(6).reshape(2, 3)
    with pytest.raises(ValueError, match="negative"):
        mx.repeat(a, -1, axis=1)
    with pytest.raises(IndexError):
        mx.repeat(a, 2, axis=2)
    with pytest.raises(IndexError):
        mx.repeat(mx.array(3), 2, axis=0)


@pytest.mark.parametrize("shape", [(), (3,), (2, 3), (0, 2)], ids=str)
@pytest.mark.parametrize("reps", [2, 0, (2,), (2, 2), (2, 1, 3), ()], ids=str)
@pytest.mark.parametrize("name", WIDTHS)
def test_tile(shape, reps, name, rng):
    for kind, a, x in view_variants(name, shape, rng):
        same(mx.tile(a, reps), np.tile(x, reps))


def test_tile_errors():
    with pytest.raises(ValueError):
        mx.tile(mx.arange(3), -1)


ROLLS = [
    (2, None),
    (-7, None),
    ((1, 2), None),
    (1, 0),
    (-4, -1),
    ((1, 2), (0, 1)),
    (1, (0, 1)),
    ((1, 2), 1),
    (1, (0, 0)),
    ((1, 1), (1, 1)),
    ((1, 2, 3), (0, 1)),
    (2**40 + 1, 1),
    ((), None),
    ((1, 2), ()),
]


def np_roll(x, shift, axis):
    # MLX pairs extra shifts with nothing (numpy would refuse).
    if isinstance(shift, tuple) and isinstance(axis, tuple) and len(shift) > len(axis) > 1:
        shift = shift[: len(axis)]
    if shift == () or axis == ():
        return x
    return np.roll(x, shift, axis)


@pytest.mark.parametrize("shift,axis", ROLLS, ids=str)
@pytest.mark.parametrize("name", WIDTHS)
def test_roll(shift, axis, name, rng):
    for kind, a, x in view_variants(name, (2, 3), rng):
        same(mx.roll(a, shift, axis), np_roll(x, shift, axis))


def test_roll_edge_cases():
    assert mx.roll(mx.array(3), 1).tolist() == 3
    assert mx.roll(mx.zeros((0, 3)), 1, 0).shape == (0, 3)
    a = mx.arange(6).reshape(2, 3)
    with pytest.raises(ValueError, match="per axis"):
        mx.roll(a, (), (0, 1))
    with pytest.raises(ValueError, match="per axis"):
        mx.roll(a, (1,), (0, 1))
    with pytest.raises(IndexError):
        mx.roll(a, 1, 2)
