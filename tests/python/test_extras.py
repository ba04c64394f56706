"""dtype queries, contiguous, buffer sizes, convolve, hadamard_transform, the gathered /
masked / segmented matmuls and multivariate_normal (numpy and MLX as oracles)."""

import kiln.core as mx
import numpy as np
import pytest


@pytest.mark.parametrize(
    "src, dst, want",
    [("int8", "int32", True), ("float32", "int32", False), ("uint32", "int32", False),
     ("bool_", "float16", True), ("float16", "float32", True), ("int64", "float32", True)],
)
def test_can_cast(src, dst, want):
    assert mx.can_cast(getattr(mx, src), getattr(mx, dst)) is want
    assert mx.can_cast(mx.zeros((1,), dtype=getattr(mx, src)), getattr(mx, dst)) is want


def test_can_cast_errors():
    with pytest.raises(ValueError):
        mx.can_cast(1, mx.int32)


@pytest.mark.parametrize(
    "dtype, kind, want",
    [("int8", "signed integer", True), ("bool_", "integral", False), ("bool_", "numeric", False),
     ("uint8", "integral", True), ("float16", ("bool", "float16"), True),
     ("int8", ("bool", "real floating"), False),
     ("float32", "real floating", True), ("uint16", "unsigned integer", True),
     ("int32", "complex floating", False), ("bool_", "bool", True)],
)
def test_isdtype(dtype, kind, want):
    kind = tuple(getattr(mx, k, k) if k == "float16" else k for k in kind) if isinstance(kind, tuple) else kind
    assert mx.isdtype(getattr(mx, dtype), kind) is want


def test_isdtype_errors():
    with pytest.raises(ValueError):
        mx.isdtype(mx.int8, "foo")
    with pytest.raises(ValueError):
        mx.isdtype(mx.int8, 3)
    with pytest.raises(TypeError):
        mx.isdtype(mx.array([1]), "bool")


def test_contiguous():
    x = mx.arange(6).reshape(2, 3)
    mx.eval(x)
    t = x.T
    for allow in (False, True):
        c = mx.contiguous(t, allow_col_major=allow)
        np.testing.assert_array_equal(np.array(c), np.arange(6).reshape(2, 3).T)
    c = mx.contiguous(t)
    assert np.asarray(c).flags.c_contiguous
    mx.eval(t)
    assert np.asarray(mx.contiguous(t, allow_col_major=True)).flags.f_contiguous


def test_get_array_buffer_size():
    a, b = mx.array([1.0, 2.0]), mx.zeros((100,))
    mx.eval(a, b)
    assert mx.get_array_buffer_size(a) >= 8
    assert mx.get_array_buffer_size(a, a, {"x": a, "n": 3}) == mx.get_array_buffer_size(a)
    assert mx.get_array_buffer_size(a, b) == mx.get_array_buffer_size(a) + mx.get_array_buffer_size(b)
    v = b[1:]
    mx.eval(v)
    assert mx.get_array_buffer_size(b, v) == mx.get_array_buffer_size(b)  # one shared buffer
    assert mx.get_array_buffer_size() == 0
    with pytest.raises(ValueError):
        mx.get_array_buffer_size(a + 1)


@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("n, m", [(5, 3), (3, 5), (4, 4), (1, 1), (6, 2), (2, 7)])
def test_convolve(mode, n, m):
    rng = np.random.default_rng(n * 10 + m)
    a, v = rng.normal(size=n).astype(np.float32), rng.normal(size=m).astype(np.float32)
    got = mx.convolve(mx.array(a), mx.array(v), mode=mode)
    np.testing.assert_allclose(np.array(got), np.convolve(a, v, mode=mode), rtol=1e-5, atol=1e-5)


def test_convolve_errors():
    with pytest.raises(ValueError):
        mx.convolve(mx.ones((2, 2)), mx.ones(2))
    with pytest.raises(ValueError):
        mx.convolve(mx.ones(2), mx.ones(2), mode="x")
    with pytest.raises(ValueError):
        mx.convolve(mx.ones(0), mx.ones(2))


def sylvester(n):
    h = np.ones((1, 1))
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h


