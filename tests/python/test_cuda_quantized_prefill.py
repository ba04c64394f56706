"""kiln-cuda's many-row `quantized_matmul` (a prompt's prefill: 16 rows or more): the packed
weights dequantized block by block, each weight rounded as `dequantize` rounds it, then
cuBLAS. Against the dequantize-then-matmul definition in float64 for every affine width,
group size and float dtype; batched x, NaN and inf, a realistic 4096-wide bf16 product, and
the block walk with blocks much smaller than the matrix (several blocks, a ragged last one).

Skipped (with the reason) where no GPU is available."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kiln
import kiln.core as mx
from conftest import GPU_ONLY

pytestmark = GPU_ONLY

RNG = np.random.default_rng(77)
TOL = {"float32": 2e-5, "float16": 4e-3, "bfloat16": 3e-2}


def arr(shape, dtype):
    return mx.array(RNG.normal(size=shape).astype(np.float32)).astype(getattr(mx, dtype))


def reference(x, wq, s, b, group_size, bits):
    dense = np.array(mx.dequantize(wq, s, b, group_size, bits).astype(mx.float32), np.float64)
    return np.array(x.astype(mx.float32), np.float64) @ dense.T


def check(out, want, dtype):
    scale = np.abs(want[np.isfinite(want)]).max() + 1
    got = np.array(out.astype(mx.float32), np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], atol=TOL[dtype] * scale)


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 6, 8])
@pytest.mark.parametrize("group_size", [32, 64, 128])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_many_rows_match_the_definition(bits, group_size, dtype):
    n, k = 72, 256
    wq, s, b = mx.quantize(arr((n, k), dtype), group_size, bits)
    for lead in [(12,), (16,), (100,), (2, 40)]:  # 12: the gathered kernel, the rest blocks
        x = arr(lead + (k,), dtype)
        out = mx.quantized_matmul(x, wq, s, b, True, group_size, bits)
        assert out.shape == lead + (n,) and out.dtype == x.dtype
        check(out, reference(x, wq, s, b, group_size, bits), dtype)


def test_special_values_and_a_wide_bf16_product():
    wq, s, b = mx.quantize(arr((1000, 4096), "bfloat16"), 64, 4)
    x = RNG.normal(size=(64, 4096)).astype(np.float32)
    x[3, 17] = np.nan
    x[9, 100] = np.inf
    xb = mx.array(x).astype(mx.bfloat16)
    check(mx.quantized_matmul(xb, wq, s, b, True, 64, 4), reference(xb, wq, s, b, 64, 4),
          "bfloat16")


BLOCK_WALK = """
import numpy as np, kiln.core as mx
rng = np.random.default_rng(5)
for bits, dtype in [(4, mx.bfloat16), (3, mx.float32), (8, mx.float16)]:
    w = mx.array(rng.normal(size=(300, 128)).astype(np.float32)).astype(dtype)
    wq, s, b = mx.quantize(w, 32, bits)
    x = mx.array(rng.normal(size=(40, 128)).astype(np.float32)).astype(dtype)
    got = np.array(mx.quantized_matmul(x, wq, s, b, True, 32, bits).astype(mx.float32))
    dense = np.array(mx.dequantize(wq, s, b, 32, bits).astype(mx.float32), np.float64)
    want = np.array(x.astype(mx.float32), np.float64) @ dense.T
    tol = 2e-5 if dtype == mx.float32 else 3e-2
    np.testing.assert_allclose(got, want, atol=tol * (np.abs(want).max() + 1))
print("ok")
"""


def test_blocks_much_smaller_than_the_matrix():
    env = dict(os.environ, KILN_CUDA_DEQUANT_BLOCK=str(7 * 128 * 4))  # 7 float32 features
    home = str(Path(kiln.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in [home, env.get("PYTHONPATH", "")] if p)
    r = subprocess.run([sys.executable, "-c", BLOCK_WALK], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr


def test_a_prefill_product_is_one_fused_op():
    """No dequantize composition (six elementwise passes over the weights) runs: the GPU
    records the fused op at any row count."""
    import kiln.profiler

    wq, s, b = mx.quantize(arr((64, 256), "bfloat16"), 64, 4)
    x = arr((64, 256), "bfloat16")
    mx.eval(x, wq, s, b)
    with kiln.profiler.profile() as prof:
        mx.eval(mx.quantized_matmul(x, wq, s, b, True, 64, 4))
    names = [e.name for e in prof.events() if e.kind == "kernel"]
    assert names == ["quantized_matmul"], names


@pytest.mark.parametrize("bits", [3, 4, 8])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_weights_round_as_dequantize_rounds_them(bits, dtype):
    """x the identity: each output column is one dequantized weight row, bit for bit as the
    CPU's `dequantize` (products with 1 and sums of zeros are exact in cuBLAS's float32
    accumulation), so the kernel's roundings of the product and the sum show exactly.
    Weight rows from 1e-6 (float16 subnormals) to 1e3 in magnitude."""
    n, k, group = 48, 128, 32
    w = RNG.normal(size=(n, k)).astype(np.float32)
    w *= (10.0 ** RNG.integers(-6, 4, size=(n, 1))).astype(np.float32)
    wd = mx.array(w).astype(getattr(mx, dtype))
    with mx.stream(mx.cpu):
        wq, s, b = mx.quantize(wd, group, bits)
        want = np.array(mx.dequantize(wq, s, b, group, bits).astype(mx.float32))
    eye = mx.array(np.eye(k, dtype=np.float32)).astype(getattr(mx, dtype))
    got = np.array(mx.quantized_matmul(eye, wq, s, b, True, group, bits).astype(mx.float32)).T
    np.testing.assert_array_equal(got, want)
