"""GPU backend tests: results on mx.gpu against numpy and against the same ops on mx.cpu.

Skipped (with the reason) where no GPU is available; run them on the GPU machine with
`python -m pytest tests/python/test_gpu.py`."""

import numpy as np
import pytest

import kiln.core as mx

pytestmark = pytest.mark.skipif(
    not mx.is_available(mx.gpu), reason="no GPU is available on this machine"
)

RNG = np.random.default_rng(7)
FLOATS = [mx.float32, mx.float16, mx.bfloat16]
TOL = {mx.float32: 1e-5, mx.float16: 2e-3, mx.bfloat16: 2e-2}


def rand(shape, dtype=mx.float32, lo=-3.0, hi=3.0):
    x = RNG.uniform(lo, hi, size=shape).astype(np.float32)
    return mx.array(x).astype(dtype)


def both(fn, *args):
    """fn evaluated on the GPU and on the CPU, as float64 numpy arrays."""
    with mx.stream(mx.gpu):
        g = fn(*args)
    with mx.stream(mx.cpu):
        c = fn(*args)
    mx.eval(g, c)
    return np.array(g.astype(mx.float32) if g.dtype in FLOATS else g), np.array(
        c.astype(mx.float32) if c.dtype in FLOATS else c
    )


def close(g, c, dtype, scale=1.0):
    tol = TOL.get(dtype, 0) * scale
    np.testing.assert_allclose(g, c, rtol=tol, atol=tol, equal_nan=True)


def test_default_device_is_gpu_and_info():
    assert mx.default_device() == mx.gpu
    info = mx.device_info(mx.gpu)
    assert info["architecture"].startswith("sm_")
    assert mx.device_count(mx.gpu) == 1


UNARY = ["exp", "log", "sqrt", "sin", "cos", "tanh", "sigmoid", "erf", "abs", "negative",
         "floor", "ceil", "round", "rsqrt", "log1p", "expm1", "square", "sign", "arctan"]


@pytest.mark.parametrize("name", UNARY)
@pytest.mark.parametrize("dtype", FLOATS)
def test_unary_matches_cpu(name, dtype):
    lo = 0.1 if name in ("log", "sqrt", "rsqrt", "log1p") else -3.0
    x = rand((37, 129), dtype, lo=lo)
    g, c = both(getattr(mx, name), x)
    close(g, c, dtype, scale=4)


BINARY = ["add", "subtract", "multiply", "divide", "maximum", "minimum", "power",
          "floor_divide", "remainder", "logaddexp", "arctan2"]


@pytest.mark.parametrize("name", BINARY)
@pytest.mark.parametrize("dtype", FLOATS)
def test_binary_broadcast_matches_cpu(name, dtype):
    a = rand((5, 1, 33), dtype, lo=0.5)
    b = rand((4, 33), dtype, lo=0.5)
    g, c = both(getattr(mx, name), a, b)
    close(g, c, dtype, scale=4)


@pytest.mark.parametrize("dtype", [mx.int8, mx.uint8, mx.int32, mx.int64, mx.uint32, mx.int16])
@pytest.mark.parametrize("name", ["add", "multiply", "floor_divide", "remainder", "maximum",
                                  "left_shift", "right_shift", "bitwise_xor", "less", "equal"])
def test_integer_ops_exact(dtype, name):
    a = mx.array(RNG.integers(-100, 100, size=(3, 50))).astype(dtype)
    b = mx.array(RNG.integers(-5, 6, size=(50,))).astype(dtype)
    g, c = both(getattr(mx, name), a, b)
    np.testing.assert_array_equal(g, c)