@pytest.mark.parametrize("n", [1, 2, 8, 64])
@pytest.mark.parametrize("scale", [None, 0.5])
def test_hadamard_transform(n, scale):
    x = np.random.default_rng(n).normal(size=(3, n)).astype(np.float32)
    got = mx.hadamard_transform(mx.array(x), scale=scale)
    s = 1 / np.sqrt(n) if scale is None else scale
    np.testing.assert_allclose(np.array(got), (x @ sylvester(n).T) * s, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError):  # 12, 20, 28 x 2^k are supported (test_issue22_rest)
        mx.hadamard_transform(mx.ones((2, 6)))


def test_gather_mm():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(2, 2, 3)).astype(np.float32)
    b = rng.normal(size=(3, 3, 4)).astype(np.float32)
    li, ri = np.array([0, 1, 1]), np.array([2, 0, 1])
    got = mx.gather_mm(mx.array(a), mx.array(b), mx.array(li), mx.array(ri))
    np.testing.assert_allclose(np.array(got), a[li] @ b[ri], rtol=1e-5, atol=1e-5)
    got = mx.gather_mm(mx.array(a[0]), mx.array(b), None, mx.array(ri[:2]))
    np.testing.assert_allclose(np.array(got), a[0] @ b[ri[:2]], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("masks", ["out", "lhs", "lhs_float", "all"])
def test_block_masked_mm(masks):
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(64, 64)).astype(np.float32), rng.normal(size=(64, 64)).astype(np.float32)
    bm = np.array([[True, False], [False, True]])
    kw, xm, ym, om = {}, x, y, np.ones((64, 64), np.float32)
    big = lambda m: np.kron(m, np.ones((32, 32))).astype(np.float32)  # noqa: E731
    if masks in ("out", "all"):
        kw["mask_out"], om = mx.array(bm), big(bm)
    if masks in ("lhs", "all"):
        kw["mask_lhs"], xm = mx.array(bm), x * big(bm)
    if masks == "lhs_float":
        fm = np.array([[1.0, 0.5], [2.0, 1.0]], np.float32)
        kw["mask_lhs"], xm = mx.array(fm), x * big(fm)
    if masks == "all":
        kw["mask_rhs"], ym = mx.array(bm.T), y * big(bm.T)
    got = mx.block_masked_mm(mx.array(x), mx.array(y), 32, **kw)
    np.testing.assert_allclose(np.array(got), (xm @ ym) * om, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError):
        mx.block_masked_mm(mx.array(x), mx.array(y), 16)


def test_segmented_mm():
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(4, 6)).astype(np.float32), rng.normal(size=(6, 5)).astype(np.float32)
    seg = np.array([[0, 2], [2, 6], [1, 1]])
    got = mx.segmented_mm(mx.array(a), mx.array(b), mx.array(seg))
    want = np.stack([a[:, s:e] @ b[s:e] for s, e in seg])
    np.testing.assert_allclose(np.array(got), want, rtol=1e-5, atol=1e-5)


def test_matrix_norm_is_norm():
    x = mx.array([[3.0, 4.0], [0.0, 0.0]])
    assert float(mx.matrix_norm(x)) == pytest.approx(5.0)


def test_multivariate_normal_statistics():
    mean = np.array([1.0, -2.0], np.float32)
    cov = np.array([[2.0, 0.6], [0.6, 0.5]], np.float32)
    s = mx.random.multivariate_normal(mx.array(mean), mx.array(cov), shape=(4000,), key=mx.random.key(0))
    assert s.shape == (4000, 2) and s.dtype == mx.float32
    s = np.array(s)
    np.testing.assert_allclose(s.mean(0), mean, atol=0.1)
    np.testing.assert_allclose(np.cov(s.T), cov, atol=0.15)


@pytest.mark.parametrize(
    "mean, cov, shape",
    [((3,), (3, 3), ()), ((3,), (3, 3), (4, 2)), ((2, 3), (3, 3), ()), ((3,), (2, 3, 3), (2,))],
)
def test_multivariate_normal_shapes(mean, cov, shape):
    c = mx.broadcast_to(mx.eye(cov[-1]), cov)
    s = mx.random.multivariate_normal(mx.zeros(mean), c, shape=shape)
    batch = np.broadcast_shapes(mean[:-1], cov[:-2], shape)
    assert s.shape == batch + (mean[-1],)


