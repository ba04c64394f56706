"""cumsum, cumprod, cummax, cummin and logcumsumexp against numpy's accumulate: every
dtype, axis (None flattens), reverse, inclusive/exclusive, 0-d, empty and view inputs,
NaN/inf, wrapping integers, MLX's dtype rules and argument errors."""

import itertools

import kiln.core as mx
import numpy as np
import pytest
from conftest import (
    ALL,
    FLOATS,
    INTS,
    NP,
    assert_matches,
    dt,
    is_float,
    looser,
    make,
    name_of,
    to_np,
    view_variants,
)
from mlx_parity import assert_same_as_mlx

SCAN_AXES = [
    ((), None), ((5,), None), ((5,), 0), ((5,), -1), ((3, 4), None), ((3, 4), 0), ((3, 4), 1),
    ((3, 4), -2), ((2, 3, 4), 1), ((2, 3, 4), -1), ((0,), None), ((0,), 0), ((2, 0, 3), 1),
    ((2, 0, 3), 2),
]  # fmt: skip

# Accumulated rounding: errors are compared to the running sum of magnitudes.
SCAN_TOL = {"float16": 4e-3, "bfloat16": 3e-2, "float32": 2e-6, "float64": 1e-12}

UFUNC = {
    "cumsum": np.add,
    "cumprod": np.multiply,
    "cummax": np.maximum,
    "cummin": np.minimum,
    "logcumsumexp": np.logaddexp,
}


def result_dtype(fname, name):
    if fname == "cumsum" and name == "bool_":
        return "int32"  # MLX counts bools in int32; every other scan keeps the dtype
    if fname == "logcumsumexp" and not is_float(name):
        return "float32"
    return name


def identity(fname, want):
    """The first output of an exclusive scan."""
    if fname == "cumsum":
        return 0
    if fname == "cumprod":
        return 1
    if fname == "logcumsumexp":
        return -np.inf
    low = fname == "cummax"
    if want == "bool_":
        return not low
    if want in INTS:
        info = np.iinfo(NP[want])
        return info.min if low else info.max
    return -np.inf if low else np.inf


def scan_reference(fname, x, axis, reverse, inclusive, want):
    """numpy's accumulate in the result dtype (integers wrap as kiln's do), floats in
    float64."""
    if axis is None:
        x, axis = x.reshape(-1), 0
    if want in INTS:
        x = x.astype(NP[want])
    elif want != "bool_":
        x = x.astype(np.float64)
    if reverse:
        x = np.flip(x, axis)
    with np.errstate(all="ignore"):
        out = UFUNC[fname].accumulate(x, axis=axis) if x.size else x.copy()
    if not inclusive and out.size:
        first = np.full_like(np.take(out, [0], axis=axis), identity(fname, want))
        out = np.concatenate([first, np.take(out, range(out.shape[axis] - 1), axis=axis)], axis)
    return np.flip(out, axis) if reverse else out


def inputs(fname, name, shape, rng):
    """Views of random inputs; products get values near 1 (floats) or in [-2, 2] (ints)."""
    if fname == "cumprod" and is_float(name):
        for kind, a, x in view_variants(name, shape, rng):
            y = 1 + 0.1 * rng.standard_normal(x.shape)
            b = mx.array(y, dtype=dt(name))
            yield kind, b, to_np(b)
        return
    options = {"low": -2, "high": 2} if fname == "cumprod" else {}
    yield from view_variants(name, shape, rng, special=fname in ("cummax", "cummin"), **options)