def test_integer_division_by_zero_and_bool_ops():
    a = mx.array([7, -7, 3, 0], dtype=mx.int32)
    z = mx.zeros((4,), dtype=mx.int32)
    g, c = both(lambda: (a // z) + (a % z))
    np.testing.assert_array_equal(g, c)
    p = mx.array([True, False, True])
    q = mx.array([True, True, False])
    g, c = both(lambda: mx.logical_and(p, q) | mx.logical_not(q))
    np.testing.assert_array_equal(g, c)


def test_nan_inf_and_casts():
    x = mx.array([np.nan, np.inf, -np.inf, 3.7, -2.5, 1e20, -0.0], dtype=mx.float32)
    for fn in (lambda v: mx.maximum(v, 0.0), lambda v: v.astype(mx.int32),
               lambda v: v.astype(mx.float16), lambda v: v.astype(mx.bfloat16),
               lambda v: v.astype(mx.uint8), lambda v: mx.isnan(v), mx.exp):
        g, c = both(fn, x)
        np.testing.assert_array_equal(g, c)


def test_strided_views_and_where():
    x = rand((8, 6, 10))
    y = rand((10, 6))
    g, c = both(lambda: x[::-2, :, 1::3] * y.T[None, :, 1::3] + x.transpose(0, 2, 1)[1::2, 1::3, :].swapaxes(1, 2))
    close(g, c, mx.float32)
    g, c = both(lambda: mx.where(x > 0, x, y.T[None]))
    close(g, c, mx.float32)


def test_empty_and_scalar():
    e = mx.zeros((0, 5))
    g, c = both(lambda: mx.exp(e) + 1)
    assert g.shape == (0, 5)
    g, c = both(lambda: mx.array(2.0) * mx.array(3.0))
    assert float(g) == 6.0


@pytest.mark.parametrize("dtype", FLOATS + [mx.int32, mx.uint8])
@pytest.mark.parametrize("axes", [None, 0, 1, 2, (0, 2), (1, 2)])
@pytest.mark.parametrize("name", ["sum", "max", "min", "prod", "mean"])
def test_reductions_match_cpu(dtype, axes, name):
    if name == "prod":
        x = rand((6, 7, 9), mx.float32, lo=0.8, hi=1.2).astype(dtype) if dtype in FLOATS else \
            mx.array(RNG.integers(0, 3, size=(6, 7, 9))).astype(dtype)
    else:
        x = rand((6, 7, 9), dtype) if dtype in FLOATS else \
            mx.array(RNG.integers(0, 50, size=(6, 7, 9))).astype(dtype)
    g, c = both(lambda v: getattr(mx, name)(v, axis=axes), x)
    if dtype in FLOATS:
        close(g, c, dtype, scale=8)
    else:
        np.testing.assert_allclose(g, c, rtol=1e-6)


@pytest.mark.parametrize("shape,axes", [
    ((4096, 64), 0),          # few columns: chunked column reduction, two stages
    ((3, 50_000), 0),         # short columns, many of them
    ((16, 40, 33), (0, 1)),   # leading axes (a weight gradient's batch sum)
    ((50_000, 5), 1),         # short rows: a warp per row
    ((7, 3000), 1),           # rows longer than a warp's stride
    ((2, 2000, 3), 1),        # a middle axis: transposed copy, then rows
    ((4, 1, 5, 6), 1),        # a size-1 axis: one copy
    ((3, 7, 1, 1), (2, 3)),   # several size-1 axes, trailing
])
@pytest.mark.parametrize("name", ["sum", "max", "min"])
@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16, mx.int32])
def test_reduction_shapes_of_work(shape, axes, name, dtype):
    x = rand(shape, dtype) if dtype != mx.int32 else mx.array(RNG.integers(-50, 50, size=shape)).astype(dtype)
    g, c = both(lambda v: getattr(mx, name)(v, axis=axes), x)
    if dtype == mx.int32:
        np.testing.assert_array_equal(g, c)
    else:
        close(g, c, dtype, scale=200 if name == "sum" else 1)


def test_large_full_reduction_and_nan():
    x = rand((3_000_001,))
    g, c = both(lambda v: mx.sum(v), x)
    np.testing.assert_allclose(g, c, rtol=1e-4)
    n = mx.array([1.0, np.nan, 3.0])
    g, _ = both(lambda v: mx.max(v), n)
    assert np.isnan(g)
    b = mx.array(RNG.integers(0, 2, size=(1000, 3)).astype(bool))
    for fn in (mx.all, mx.any):
        g, c = both(lambda v: fn(v, axis=0), b)
        np.testing.assert_array_equal(g, c)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shapes", [((64, 32), (32, 48)), ((3, 17, 5), (3, 5, 9)),
                                    ((2, 1, 8, 4), (1, 3, 4, 6)), ((1, 7), (7, 1))])