@pytest.mark.parametrize(
    "call",
    [
        lambda: mx.random.multivariate_normal(mx.zeros(3), mx.eye(4)),
        lambda: mx.random.multivariate_normal(mx.zeros(3), mx.ones(3)),
        lambda: mx.random.multivariate_normal(mx.array(0.0), mx.eye(3)),
        lambda: mx.random.multivariate_normal(mx.zeros(3), mx.eye(3), dtype=mx.float16),
        lambda: mx.random.multivariate_normal(mx.zeros((2, 3)), mx.eye(3), shape=(5,)),
    ],
)
def test_multivariate_normal_errors(call):
    with pytest.raises(ValueError):
        call()


def test_against_mlx():
    mlx = pytest.importorskip("mlx.core")
    mean = [0.5, -1.0, 2.0]
    cov = [[2.0, 0.3, 0.1], [0.3, 1.0, -0.2], [0.1, -0.2, 0.7]]
    k = mx.random.multivariate_normal(mx.array(mean), mx.array(cov), shape=(6,), key=mx.random.key(3))
    m = mlx.random.multivariate_normal(mlx.array(mean), mlx.array(cov), shape=(6,), key=mlx.random.key(3))
    np.testing.assert_allclose(np.array(k), np.array(m), rtol=1e-4, atol=1e-4)
    x = np.random.default_rng(0).normal(size=(2, 16)).astype(np.float32)
    np.testing.assert_allclose(
        np.array(mx.hadamard_transform(mx.array(x))), np.array(mlx.hadamard_transform(mlx.array(x))),
        rtol=1e-5, atol=1e-5,
    )
    for src in ("int8", "uint32", "float16", "bool_"):
        for dst in ("int32", "float32", "int8"):
            assert mx.can_cast(getattr(mx, src), getattr(mx, dst)) == mlx.can_cast(getattr(mlx, src), getattr(mlx, dst))


@pytest.mark.parametrize(
    "values, size, fill",
    [([2, 1, 2, 3, 1], 3, None), ([2, 1, 2, 3, 1], 5, None), ([2, 1, 2, 3, 1], 2, None),
     ([2, 1, 2, 3, 1], 4, 0), ([[4, 4], [1, 9]], 3, None), ([7], 1, None), ([5, 5, 5], 2, -1)],
)
def test_unique(values, size, fill):
    a = np.array(values, dtype=np.int32)
    v, idx, inv, cnt = mx.unique(mx.array(a), size, True, True, True, fill_value=fill)
    uv, ui, uinv, uc = np.unique(a.reshape(-1), return_index=True, return_inverse=True, return_counts=True)
    k = min(size, len(uv))
    np.testing.assert_array_equal(np.array(v)[:k], uv[:k])
    np.testing.assert_array_equal(np.array(idx)[:k], ui[:k])
    np.testing.assert_array_equal(np.array(cnt)[:k], uc[:k])
    assert np.all(np.array(cnt)[k:] == 0)
    pad = uv[0] if fill is None else fill
    assert np.all(np.array(v)[k:] == pad)
    np.testing.assert_array_equal(np.array(inv), np.minimum(uinv, size - 1).reshape(a.shape))
    assert idx.dtype == mx.uint32 and inv.dtype == mx.uint32 and cnt.dtype == mx.int32


def test_unique_edges():
    np.testing.assert_array_equal(np.array(mx.unique(mx.array([3.0, np.nan, np.nan, 1.0]), 4))[:2], [1, 3])
    assert mx.unique(mx.array([1, 2]), 0).shape == (0,)
    with pytest.raises(ValueError):
        mx.unique(mx.array([1]), -1)
    with pytest.raises(ValueError):
        mx.unique(mx.array([], dtype=mx.int32), 2)
    np.testing.assert_array_equal(np.array(mx.unique(mx.array([], dtype=mx.int32), 2, fill_value=7)), [7, 7])


FP8_INPUTS = [0.0, -0.0, 1.0, 1.0625, 1.125, 1.1875, 448.0, 449.0, 464.0, 480.0, 1000.0,
              np.inf, -np.inf, np.nan, 2**-9, 2**-10, 1.5 * 2**-10, 2**-6, 2**-7, -3.3, 0.3,
              1.5 * 2**-9, 2.5 * 2**-9]
FP8_CODES = [0, 128, 56, 56, 57, 58, 126, 126, 126, 126, 126, 126, 254, 126, 1, 0, 1, 8, 4,
             197, 42, 2, 2]  # MLX's output for the inputs above


