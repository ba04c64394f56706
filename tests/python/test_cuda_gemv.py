"""kiln-cuda's few-row products (`gemv`: a decode step's projections, weights read once):
`quantized_matmul` with 1 to 8 rows for every affine width and group size, and dense
`x @ W.T` with 1 to 8 rows, against the dequantize-then-matmul definition in float64 and the
CPU; odd feature counts, long rows, batched x against a broadcast weight, layouts the kernel
declines (cuBLAS or the general kernel take them), NaN and inf.

Skipped (with the reason) where no GPU is available."""

import numpy as np
import pytest

import kiln.core as mx
from conftest import GPU_ONLY

pytestmark = GPU_ONLY  # the gpu mark, and skipped where no GPU is available

RNG = np.random.default_rng(31)
TOL = {"float32": 2e-5, "float16": 4e-3, "bfloat16": 3e-2}


def arr(shape, dtype):
    return mx.array(RNG.normal(size=shape).astype(np.float32)).astype(getattr(mx, dtype))


def f64(a):
    return np.array(a.astype(mx.float32), np.float64)


def check(out, want, dtype):
    scale = np.abs(want).max() + 1
    np.testing.assert_allclose(f64(out), want, atol=TOL[dtype] * scale)


@pytest.mark.parametrize("bits", [1, 2, 3, 4, 5, 6, 8])
@pytest.mark.parametrize("group_size", [32, 64, 128])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_quantized_rows_1_to_8(bits, group_size, dtype):
    with mx.stream(mx.gpu):
        for n, k in [(37, 384), (1030, 2048)]:
            wq, s, b = mx.quantize(arr((n, k), dtype), group_size, bits)
            dense = f64(mx.dequantize(wq, s, b, group_size, bits))
            for lead in [(1,), (1, 1, 2), (3,), (8,), (2, 4)]:
                x = arr(lead + (k,), dtype)
                out = mx.quantized_matmul(x, wq, s, b, True, group_size, bits)
                assert out.shape == lead + (n,) and out.dtype == x.dtype
                check(out, f64(x) @ dense.T, dtype)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_quantized_long_rows_and_special_values(dtype):
    with mx.stream(mx.gpu):
        n, k = 64, 14336
        wq, s, b = mx.quantize(arr((n, k), dtype), 64, 4)
        dense = f64(mx.dequantize(wq, s, b, 64, 4))
        x = RNG.normal(size=(2, k)).astype(np.float32)
        x[0, 5] = np.nan
        x[1, 7000] = np.inf
        xa = mx.array(x).astype(getattr(mx, dtype))
        out = f64(mx.quantized_matmul(xa, wq, s, b, True, 64, 4))
        want = f64(xa) @ dense.T
        np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
        assert np.isnan(out[0]).all()
        # A misaligned x (a view one element in) takes the general kernel: same values.
        xv = arr((1, k + 1), dtype)[:, 1:]
        check(mx.quantized_matmul(xv, wq, s, b, True, 64, 4), f64(xv) @ dense.T, dtype)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_dense_few_rows_against_transposed_weights(dtype):
    with mx.stream(mx.gpu):
        for n, k in [(5, 64), (1027, 4096), (4096, 1000)]:
            w = arr((n, k), dtype)
            for lead in [(1,), (1, 1), (1, 3), (8,), (2, 1, 4)]:
                x = arr(lead + (k,), dtype)
                out = x @ w.T
                assert out.shape == lead + (n,)
                want = f64(x) @ f64(w).T
                check(out, want, dtype)
                with mx.stream(mx.cpu):
                    cpu = f64(x @ w.T)
                np.testing.assert_allclose(f64(out), cpu, atol=TOL[dtype] * (np.abs(want).max() + 1))
        # Layouts the kernel declines: a row-major weight, a strided x, nine rows, a
        # weight view with a row stride that is not 16-byte aligned.
        w = arr((256, 96), dtype)
        for x, b in [
            (arr((1, 256), dtype), arr((256, 96), dtype)),
            (arr((1, 512), dtype)[:, ::2], w),
            (arr((9, 256), dtype), w),
            (arr((1, 95), dtype), arr((96, 97), dtype)[:, :95].T),
        ]:
            check(x @ b, f64(x) @ f64(b), dtype)


def test_dense_special_values_and_inside_compile():
    with mx.stream(mx.gpu):
        w = arr((300, 512), "bfloat16")
        x = RNG.normal(size=(1, 512)).astype(np.float32)
        x[0, 3] = np.inf
        xa = mx.array(x).astype(mx.bfloat16)
        out = f64(xa @ w.T)
        want = f64(xa) @ f64(w).T
        np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
        np.testing.assert_array_equal(np.isinf(out), np.isinf(want))
        f = mx.compile(lambda x, w: mx.maximum(x @ w.T, 0))
        x = arr((1, 512), "bfloat16")
        got = f64(f(x, w))
        check(mx.array(got), np.maximum(f64(x) @ f64(w).T, 0), "bfloat16")