def test_matmul_matches_numpy(dtype, shapes):
    a = rand(shapes[0], dtype, -1, 1)
    b = rand(shapes[1], dtype, -1, 1)
    g, c = both(lambda: a @ b)
    ref = np.array(a.astype(mx.float32)) @ np.array(b.astype(mx.float32))
    tol = {mx.float32: 1e-4, mx.float16: 1e-2, mx.bfloat16: 5e-2}[dtype]
    np.testing.assert_allclose(g, ref, rtol=tol, atol=tol)


def test_matmul_transposed_and_sliced_operands():
    a = rand((40, 30))
    b = rand((50, 30))
    g, _ = both(lambda: a @ b.T)
    np.testing.assert_allclose(g, np.array(a) @ np.array(b).T, rtol=1e-4, atol=1e-4)
    g, _ = both(lambda: a[::2, 1:] @ b[3:32, ::-1])
    np.testing.assert_allclose(g, np.array(a)[::2, 1:] @ np.array(b)[3:32, ::-1], rtol=1e-4, atol=1e-4)
    k0 = mx.zeros((4, 0))
    g, _ = both(lambda: k0 @ mx.zeros((0, 3)))
    np.testing.assert_array_equal(g, np.zeros((4, 3)))


@pytest.mark.parametrize("dtype", FLOATS)
def test_matmul_batches_without_one_stride(dtype):
    """Attention's heads split out of a fused qkv row: batch dims (B, H) with no single
    stride, read in place through pointer arrays; also a broadcast and a reversed batch."""
    B, T, H, D = 3, 10, 4, 8
    qkv = rand((B, T, 3, H, D), dtype, -1, 1)
    q, k, v = (qkv.transpose(2, 0, 3, 1, 4)[i] for i in range(3))  # (B, H, T, D) views
    w = rand((1, H, D, 5), dtype, -1, 1)
    ref = lambda x: np.array(x.astype(mx.float32)).astype(np.float64)
    tol = {mx.float32: 1e-4, mx.float16: 1e-2, mx.bfloat16: 5e-2}[dtype]
    cases = [
        (lambda: q @ k.swapaxes(-1, -2), ref(q) @ ref(k).swapaxes(-1, -2)),
        (lambda: (q @ k.swapaxes(-1, -2)) @ v, (ref(q) @ ref(k).swapaxes(-1, -2)) @ ref(v)),
        (lambda: q @ w, ref(q) @ ref(w)),
        (lambda: q[::-1] @ k.swapaxes(-1, -2)[::-1], ref(q)[::-1] @ ref(k).swapaxes(-1, -2)[::-1]),
    ]
    for fn, want in cases:
        g, c = both(fn)
        np.testing.assert_allclose(g, c, rtol=tol * 4, atol=tol * 4)
        if want is not None:
            np.testing.assert_allclose(g, want, rtol=tol * 4, atol=tol * 4)


CONVS = [
    # (input shape, weight shape, keyword arguments of conv_general)
    ((2, 9, 3), (4, 3, 3), {}),
    ((2, 9, 4), (6, 3, 2), {"stride": 2, "padding": 1, "groups": 2}),
    ((1, 7, 8, 3), (5, 3, 2, 3), {"stride": (2, 1), "padding": ([1, 0], [2, 1])}),
    ((2, 6, 5, 4), (4, 2, 2, 1), {"kernel_dilation": 2, "groups": 4, "flip": True}),
    ((1, 5, 5, 2), (3, 3, 3, 2), {"input_dilation": 2, "padding": 2}),
    ((1, 8, 2), (3, 3, 2), {"padding": ([-1], [-2])}),
    ((1, 4, 4, 3, 2), (2, 2, 2, 2, 2), {"stride": 2, "padding": 1}),
    ((0, 5, 2), (3, 2, 2), {}),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", range(len(CONVS)))
def test_conv_matches_cpu(dtype, case):
    xs, ws, kw = CONVS[case]
    x, w = rand(xs, dtype, -1, 1), rand(ws, dtype, -1, 1)
    g, c = both(lambda: mx.conv_general(x, w, **kw))
    tol = {mx.float32: 1e-4, mx.float16: 1e-2, mx.bfloat16: 5e-2}[dtype]
    np.testing.assert_allclose(g, c, rtol=tol, atol=tol)


def test_conv_gradients_match_cpu():
    x, w = rand((2, 8, 8, 3), lo=-1, hi=1), rand((4, 3, 3, 3), lo=-1, hi=1)

    def loss(x, w):
        return (mx.conv2d(x, w, stride=2, padding=1) ** 2).sum()

    for argnum in (0, 1):
        g, c = both(lambda: mx.grad(loss, argnums=argnum)(x, w))
        np.testing.assert_allclose(g, c, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16, mx.int64, mx.bool_, mx.uint8])