@pytest.mark.parametrize("fname", list(UFUNC))
@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("shape,axis", SCAN_AXES, ids=str)
def test_scans(fname, name, shape, axis, rng, device):
    want = result_dtype(fname, name)
    for (kind, a, x), (reverse, inclusive) in itertools.product(
        inputs(fname, name, shape, rng),
        [(False, True), (True, True), (False, False), (True, False)],
    ):
        out = getattr(mx, fname)(a, axis=axis, reverse=reverse, inclusive=inclusive)
        assert name_of(out.dtype) == want, (kind, reverse, inclusive)
        expected = scan_reference(fname, x, axis, reverse, inclusive, want)
        if want in FLOATS:
            scale = 1 + np.abs(np.nan_to_num(x.astype(np.float64), posinf=0, neginf=0)).sum()
            tol = looser(device, SCAN_TOL[want], SCAN_TOL[want] + GPU_TOL.get(want, 0) * 40)
            assert_matches(out, expected, want, rtol=tol, atol=tol * scale)
        else:
            assert_matches(out, expected, want)
        method = getattr(a, fname)(axis, reverse=reverse, inclusive=inclusive)
        assert method.dtype == out.dtype and method.shape == out.shape
        np.testing.assert_array_equal(to_np(method), to_np(out))


@pytest.mark.parametrize("fname", ["cumsum", "cumprod"])
@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("to", ["bool_", "int8", "uint16", "int64", "float16", "float32"])
def test_dtype_argument(fname, name, to, rng):
    """`dtype=` converts first; then the dtype rule applies (a bool cumsum gives int32)."""
    a, _ = make(name, (3, 4), rng, low=0, high=3)
    out = getattr(mx, fname)(a, axis=1, dtype=dt(to))
    want = result_dtype(fname, to)
    assert name_of(out.dtype) == want
    converted = to_np(a.astype(dt(to)))
    expected = scan_reference(fname, converted, 1, False, True, want)
    assert_matches(out, expected, want, rtol=SCAN_TOL.get(want), atol=SCAN_TOL.get(want))


def test_integers_wrap():
    assert mx.cumsum(mx.array([100, 100, 100], dtype=mx.int8)).tolist() == [100, -56, 44]
    assert mx.cumsum(mx.array([250, 10], dtype=mx.uint8)).tolist() == [250, 4]
    assert mx.cumsum(mx.array([2**31 - 1, 1])).tolist() == [2**31 - 1, -(2**31)]
    assert mx.cumprod(mx.array([100, 100, 100], dtype=mx.int16)).tolist() == [100, 10000, 16960]
    assert mx.cumsum(mx.array([True] * 300)).tolist()[-1] == 300  # int32, no bool overflow
    assert mx.cumsum(mx.array([100, 100], dtype=mx.int8), dtype=mx.int32).tolist() == [100, 200]


def test_bool_scans_are_logical():
    b = mx.array([True, False, True])
    assert mx.cumprod(b).tolist() == [True, False, False]
    assert mx.cummax(b).tolist() == [True, True, True]
    assert mx.cummin(b).tolist() == [True, False, False]
    assert mx.cummax(b, inclusive=False).tolist() == [False, True, True]
    assert mx.cummin(b, inclusive=False).tolist() == [True, True, False]
    assert mx.cumprod(b, inclusive=False).tolist() == [True, True, False]


def test_exclusive_starts_at_the_identity():
    x = mx.array([[1, 2], [3, 4]])
    assert mx.cumsum(x, axis=1, inclusive=False).tolist() == [[0, 1], [0, 3]]
    assert mx.cumsum(x, axis=1, inclusive=False, reverse=True).tolist() == [[2, 0], [4, 0]]
    assert mx.cumprod(x, axis=1, inclusive=False).tolist() == [[1, 1], [1, 3]]
    assert mx.cummax(x, axis=1, inclusive=False).tolist() == [[-(2**31), 1], [-(2**31), 3]]
    assert mx.cummin(x, axis=1, inclusive=False).tolist() == [[2**31 - 1, 1], [2**31 - 1, 3]]
    assert mx.cummax(x.astype(mx.uint8), axis=1, inclusive=False).tolist() == [[0, 1], [0, 3]]
    assert mx.cummax(x.astype(mx.float16), axis=1, inclusive=False).tolist() == [
        [-np.inf, 1],
        [-np.inf, 3],
    ]
    assert mx.logcumsumexp(mx.array([1.0, 2.0]), inclusive=False).tolist()[0] == -np.inf


