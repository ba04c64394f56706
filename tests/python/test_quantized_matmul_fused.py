"""quantized_matmul's fused CPU kernel (a few rows of x against 2-d packed weights, read in
place; more rows against dequantized panels of them): values against the dequantize-then-matmul definition (in float64) and against MLX,
for every affine width, group size and float dtype; gradients, jvp, vmap and compile
through it (its transforms are the composition's)."""

import numpy as np
import pytest

import kiln.core as mx

RNG = np.random.default_rng(24)
TOL = {"float32": 2e-5, "float16": 4e-3, "bfloat16": 3e-2}


def quantized(n, k, group_size, bits, dtype):
    w = mx.array(RNG.normal(size=(n, k)).astype(np.float32)).astype(getattr(mx, dtype))
    return mx.quantize(w, group_size, bits)


def reference(x, wq, s, b, group_size, bits):
    dense = np.array(mx.dequantize(wq, s, b, group_size, bits).astype(mx.float32), np.float64)
    return np.array(x.astype(mx.float32), np.float64) @ dense.T


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 6, 8])
@pytest.mark.parametrize("group_size", [32, 64, 128])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_matches_definition(bits, group_size, dtype):
    n, k = 48, 256
    wq, s, b = quantized(n, k, group_size, bits, dtype)
    for lead in [(1,), (3,), (2, 5), (4, 7)]:  # the last one (28 rows) takes dense panels
        x = mx.array(RNG.normal(size=lead + (k,)).astype(np.float32)).astype(getattr(mx, dtype))
        out = mx.quantized_matmul(x, wq, s, b, True, group_size, bits)
        assert out.shape == lead + (n,) and out.dtype == x.dtype
        want = reference(x, wq, s, b, group_size, bits)
        scale = np.abs(want).max() + 1
        np.testing.assert_allclose(np.array(out.astype(mx.float32)), want, atol=TOL[dtype] * scale)


def test_special_values_and_mixed_dtypes():
    wq, s, b = quantized(16, 64, 32, 4, "float32")
    x = RNG.normal(size=(2, 64)).astype(np.float32)
    x[0, 5] = np.nan
    x[1, 7] = np.inf
    out = np.array(mx.quantized_matmul(mx.array(x), wq, s, b, True, 32, 4))
    want = reference(mx.array(x), wq, s, b, 32, 4)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(out[finite], want[finite], rtol=1e-4)
    # float16 activations against float32 scales promote to float32, as the definition does.
    out = mx.quantized_matmul(mx.array(x[1:]).astype(mx.float16), wq, s, b, True, 32, 4)
    assert out.dtype == mx.float32


def test_matches_mlx():
    mlx = pytest.importorskip("mlx.core")
    w = RNG.normal(size=(64, 512)).astype(np.float32)
    for bits, rows in [(3, 1), (4, 1), (8, 1), (4, 40), (8, 40)]:  # 40 rows: dense panels
        x = RNG.normal(size=(rows, 512)).astype(np.float32)
        for dtype in ["float32", "bfloat16"]:
            got, want = (
                np.array(
                    m.quantized_matmul(
                        m.array(x).astype(getattr(m, dtype)),
                        *m.quantize(m.array(w).astype(getattr(m, dtype)), 64, bits),
                        True,
                        64,
                        bits,
                    ).astype(m.float32)
                )
                for m in (mx, mlx)
            )
            if dtype == "float32":
                np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
            else:
                # MLX's bfloat16 product accumulates in bfloat16; kiln's in float32: kiln is
                # at least as close to the float64 definition.
                xq = mx.array(x).astype(mx.bfloat16)
                wq, s, b = mx.quantize(mx.array(w).astype(mx.bfloat16), 64, bits)
                exact = reference(xq, wq, s, b, 64, bits)
                assert np.abs(got - exact).max() <= np.abs(want - exact).max() + 1e-2


def test_transforms_follow_the_definition():
    wq, s, b = quantized(24, 128, 64, 4, "float32")
    x = mx.array(RNG.normal(size=(2, 128)).astype(np.float32))
    dense = mx.dequantize(wq, s, b, 64, 4)

    def fused(x, s, b):
        return mx.quantized_matmul(x, wq, s, b, True, 64, 4).sum()

    def composed(x, s, b):
        return (x @ mx.dequantize(wq, s, b, 64, 4).T).sum()

    for got, want in zip(mx.grad(fused, argnums=(0, 1, 2))(x, s, b),
                         mx.grad(composed, argnums=(0, 1, 2))(x, s, b)):
        np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-4, atol=1e-4)
    t = mx.array(RNG.normal(size=(2, 128)).astype(np.float32))
    _, (jt,) = mx.jvp(lambda x: mx.quantized_matmul(x, wq, s, b, True, 64, 4), [x], [t])
    np.testing.assert_allclose(np.array(jt), np.array(t) @ np.array(dense).T, rtol=1e-4, atol=1e-4)
    xs = mx.array(RNG.normal(size=(5, 1, 128)).astype(np.float32))
    v = mx.vmap(lambda x: mx.quantized_matmul(x, wq, s, b, True, 64, 4))(xs)
    np.testing.assert_allclose(np.array(v), np.array(xs) @ np.array(dense).T, rtol=1e-4, atol=1e-4)
    # Batched weights (vmap over the quantized tensors themselves).
    stacked = [mx.stack([a, a]) for a in (wq, s, b)]
    v = mx.vmap(lambda w, s, b: mx.quantized_matmul(x, w, s, b, True, 64, 4))(*stacked)
    np.testing.assert_allclose(np.array(v[1]), np.array(x) @ np.array(dense).T, rtol=1e-4, atol=1e-4)
    f = mx.compile(lambda x: mx.quantized_matmul(x * 2, wq, s, b, True, 64, 4) + 1)
    np.testing.assert_allclose(np.array(f(x)), 2 * np.array(x) @ np.array(dense).T + 1,
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("with_lhs", [False, True])
def test_gather_qmm_few_picks_dequantizes_only_the_picked(with_lhs):
    # A mixture of experts' decode step: fewer picks than experts take the gathered path;
    # it equals dequantize-everything-then-gather_mm.
    e, n, k = 8, 32, 128
    wq, s, b = quantized(e * n, k, 64, 4, "float32")
    wq, s, b = (a.reshape(e, n, -1) for a in (wq, s, b))
    rhs = mx.array(np.array([[[1, 5]], [[0, 7]], [[3, 3]]], dtype=np.uint32))
    if with_lhs:
        x = mx.array(RNG.normal(size=(3, 1, k)).astype(np.float32))
        lhs = mx.array(np.array([[[0, 0]], [[1, 1]], [[2, 2]]], dtype=np.uint32))
    else:
        x = mx.array(RNG.normal(size=(3, 1, 1, k)).astype(np.float32))
        lhs = None
    got = mx.gather_qmm(x, wq, s, b, lhs_indices=lhs, rhs_indices=rhs, transpose=True,
                        group_size=64, bits=4)
    dense = mx.swapaxes(mx.dequantize(wq, s, b, 64, 4), -1, -2)
    want = mx.gather_mm(x, dense, lhs, rhs)
    assert got.shape == want.shape
    np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-5, atol=1e-5)