def test_masked_scatter_matches_cpu(dtype):
    x = mx.array(RNG.integers(0, 9, size=(5, 3, 4))).astype(dtype)
    for mask, vshape in [(RNG.integers(0, 2, size=(5,)).astype(bool), (6, 3, 4)),
                         (RNG.integers(0, 2, size=(5, 3, 4)).astype(bool), (70,)),
                         (np.zeros((5, 3), dtype=bool), (1, 4))]:
        v = mx.array(RNG.integers(10, 20, size=vshape)).astype(dtype)

        def put():
            y = x[...]
            y[mx.array(mask)] = v
            return y

        g, c = both(put)
        np.testing.assert_array_equal(g, c)
    with mx.stream(mx.gpu):
        y = x[...]
        with pytest.raises(RuntimeError, match="enough"):
            y[mx.array(np.ones((5,), dtype=bool))] = mx.ones((2, 3, 4), dtype=dtype)
            mx.eval(y)


def test_ops_without_gpu_kernels_still_run():
    x = rand((9, 13))
    for fn in (lambda v: mx.abs(mx.fft.fft(v)), lambda v: mx.cumsum(v, axis=0),
               lambda v: mx.argmax(v, axis=1), lambda v: mx.softmax(v, axis=-1),
               lambda v: v[mx.array([3, 1, 4])], lambda v: mx.concatenate([v, v], axis=0)):
        g, c = both(fn, x)
        np.testing.assert_allclose(g, c, rtol=1e-6, atol=1e-6)


def test_random_same_numbers_as_cpu():
    key = mx.random.key(3)
    g, c = both(lambda: mx.random.uniform(shape=(100,), key=key))
    np.testing.assert_array_equal(g, c)


def test_float64_is_a_clear_error_on_the_gpu():
    x = mx.array([1.0, 2.0], dtype=mx.float64)
    with pytest.raises(ValueError, match="float64"):
        with mx.stream(mx.gpu):
            y = mx.exp(x)
        mx.eval(y)
    with mx.stream(mx.cpu):
        assert float(mx.exp(x)[0]) == pytest.approx(np.e)


def test_compile_fuses_on_the_gpu():
    def gelu(x):
        return 0.5 * x * (1 + mx.erf(x / np.sqrt(2.0)))

    f = mx.compile(gelu)
    for dtype in FLOATS:
        x = rand((1000, 33), dtype)
        close(np.array(f(x).astype(mx.float32)), np.array(gelu(x).astype(mx.float32)), dtype, 4)
    x = rand((5, 7))
    close(np.array(f(x.T)), np.array(gelu(x.T)), mx.float32)


def test_memory_counters_and_limit():
    mx.clear_cache()
    before = mx.get_active_memory()
    x = mx.zeros((1 << 20,)) + 1  # zeros alone is a broadcast view of one value
    mx.eval(x)
    assert mx.get_active_memory() >= before + 4 * (1 << 20)
    del x
    assert mx.get_cache_memory() >= 4 * (1 << 20)
    mx.clear_cache()
    assert mx.get_cache_memory() == 0
    old = mx.set_memory_limit(1 << 20)
    try:
        with pytest.raises(RuntimeError, match="memory"):
            mx.eval(mx.ones((1 << 22,)) + 1)
    finally:
        mx.set_memory_limit(old)


def test_conversions_and_async_eval():
    x = rand((100,))
    y = mx.exp(x)
    mx.async_eval(y)
    mx.synchronize()
    np.testing.assert_allclose(np.array(y), np.exp(np.array(x)), rtol=1e-6)
    assert float(mx.sum(y).item()) == pytest.approx(float(np.exp(np.array(x)).sum()), rel=1e-5)
    assert "array" in repr(y)


