"""The vectorised CPU kernels at sizes that take their threaded and SIMD paths (above
2^15 elements), against numpy in float64: the polynomial transcendental functions (float32,
float16, bfloat16) with their documented error bounds, elementwise walks over strided,
broadcast and negative-step views, the fast reduction layouts, and the fused softmax.
"""

import math

import kiln.core as mx
import numpy as np
import pytest

N = (1 << 16) + 37  # not a multiple of any vector width or chunk

# op -> (float64 reference, documented max error in float32 ulps, input range)
UNARY = {
    "exp": (np.exp, 0.92, (-110.0, 90.0)),
    "expm1": (np.expm1, 1.52, (-20.0, 20.0)),
    "log": (np.log, 1.95, (1e-30, 1e6)),
    "log1p": (np.log1p, 2.66, (-0.999, 1e4)),
    "tanh": (np.tanh, 5.25, (-12.0, 12.0)),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), 2.30, (-110.0, 30.0)),
    "erf": (np.vectorize(math.erf), 5.35, (-5.0, 5.0)),
}


def ulps(got, ref):
    """|got - ref| in float32 ulps of ref (ref in float64)."""
    ref32 = np.abs(ref.astype(np.float32))
    spacing = np.spacing(ref32).astype(np.float64)
    spacing = np.maximum(spacing, 2.0**-149)
    return np.abs(got.astype(np.float64) - ref) / spacing


@pytest.mark.parametrize("op", list(UNARY))
def test_unary_float32_error_bound(op):
    ref, bound, (lo, hi) = UNARY[op]
    rng = np.random.default_rng(1)
    x = rng.uniform(lo, hi, N).astype(np.float32)
    x[:1000] = np.linspace(-1, 1, 1000, dtype=np.float32) * (hi if lo >= 0 else 1)
    if lo > 0:
        x = np.abs(x) + np.float32(lo)
    with np.errstate(all="ignore"):
        want = ref(x.astype(np.float64))
    got = np.array(getattr(mx, op)(mx.array(x)))
    finite = np.isfinite(want) & (np.abs(want) < 3e38)
    assert ulps(got[finite], want[finite]).max() <= bound
    # Overflow to inf exactly where the reference rounds to inf.
    with np.errstate(over="ignore"):
        assert np.array_equal(np.isinf(got), np.isinf(want.astype(np.float32)))


SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1e-38, 88.8, -104.0,
                    9.1, -9.1, 4.5, -4.5, 1.0, -1.0, 3e38, -3e38], dtype=np.float32)


@pytest.mark.parametrize("op", list(UNARY))
def test_unary_special_values(op):
    ref = UNARY[op][0]
    with np.errstate(all="ignore"):
        want = ref(SPECIAL.astype(np.float64)).astype(np.float32)
    got = np.array(getattr(mx, op)(mx.array(SPECIAL)))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
    # Signs of zeros and NaN positions agree too.
    assert np.array_equal(np.signbit(got[want == 0]), np.signbit(want[want == 0]))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("op", list(UNARY))
def test_unary_half_types_round_once(op, dtype):
    ref, _, (lo, hi) = UNARY[op]
    x = np.random.default_rng(2).uniform(max(lo, -10), min(hi, 10), N).astype(np.float32)
    xk = mx.array(x).astype(getattr(mx, dtype))
    xs = np.array(xk.astype(mx.float32)).astype(np.float64)  # the exact half values
    with np.errstate(all="ignore"):
        want = ref(xs)
    got = np.array(getattr(mx, op)(xk).astype(mx.float32)).astype(np.float64)
    eps = 2.0**-10 if dtype == "float16" else 2.0**-7
    np.testing.assert_allclose(got, want, rtol=eps, atol=1e-4 if dtype == "float16" else 1e-30)


def views(a):
    """The same values as a contiguous array, transposed, negative-step and offset views."""
    yield a
    yield a.T
    yield a[::-1, ::-2]
    yield a[1:, 3:]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32"])