@pytest.mark.parametrize("name", FLOATS)
def test_special_values(name, device):
    def run(fname, values, **kw):
        return to_np(getattr(mx, fname)(mx.array(values, dtype=dt(name)), **kw)).tolist()

    nan, inf = np.nan, np.inf
    # NaN propagates through max/min from where it appears (numpy; MLX's half floats differ).
    assert np.isnan(run("cummax", [1.0, nan, 3.0])[1:]).all()
    assert np.isnan(run("cummin", [1.0, nan, 3.0])[1:]).all()
    back = run("cummax", [1.0, nan, 3.0], reverse=True)
    assert np.isnan(back[:2]).all() and back[2] == 3.0
    out = run("cumsum", [1.0, inf, -inf, 0.5])
    assert out[:2] == [1.0, inf] and np.isnan(out[2:]).all()
    assert run("logcumsumexp", [-inf, -inf, 2.0, inf, 1.0]) == [-inf, -inf, 2.0, inf, inf]
    assert run("logcumsumexp", [inf, -inf]) == [inf, inf]
    assert np.isnan(run("logcumsumexp", [1.0, nan, 2.0])[1:]).all()
    big = 60000.0 if name == "float16" else 1e30
    assert run("logcumsumexp", [big, big])[1] == pytest.approx(big + np.log(2), rel=1e-2)
    # The first element passes through as is (a -0.0 stays -0.0).
    assert np.signbit(run("cumsum", [-0.0])[0])


# The GPU's bounds against the CPU, on top of the CPU's against numpy.
GPU_TOL = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 2e-2}


@pytest.mark.parametrize("fname", list(UFUNC))
@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16", "int32", "uint8", "int64", "bool_"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scans_of_a_long_middle_axis(fname, name, axis, rng, device):
    """(5, 300, 3): rows of several GPU tiles along axis 1, and scans across the others."""
    if fname == "logcumsumexp" and not is_float(name):
        pytest.skip("logcumsumexp of integers is float32 math: test_scans covers it")
    want_dtype = result_dtype(fname, name)
    if fname == "cumprod":
        a = mx.array(rng.uniform(0.9, 1.1, size=(5, 300, 3)).astype(np.float32)).astype(dt(name))
    else:
        src = rng.uniform(-50, 50, size=(5, 300, 3)).astype(np.float32)
        a = mx.array(src).astype(dt(name)) if name != "uint8" else \
            mx.array(src).astype(mx.int32).astype(mx.uint8)
    x = to_np(a)
    for reverse in (False, True):
        for inclusive in (True, False):
            out = getattr(mx, fname)(a, axis=axis, reverse=reverse, inclusive=inclusive)
            expected = scan_reference(fname, x, axis, reverse, inclusive, want_dtype)
            if want_dtype in FLOATS:
                scale = 1 + np.abs(x.astype(np.float64)).sum(axis=axis, keepdims=True)
                k = 20 if want_dtype == "float32" else 40
                tol = looser(device, SCAN_TOL[want_dtype], SCAN_TOL[want_dtype] + GPU_TOL[want_dtype] * k)
                assert_matches(out, expected, want_dtype, rtol=tol,
                               atol=tol * float(scale.max()))
            else:
                assert_matches(out, expected, want_dtype)


def test_scan_long_rows_nan_and_negative_zero(rng, device):
    x = rng.uniform(-3, 3, size=(2, 5000)).astype(np.float32)
    np.testing.assert_allclose(np.array(mx.cumsum(mx.array(x), axis=1)),
                               np.cumsum(x.astype(np.float64), axis=1), rtol=1e-4, atol=1e-3)
    y = np.array([[-0.0, 1.0, np.nan, 2.0]], np.float32)
    got = np.array(mx.cummax(mx.array(y), axis=1))
    np.testing.assert_array_equal(got, [[0.0, 1.0, np.nan, np.nan]])
    assert np.signbit(np.array(mx.cumsum(mx.array(y[:, :1]), axis=1))[0, 0])