@pytest.mark.parametrize("dtype", FLOATS + [mx.int32, mx.uint8, mx.int64])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_arg_reductions_match_cpu(dtype, axis):
    x = rand((7, 300, 5), mx.float32).astype(dtype) if dtype in FLOATS else \
        mx.array(RNG.integers(0, 5, size=(7, 300, 5))).astype(dtype)  # many ties
    for fn in (mx.argmax, mx.argmin):
        g, c = both(lambda v: fn(v, axis=axis), x)
        np.testing.assert_array_equal(g, c)


def test_arg_reductions_nan_first_wins():
    x = mx.array([[1.0, np.nan, 5.0, np.nan], [3.0, 3.0, 1.0, 1.0]])
    for fn in (mx.argmax, mx.argmin):
        g, c = both(lambda v: fn(v, axis=1), x)
        np.testing.assert_array_equal(g, c)


@pytest.mark.parametrize("dtype", FLOATS + [mx.int32, mx.uint32, mx.int64])
@pytest.mark.parametrize("shape", [(1, 128256), (3, 20001), (64, 16384), (65, 16384), (2, 40000, 3)])
def test_arg_reductions_of_long_rows(dtype, shape):
    # Few long rows (a vocabulary's log-probabilities) are split across blocks; the chunk
    # boundaries must keep NaN-first and lowest-index ties.
    if dtype in FLOATS:
        x = np.round(RNG.uniform(-3, 3, size=shape), 1).astype(np.float32)  # many ties
    else:
        x = RNG.integers(0, 50, size=shape)
    axis = 1
    for fn in (mx.argmax, mx.argmin):
        g, c = both(lambda v: fn(v, axis=axis), mx.array(x).astype(dtype))
        np.testing.assert_array_equal(g, c)
    if dtype in FLOATS:
        x[0, shape[1] - 5] = np.nan
        x[0, 2049] = np.nan  # the first NaN, in the second chunk
        g, c = both(lambda v: mx.argmax(v, axis=axis), mx.array(x).astype(dtype))
        np.testing.assert_array_equal(g, c)
        assert g.flatten()[0] == 2049


@pytest.mark.parametrize("dtype", FLOATS)
def test_softmax_rows(dtype):
    x = rand((33, 1000), dtype, -20, 20)
    g, c = both(lambda v: mx.softmax(v, axis=-1), x)
    close(g, c, dtype, scale=4)
    g, c = both(lambda v: mx.softmax(v, axis=0), x)  # axis moved last through a copy
    close(g, c, dtype, scale=4)
    for length in (1, 31, 32, 64, 256, 257, 1024, 1025, 5000):  # a warp per row up to 1024
        x = rand((7, length), dtype, -20, 20)
        g, c = both(lambda v: mx.softmax(v, axis=-1), x)
        close(g, c, dtype, scale=4)
    n = mx.array([[1.0, np.nan], [np.inf, 1.0], [2.0, 3.0]])
    g, c = both(lambda v: mx.softmax(v, axis=-1), n)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(c))


# ---- data movement, indexing, scans and creation: GPU kernels against the CPU's ----

ALL_DTYPES = FLOATS + [mx.int8, mx.uint8, mx.int16, mx.int32, mx.uint32, mx.int64, mx.bool_]


def exact(g, c):
    np.testing.assert_array_equal(g, c)