def test_elementwise_walks_over_views(dtype):
    rng = np.random.default_rng(3)
    base = rng.uniform(-3, 3, (300, 257)).astype(np.float32)
    if dtype == "int32":
        base = (base * 10).astype(np.int32)
    k = mx.array(base).astype(getattr(mx, dtype))
    n = np.array(k.astype(mx.float32)).astype(np.float64) if dtype != "int32" else base
    row = mx.array(base[0]).astype(getattr(mx, dtype))
    col = mx.array(base[:, :1]).astype(getattr(mx, dtype))
    nrow, ncol = n[0], n[:, :1]
    tol = {"float32": 1e-6, "float16": 2e-3, "bfloat16": 1.6e-2, "int32": 0}[dtype]
    for kv, nv in zip(views(k), views(n)):
        shape_row = kv.shape[-1]
        cases = [
            (kv * 2 + 1, nv * 2 + 1),
            (mx.maximum(kv, kv * kv - 4), np.maximum(nv, nv * nv - 4)),
            (kv - kv.T.T, nv - nv),
        ]
        if shape_row == row.shape[0]:
            cases.append((kv + row, nv + nrow))
        if kv.shape[0] == col.shape[0]:
            cases.append((kv * col, nv * ncol))
        for got, want in cases:
            g = np.array(got.astype(mx.float64))
            np.testing.assert_allclose(g, want, rtol=tol, atol=tol)
    if dtype != "int32":
        got = np.array(mx.tanh(k[::-1, ::3]).astype(mx.float64))
        np.testing.assert_allclose(got, np.tanh(n[::-1, ::3]), rtol=tol * 4, atol=tol * 4)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "float16"])
@pytest.mark.parametrize("axes", [None, 0, 1, (0, 1), 2, (0, 2), (1, 2)])
@pytest.mark.parametrize("op", ["sum", "max", "min", "prod", "mean"])
def test_reductions_on_fast_layouts(op, axes, dtype):
    rng = np.random.default_rng(4)
    lo, hi = (0.99, 1.01) if op == "prod" else (0.5, 1.5)  # products stay normal numbers
    x = rng.uniform(lo, hi, (33, 65, 40)).astype(np.float64)
    if dtype == "int32":
        x = (x * 3).astype(np.int32)
    k = mx.array(x).astype(getattr(mx, dtype))
    xn = np.array(k.astype(mx.float64))
    got = np.array(getattr(mx, op)(k, axis=axes).astype(mx.float64))
    want = getattr(np, op)(xn, axis=axes)
    if op == "prod" and dtype == "int32":
        return  # wraps; covered by test_reductions
    if op == "mean" and dtype == "float16" and xn.size // max(got.size, 1) > 65504:
        return  # the count itself overflows float16 (kiln gives NaN, MLX inf): not a kernel matter
    rtol = {"float32": 1e-5, "float64": 1e-12, "int32": 1e-12, "float16": 1e-2}[dtype]
    if op == "mean" and dtype == "int32":
        rtol = 1e-6  # computed in float32
    if op == "prod":
        rtol = max(rtol * 100, 1e-4)
    if dtype == "float16":
        want = np.asarray(want).astype(np.float16)  # past 65504 the sum is inf there too
    np.testing.assert_allclose(got, want, rtol=rtol)


def test_reductions_nan_and_threads():
    x = np.ones(1 << 18, np.float32)
    assert float(mx.sum(mx.array(x))) == 1 << 18
    x[12345] = np.nan
    assert math.isnan(float(mx.max(mx.array(x))))
    assert math.isnan(float(mx.sum(mx.array(x))))
    y = np.arange(1 << 18, dtype=np.float32).reshape(512, 512)
    want = y.sum(axis=0, dtype=np.float64)
    np.testing.assert_allclose(np.array(mx.sum(mx.array(y), axis=0)), want, rtol=2e-6)
    np.testing.assert_allclose(np.array(mx.max(mx.array(y), axis=1)), y.max(axis=1))


def np_softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("axis", [-1, 0, 1, None])
def test_softmax_fused(axis, dtype):
    x = np.random.default_rng(5).standard_normal((70, 513)).astype(np.float64) * 4
    k = mx.array(x).astype(getattr(mx, dtype))
    xn = np.array(k.astype(mx.float64))
    for kv, nv in [(k, xn), (k[::-1, ::2], xn[::-1, ::2]), (k.T, xn.T)]:
        got = mx.softmax(kv, axis=axis, precise=True)
        assert got.dtype == k.dtype
        want = np_softmax(nv.reshape(-1) if axis is None else nv, 0 if axis is None else axis)
        tol = {"float32": 1e-6, "float64": 1e-12, "float16": 1e-3, "bfloat16": 8e-3}[dtype]
        np.testing.assert_allclose(np.array(got.astype(mx.float64)).reshape(want.shape), want,
                                   rtol=tol * 10, atol=tol)


def test_softmax_special_rows():
    x = np.array([[1, 2, np.nan], [0, -np.inf, 0], [np.inf, 1, -np.inf], [-np.inf, 1e3, -1e3]],
                 dtype=np.float32)
    with np.errstate(all="ignore"):
        want = np_softmax(x, -1)
    np.testing.assert_array_equal(np.array(mx.softmax(mx.array(x), axis=-1)), want)
    assert mx.softmax(mx.zeros((0, 4)), axis=-1).shape == (0, 4)
