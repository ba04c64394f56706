"""kiln-cuda's 4-bit decode products, the tensor-core one (`qmv_mma.rs`, the default) and the
CUDA-core one (`gemv.rs`, with `KILN_QMV_MMA=0`, read once per process, so the products run
in a child process): bfloat16 and float16 x of 1 to 8
rows, groups 32/64/128, odd feature counts, NaN and inf (a group with an inf in x, or whose
factored sums overflow, is summed weight by weight, as dequantize defines it), against the
float64 dequantized product."""

import os
import subprocess
import sys
import textwrap

import pytest
from conftest import GPU_ONLY

pytestmark = GPU_ONLY

CHILD = textwrap.dedent(
    """
    import numpy as np
    import kiln.core as mx
    rng = np.random.default_rng(3)
    def f64(a):
        return np.array(a.astype(mx.float32), np.float64)
    with mx.stream(mx.gpu):
        for dtype, tol in [(mx.bfloat16, 3e-2), (mx.float16, 4e-3)]:
            for group in [32, 64, 128]:
                for n, k in [(37, 384), (1030, 2048), (8, 4096)]:
                    w = mx.array(rng.normal(size=(n, k)).astype(np.float32)).astype(dtype)
                    wq, s, b = mx.quantize(w, group, 4)
                    dense = f64(mx.dequantize(wq, s, b, group, 4))
                    for rows in [1, 3, 8]:
                        x = rng.normal(size=(rows, k)).astype(np.float32)
                        if rows == 3:
                            x[1, 5] = np.inf
                            x[2, k - 1] = np.nan
                            if dtype == mx.bfloat16:
                                x[0] *= 1e35  # the factored sums overflow: exact groups
                        xa = mx.array(x).astype(dtype)
                        out = f64(mx.quantized_matmul(xa, wq, s, b, True, group, 4))
                        want = f64(xa) @ dense.T
                        np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
                        np.testing.assert_array_equal(np.isinf(out), np.isinf(want))
                        for o, wr in zip(out, want):  # each row at its own scale
                            fin = np.isfinite(wr)
                            scale = np.abs(wr[fin]).max(initial=0.0) + 1
                            np.testing.assert_allclose(o[fin], wr[fin], atol=tol * scale)
    print("ok")
    """
)


@pytest.mark.parametrize("mma", ["1", "0"], ids=["tensor_cores", "cuda_cores"])
def test_decode_products_match_the_definition(mma):
    env = dict(os.environ, KILN_QMV_MMA=mma)
    r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]