def test_fp8_known_codes():
    got = mx.to_fp8(mx.array(FP8_INPUTS))
    assert got.dtype == mx.uint8
    np.testing.assert_array_equal(np.array(got), FP8_CODES)
    codes = mx.arange(256).astype(mx.uint8)
    back = mx.to_fp8(mx.from_fp8(codes, dtype=mx.float32))
    finite = [c for c in range(256) if c & 127 != 127]
    np.testing.assert_array_equal(np.array(back)[finite], finite)
    assert mx.from_fp8(codes).dtype == mx.bfloat16
    with pytest.raises(ValueError):
        mx.to_fp8(mx.array([1, 2]))
    with pytest.raises(ValueError):
        mx.from_fp8(mx.array([1, 2]))
    with pytest.raises(ValueError):
        mx.from_fp8(codes, dtype=mx.int32)


def test_fp8_and_unique_match_mlx():
    mlx = pytest.importorskip("mlx.core")
    x = np.random.default_rng(0).normal(scale=50, size=500).astype(np.float32)
    np.testing.assert_array_equal(np.array(mx.to_fp8(mx.array(x))), np.array(mlx.to_fp8(mlx.array(x))))
    codes = np.arange(256, dtype=np.uint8)
    np.testing.assert_array_equal(
        np.array(mx.from_fp8(mx.array(codes), dtype=mx.float32)),
        np.array(mlx.from_fp8(mlx.array(codes), dtype=mlx.float32)),
    )
    a = np.array([2, 1, 2, 3, 1, 7, 7], dtype=np.int32)
    for size in (0, 2, 4, 9):
        k = mx.unique(mx.array(a), size, True, True, True)
        m = mlx.unique(mlx.array(a), size, True, True, True)
        for x_, y_ in zip(k, m):
            np.testing.assert_array_equal(np.array(x_), np.array(y_))


def test_depends():
    a, b = mx.array([1.0, np.nan]), mx.array([np.inf, np.nan])
    out = mx.depends(a, b)
    np.testing.assert_array_equal(np.array(out), [1.0, np.nan])
    assert out.dtype == a.dtype
    outs = mx.depends([a, mx.arange(3)], [b, mx.zeros((0,))])
    assert isinstance(outs, list) and np.array(outs[1]).tolist() == [0, 1, 2]
    g = mx.grad(lambda x: mx.depends(x * 2, b).sum())(mx.array([1.0, 2.0]))
    np.testing.assert_array_equal(np.array(g), [2.0, 2.0])
    with pytest.raises(TypeError):
        mx.depends(a, 3)


@pytest.mark.parametrize(
    "eq, shapes",
    [("ij,jk->ik", [(2, 3), (3, 4)]), ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
     ("abc,cd,de->abe", [(2, 3, 4), (4, 5), (5, 6)]), ("ij,ij->", [(3, 3), (3, 3)]),
     ("ab,bc,cd,de->ae", [(9, 2), (2, 7), (7, 3), (3, 8)])],
)
def test_einsum_path(eq, shapes):
    path, info = mx.einsum_path(eq, *[mx.ones(s) for s in shapes])
    assert len(path) == len(shapes) - 1 and "Complete contraction:  " + eq in info
    mlx = pytest.importorskip("mlx.core")
    assert (path, info) == mlx.einsum_path(eq, *[mlx.ones(s) for s in shapes])


@pytest.mark.parametrize("transpose", [True, False])
def test_gather_qmm(transpose):
    rng = np.random.default_rng(3)
    w = rng.normal(size=(3, 64, 64)).astype(np.float32)
    q, s, b = mx.quantize(mx.array(w))
    dense = np.array(mx.dequantize(q, s, b))
    x = rng.normal(size=(2, 4, 64)).astype(np.float32)
    li, ri = np.array([1, 0]), np.array([2, 2])
    got = mx.gather_qmm(mx.array(x), q, s, b, mx.array(li), mx.array(ri), transpose=transpose)
    wd = dense[ri].swapaxes(-1, -2) if transpose else dense[ri]
    np.testing.assert_allclose(np.array(got), x[li] @ wd, rtol=1e-4, atol=1e-4)


def test_from_dlpack_and_namespace():
    a = np.arange(6, dtype=np.int16).reshape(2, 3)
    x = mx.from_dlpack(a)
    assert x.dtype == mx.int16 and np.array(x).tolist() == a.tolist()
    assert mx.from_dlpack(np.arange(3.0)).dtype == mx.float32  # float64 -> float32, as MLX
    with pytest.raises(ValueError):
        mx.from_dlpack(a, copy=False)
    assert x.__array_namespace__() is mx
