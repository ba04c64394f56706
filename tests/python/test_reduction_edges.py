"""Edge cases of argmax/argmin, the cumulative ops, logsumexp and mean against numpy (and
MLX's documented behaviour): NaN placement, empty arrays, strided views (transposed,
negative steps, offsets), sizes past the threading threshold, float16 means past 65504."""

import kiln.core as mx
import numpy as np
import pytest

RNG = np.random.default_rng(7)


def kiln_views(a):
    """(name, kiln array, numpy equivalent): contiguous, transposed, negative-step, offset."""
    k = mx.array(a)
    out = [("contiguous", k, a)]
    if a.ndim == 2:
        out.append(("transposed", mx.array(a.T.copy()).T, a))
        out.append(("negative steps", mx.array(a[::-1, ::-1].copy())[::-1, ::-1], a))
        out.append(("offset", mx.array(np.concatenate([a, a]))[a.shape[0]:], a))
    return out


SHAPES = [(5, 7), (3, 40_000), (70_000, 2), (1, 1)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_reductions_with_ties_and_nan(shape, op, device):
    # Few distinct values: many ties, and the first index must win; NaN wins over numbers.
    a = RNG.integers(0, 5, shape).astype(np.float32)
    a.flat[RNG.integers(0, a.size, max(1, a.size // 5000))] = np.nan
    for name, k, n in kiln_views(a):
        for axis in (0, 1):
            got = np.array(getattr(mx, op)(k, axis=axis))
            np.testing.assert_array_equal(got, getattr(np, op)(n, axis=axis), err_msg=name)
        got = np.array(getattr(mx, op)(k))
        assert got == getattr(np, op)(n), name


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.float16, np.bool_])
def test_arg_reductions_other_dtypes(dtype, device):
    a = RNG.integers(0, 3, (4, 50_000)).astype(dtype)
    for axis in (0, 1, None):
        k = mx.array(a)
        np.testing.assert_array_equal(np.array(mx.argmax(k, axis=axis)), np.argmax(a, axis=axis))
        np.testing.assert_array_equal(np.array(mx.argmin(k, axis=axis)), np.argmin(a, axis=axis))


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16", "int32", "uint8", "int64"])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_arg_reductions_along_every_axis(name, axis, device):
    rng = np.random.default_rng(axis)
    if name in ("float32", "float16", "bfloat16"):
        x = rng.uniform(-3, 3, size=(7, 300, 5)).astype(np.float32)
    else:
        x = rng.integers(0, 5, size=(7, 300, 5))  # many ties
    a = mx.array(x).astype(getattr(mx, name))
    xn = np.array(a.astype(mx.float32) if name == "bfloat16" else a)
    for op in ("argmax", "argmin"):
        np.testing.assert_array_equal(np.array(getattr(mx, op)(a, axis=axis)),
                                      getattr(np, op)(xn, axis=axis))


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16", "int32", "uint32", "int64"])
@pytest.mark.parametrize("shape", [(1, 128256), (3, 20001), (64, 16384), (65, 16384), (2, 40000, 3)],
                         ids=str)
def test_arg_reductions_of_long_rows(name, shape, device):
    # Few long rows (a vocabulary's log-probabilities) are split across blocks on the GPU;
    # the chunk boundaries must keep NaN-first and lowest-index ties.
    rng = np.random.default_rng(sum(shape))
    if name in ("float32", "float16", "bfloat16"):
        x = np.round(rng.uniform(-3, 3, size=shape), 1).astype(np.float32)  # many ties
    else:
        x = rng.integers(0, 50, size=shape)
    a = mx.array(x).astype(getattr(mx, name))
    xn = np.array(a.astype(mx.float32) if name == "bfloat16" else a)
    for op in ("argmax", "argmin"):
        np.testing.assert_array_equal(np.array(getattr(mx, op)(a, axis=1)),
                                      getattr(np, op)(xn, axis=1))
    if name in ("float32", "float16", "bfloat16"):
        x[0, shape[1] - 5] = np.nan
        x[0, 2049] = np.nan  # the first NaN, in the second chunk
        got = np.array(mx.argmax(mx.array(x).astype(getattr(mx, name)), axis=1))
        np.testing.assert_array_equal(got, np.argmax(x, axis=1))
        assert got.flatten()[0] == 2049


def test_arg_reductions_of_empty_arrays_raise():
    with pytest.raises(ValueError):
        mx.eval(mx.argmax(mx.zeros((0, 3)), axis=0))
    with pytest.raises(ValueError):
        mx.eval(mx.argmin(mx.zeros((0,))))


@pytest.mark.parametrize("op", ["cumsum", "cumprod", "cummax", "cummin"])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumulative_ops_nan_and_views(op, reverse, device):
    a = RNG.uniform(0.5, 1.5, (6, 9)).astype(np.float32)
    a[2, 3] = np.nan
    ref = {"cumsum": np.cumsum, "cumprod": np.cumprod,
           "cummax": np.maximum.accumulate, "cummin": np.minimum.accumulate}[op]
    for name, k, n in kiln_views(a):
        for axis in (0, 1):
            want = np.flip(ref(np.flip(n, axis), axis=axis), axis) if reverse else ref(n, axis=axis)
            got = np.array(getattr(mx, op)(k, axis=axis, reverse=reverse))
            np.testing.assert_allclose(got, want, rtol=1e-5, equal_nan=True, err_msg=name)


def test_cumulative_ops_of_empty_arrays():
    for op in ("cumsum", "cumprod", "cummax", "cummin", "logcumsumexp"):
        out = getattr(mx, op)(mx.zeros((0, 3)), axis=0)
        assert out.shape == (0, 3)
        assert getattr(mx, op)(mx.zeros((2, 0)), axis=1).shape == (2, 0)


def test_logsumexp_specials_views_and_empty():
    a = RNG.standard_normal((5, 8)).astype(np.float32) * 30
    for name, k, n in kiln_views(a):
        for axis in (0, 1, None):
            m = np.max(n, axis=axis, keepdims=True)
            want = np.squeeze(m + np.log(np.sum(np.exp(n - m), axis=axis, keepdims=True)), axis=axis)
            got = np.array(mx.logsumexp(k, axis=axis))
            np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=name)
    inf = np.inf
    for values, want in [([-inf, -inf], -inf), ([inf, 1.0], inf), ([np.nan, 1.0], np.nan),
                         ([1e30, 1e30], 1e30 + np.log(2))]:
        got = mx.logsumexp(mx.array(np.array(values, dtype=np.float32))).item()
        np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True)
    with pytest.raises(ValueError):
        mx.logsumexp(mx.zeros((0, 3)), axis=0)


def test_float16_mean_past_65504_elements():
    # MLX: the float16 sum (inf past 65519) times 1/n: inf, not NaN; 65505 ones sum to
    # 65504 and the mean is 65504 * 2^-16.
    assert mx.mean(mx.ones((70_000,), dtype=mx.float16)).item() == np.inf
    assert mx.mean(mx.ones((65_505,), dtype=mx.float16)).item() == 0.99951171875
    m = mx.mean(mx.ones((3, 70_000), dtype=mx.float16), axis=1)
    assert np.array(m).tolist() == [np.inf] * 3
    assert mx.mean(mx.ones((1000,), dtype=mx.float16)).item() == 1.0