def typed(shape, dtype):
    x = RNG.uniform(-50, 50, size=shape)
    return mx.array(x.astype(np.float32)).astype(dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_concatenate_and_slice_update(dtype):
    a, b = typed((5, 3, 4), dtype), typed((5, 2, 4), dtype)
    exact(*both(lambda a, b: mx.concatenate([a, b.transpose(0, 1, 2)[:, ::-1]], axis=1), a, b))
    exact(*both(lambda a, b: mx.concatenate([a.T, a.T[::2]], axis=0), a, b))

    def upd(a, b):
        c = a + mx.zeros_like(a) if dtype != mx.bool_ else a | False
        c[1:4, 2:0:-1, ::3] = b[1:4, ::-1, ::3]
        return c

    exact(*both(upd, a, b))


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("idx_dtype", [mx.int32, mx.uint8, mx.int64, mx.uint64])
def test_gather_take_and_embedding(dtype, idx_dtype):
    x = typed((7, 6, 5), dtype)
    idx = mx.array(RNG.integers(0, 7, size=(4, 3))).astype(idx_dtype)
    exact(*both(lambda x, i: mx.take(x, i, axis=0), x, idx))
    exact(*both(lambda x, i: mx.take(x, i, axis=2), x, idx % 5))
    exact(*both(lambda x, i: x[i, :, i], x, idx % 5))
    exact(*both(lambda x, i: mx.take_along_axis(x, mx.broadcast_to(i[:1, :1, None], (1, 6, 5)), 0), x, idx))
    # Negative indices count from the end.
    neg = mx.array([-1, -7, 3, -2])
    exact(*both(lambda x, i: x[i], x, neg))


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("mode", ["add", "multiply", "maximum", "minimum", "set"])
def test_scatter_reductions(dtype, mode):
    if dtype == mx.bool_ and mode in ("add", "multiply"):
        return
    x = typed((6, 4), dtype)
    upd = typed((5, 4), dtype)
    idx = mx.array([0, 3, 3, 5, -1])  # duplicates combine; -1 is the last row
    if mode == "set":
        idx = mx.array([0, 3, 2, 5, 1])

    def f(x, u):
        if mode != "set":
            return getattr(x.at[idx], mode)(u)
        y = x + 0 if dtype != mx.bool_ else x | False
        y[idx] = u
        return y

    g, c = both(f, x, upd)
    if dtype in FLOATS:
        close(g, c, dtype, scale=4)
    else:
        exact(g, c)


def test_scatter_add_embedding_gradient_shape():
    # The embedding backward: many rows, few distinct indices, float32 atomics.
    w = rand((50, 32))
    ids = mx.array(RNG.integers(0, 50, size=(8, 64)))
    grad = mx.grad(lambda w: (w[ids] * w[ids]).sum())
    g, c = both(grad, w)
    close(g, c, mx.float32, scale=10)


@pytest.mark.parametrize("dtype", FLOATS + [mx.int32, mx.uint8, mx.int64, mx.bool_])
@pytest.mark.parametrize("name", ["cumsum", "cumprod", "cummax", "cummin", "logcumsumexp"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scans_match_cpu(dtype, name, axis):
    if name == "logcumsumexp" and dtype not in FLOATS:
        return
    if name == "cumprod":
        x = mx.array(RNG.uniform(0.9, 1.1, size=(5, 300, 3)).astype(np.float32)).astype(dtype)
    else:
        x = typed((5, 300, 3), dtype) if dtype != mx.uint8 else typed((5, 300, 3), mx.int32).astype(mx.uint8)
    for reverse in (False, True):
        for inclusive in (True, False):
            g, c = both(lambda x: getattr(mx, name)(x, axis=axis, reverse=reverse, inclusive=inclusive), x)
            if dtype in FLOATS:
                close(g, c, dtype, scale=20 if dtype == mx.float32 else 40)
            else:
                exact(g, c)


def test_scan_long_rows_nan_and_negative_zero():
    x = rand((2, 5000))
    g, c = both(lambda x: mx.cumsum(x, axis=1), x)
    np.testing.assert_allclose(g, c, rtol=1e-4, atol=1e-3)
    y = mx.array([[-0.0, 1.0, np.nan, 2.0]])
    g, c = both(lambda y: mx.cummax(y, axis=1), y)
    exact(g, c)
    g, _ = both(lambda y: mx.cumsum(y, axis=1), y[:, :1])
    assert np.signbit(g[0, 0])


@pytest.mark.parametrize("dtype", FLOATS + [mx.int32, mx.uint8, mx.int64, mx.int16])
def test_arange_matches_cpu(dtype):
    g, c = both(lambda: mx.arange(-3, 40, 0.7 if dtype in FLOATS else 3, dtype=dtype))
    exact(g, c)


@pytest.mark.parametrize("shape", [(7,), (3, 5), (0,), (1000, 3), (2, 2, 2)])
@pytest.mark.parametrize("dtype", [mx.uint32, mx.uint8, mx.uint16, mx.float32, mx.bfloat16])
def test_random_bits_same_as_cpu(shape, dtype):
    key = mx.random.key(1234)
    if dtype in (mx.float32, mx.bfloat16):
        f = lambda: mx.random.normal(shape, dtype=dtype, key=key)  # noqa: E731
    else:
        f = lambda: mx.random.bits(shape, width=np.dtype(str(dtype).split(".")[-1]).itemsize, key=key)  # noqa: E731
    g, c = both(f)
    if dtype in FLOATS:  # normal's erfinv may differ in the last bit between devices
        close(g, c, dtype)
    else:
        exact(g, c)
    keys = mx.random.split(key, 3)
    g, c = both(lambda: mx.random.uniform(shape=(3,) + shape[:1], key=keys[1]))
    exact(g, c)


def test_bitcast_and_as_strided_of_strided_inputs():
    x = rand((6, 8))
    exact(*both(lambda x: x.T.view(mx.int32), x))
    exact(*both(lambda x: mx.as_strided(x.T, (4, 3), (1, 4), 2), x))


def test_train_step_ops_stay_on_the_gpu(capfd, monkeypatch):
    monkeypatch.setenv("KILN_LOG", "gpu")
    w = rand((64, 16))
    ids = mx.array(RNG.integers(0, 64, size=(4, 9)))

    def loss(w):
        h = w[ids]
        h = mx.concatenate([h[:, :1], h[:, 1:] * 2], axis=1)
        logits = h @ w.T
        return mx.mean(mx.logsumexp(logits, axis=-1) - mx.take_along_axis(logits, ids[..., None], -1)[..., 0])

    mx.eval(mx.value_and_grad(loss)(w))
    err = capfd.readouterr().err
    for op in ("gather", "scatter", "concatenate", "slice_update"):
        assert f" {op} has no GPU kernel" not in err, err


@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16, mx.int8, mx.int64])
def test_plain_scatter_keeps_the_last_duplicate(dtype):
    x = mx.zeros((5, 3), dtype=dtype)
    idx = mx.array([4, 1, 4, 1, 1, 0, 4])
    upd = mx.array(np.arange(21).reshape(7, 3).astype(np.float32)).astype(dtype)

    def f(x, u):
        y = x + 0
        y[idx] = u
        return y

    exact(*both(f, x, upd))


@pytest.mark.parametrize("dtype", FLOATS + [mx.int32, mx.uint8, mx.int64, mx.bool_])
@pytest.mark.parametrize("shape,axis", [((7, 300), 1), ((300, 5), 0), ((3, 2049), -1),
                                        ((2, 5000), 1), ((4, 1), 1), ((6, 7, 8), 1)])
def test_sort_argsort_partition_match_cpu(dtype, shape, axis):
    # Few distinct values: ties must keep their order (stable), as on the CPU.
    x = mx.array(RNG.integers(-5, 6, size=shape).astype(np.float32)).astype(dtype)
    exact(*both(lambda v: mx.sort(v, axis=axis), x))
    exact(*both(lambda v: mx.argsort(v, axis=axis), x))
    k = shape[axis] // 2
    g, _ = both(lambda v: mx.partition(v, k, axis=axis), x)
    ref = np.sort(np.array(x.astype(mx.float32)) if dtype in FLOATS else np.array(x), axis=axis)
    np.testing.assert_array_equal(np.take(g, k, axis=axis), np.take(ref, k, axis=axis))


def test_sort_nan_last_and_negative_zero_stable():
    x = mx.array([[3.0, np.nan, -0.0, 1.0, 0.0, np.nan, -np.inf, np.inf]])
    exact(*both(lambda v: mx.argsort(v, axis=-1), x))
    exact(*both(lambda v: mx.sort(v, axis=-1), x))


@pytest.mark.parametrize("dtype", FLOATS + [mx.int32, mx.uint8, mx.int64])
@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted_matches_cpu(dtype, side):
    seq = mx.sort(mx.array(RNG.integers(0, 20, size=(50,)).astype(np.float32)).astype(dtype))
    vals = mx.array(RNG.integers(-2, 23, size=(7, 9)).astype(np.float32)).astype(dtype)
    exact(*both(lambda s, v: mx.searchsorted(s, v, side=side), seq, vals))
    if dtype in FLOATS:
        s2 = mx.array([-np.inf, -0.0, 0.0, 1.0, 1.0, np.inf, np.nan, np.nan]).astype(dtype)
        v2 = mx.array([np.nan, 0.0, -0.0, 1.0, np.inf, -np.inf, 5.0]).astype(dtype)
        exact(*both(lambda s, v: mx.searchsorted(s, v, side=side), s2, v2))