def test_cumulative_aliases():
    x = mx.array([[1, 2], [3, 4]], dtype=mx.int8)
    assert mx.cumulative_sum(x, axis=1, dtype=mx.int32).tolist() == [[1, 3], [3, 7]]
    assert mx.cumulative_prod(x, reverse=True).tolist() == [24, 24, 12, 4]


def test_flattening_and_shapes():
    x = mx.array([[1, 2], [3, 4]])
    assert mx.cumsum(x).tolist() == [1, 3, 6, 10]
    assert mx.cumsum(x)[::-1].tolist() == [10, 6, 3, 1]
    assert mx.cumsum(mx.array(5)).shape == (1,)
    assert mx.cummax(mx.zeros((2, 0)), axis=0).shape == (2, 0)
    assert mx.cumsum(x[::-1], axis=0).tolist() == [[3, 4], [4, 6]]
    assert mx.cumsum(mx.broadcast_to(mx.array([1, 2]), (3, 2)), axis=0).tolist() == [
        [1, 2],
        [2, 4],
        [3, 6],
    ]


ERRORS = [
    (lambda: mx.cumsum(mx.array(5), axis=0), IndexError, r"\[cumsum\] Axis 0 is out of bounds"),
    (lambda: mx.cumprod(mx.zeros((2, 3)), axis=2), IndexError, r"\[cumprod\]"),
    (lambda: mx.cummax(mx.zeros((2, 3)), axis=-3), IndexError, r"\[cummax\]"),
    (lambda: mx.cummin(mx.arange(3), axis=[0]), TypeError, None),
    (lambda: mx.logcumsumexp(mx.arange(3), axis=0.5), TypeError, None),
    (lambda: mx.cummax(mx.arange(3), dtype=mx.int32), TypeError, None),
    (lambda: mx.arange(3).cumsum(dtype=mx.int32), TypeError, None),
    (lambda: mx.arange(3).cumsum(1), IndexError, r"\[cumsum\]"),
]


@pytest.mark.parametrize("i", range(len(ERRORS)))
def test_errors(i):
    f, exc, match = ERRORS[i]
    with pytest.raises(exc, match=match):
        f()


def parity_cases():
    for d in ["bool_", "uint8", "int8", "int32", "uint64", "float16", "float32", "float64"]:
        for a in [
            f"mx.array([[3, 0, 1], [2, 5, 1]], dtype=mx.{d})",
            f"mx.arange(24).reshape(2, 3, 4).astype(mx.{d})[:, ::-1, ::2]",
            f"mx.array([], dtype=mx.{d})",
            f"mx.array(1, dtype=mx.{d})",
        ]:
            for f in UFUNC:
                for kw in ["", ", axis=1", ", axis=0, reverse=True", ", axis=-1, inclusive=False",
                           ", axis=1, reverse=True, inclusive=False", ", axis=2"]:  # fmt: skip
                    yield f"mx.{f}({a}{kw})"
            yield f"mx.cumsum({a}, dtype=mx.int8)"
            yield f"mx.cumsum({a}, dtype=mx.bool_)"
            yield f"mx.cumprod({a}, dtype=mx.bool_)"
    for d in ["float32", "float64"]:  # MLX's half floats turn NaN into 0 in cummax/cummin
        for v in ["[1., nan, 3., -inf]", "[inf, 1., -inf, 2.]", "[-inf, -inf]", "[nan, nan, 1.]"]:
            for f in UFUNC:
                yield f"mx.{f}(mx.array({v}, dtype=mx.{d}))"
                yield f"mx.{f}(mx.array({v}, dtype=mx.{d}), reverse=True, inclusive=False)"


PARITY = list(parity_cases())


@pytest.mark.parametrize("chunk", range(8))
def test_same_as_mlx(chunk):
    assert_same_as_mlx(PARITY[chunk::8])
