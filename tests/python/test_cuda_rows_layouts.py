"""Elementwise GPU kernels over layouts whose rows are contiguous but not the whole array
(kiln-codegen's `Rows` variant: matrix slices, row and column broadcasts, outer transposes),
eager and compiled, in every float dtype and some integer ones, against the CPU bit for bit
(arithmetic) or numpy within tolerance (math functions). Rows that are not a multiple of the
vector, or start off it, take the element-wise kernel: both must agree. Skipped without a
GPU; run on the GPU machine with `python -m pytest tests/python/test_cuda_rows_layouts.py`."""

import numpy as np
import pytest

import kiln.core as mx
from conftest import GPU_ONLY, bits

pytestmark = GPU_ONLY  # the gpu mark, and skipped where no GPU is available

DTYPES = ["float32", "bfloat16", "float16", "int32", "complex64"]


def make(shape, dname, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32) * 3
    if x.size:
        x.flat[:: max(1, x.size // 5)] = np.float32(np.nan) if dname != "int32" else 7
    if dname == "complex64":
        y = rng.standard_normal(shape).astype(np.float32)
        return mx.array((x + 1j * y).astype(np.complex64))
    if dname == "int32":
        return mx.array(np.nan_to_num(x).astype(np.int32))
    return mx.array(x).astype(getattr(mx, dname))


# name -> (function of the parent arrays, parent shapes). Each picks a layout from its
# parents: slices, broadcasts and transposes with contiguous (or unaligned) rows.
LAYOUTS = {
    "halves": (lambda h: h[:, :16] * h[:, 16:] + 1, [(5, 32)]),
    "halves_odd_start": (lambda h: h[:, 1:17] - h[:, 17:33], [(5, 34)]),
    "halves_short_rows": (lambda h: h[:, :6] * h[:, 6:], [(5, 12)]),
    "row_broadcast": (lambda x, b: x + b, [(7, 24), (24,)]),
    "column_broadcast": (lambda x, c: x * c, [(7, 24), (7, 1)]),
    "both_broadcast": (lambda c, b: c - b, [(9, 1), (16,)]),
    "outer_transpose": (lambda x, y: x.transpose(1, 0, 2) + y, [(3, 4, 16), (4, 3, 16)]),
    "sliced_3d": (lambda x: x[:, 1:3, :8] * 2, [(4, 5, 16)]),
    "reversed_rows": (lambda x: x[::-1, :] + x, [(6, 16)]),
    "empty_rows": (lambda x, b: x + b, [(0, 16), (16,)]),
}


def run(fn, xs, device, compiled):
    with mx.stream(device):
        f = mx.compile(fn) if compiled else fn
        out = f(*xs)
        mx.eval(out)
    return out


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dname", DTYPES)
def test_rows_layouts_equal_the_cpu(dname, layout, compiled):
    fn, shapes = LAYOUTS[layout]
    xs = [make(s, dname, seed=k + 3) for k, s in enumerate(shapes)]
    gpu = run(fn, xs, mx.gpu, compiled)
    cpu = run(fn, xs, mx.cpu, False)
    assert gpu.shape == cpu.shape and gpu.dtype == cpu.dtype
    np.testing.assert_array_equal(bits(gpu), bits(cpu))


# Fused math over sliced inputs: the MLP block's SiLU-gated multiply, and a bias GELU.
def silu_gate(h):
    f = h.shape[-1] // 2
    g, u = h[:, :f], h[:, f:]
    return g * mx.sigmoid(g) * u


def bias_gelu(x, b):
    y = x + b
    return y * (1 + mx.erf(y / 1.4142135623730951)) / 2


TOL = {"float32": 2e-6, "bfloat16": 1e-2, "float16": 2e-3}


@pytest.mark.parametrize("shape", [(3, 64), (17, 48), (2, 3, 80)])
@pytest.mark.parametrize("dname", ["float32", "bfloat16", "float16"])
def test_fused_math_over_rows(dname, shape):
    rng = np.random.default_rng(len(shape) + shape[-1])
    h = rng.standard_normal(shape).astype(np.float32)
    b = rng.standard_normal(shape[-1] // 2).astype(np.float32)
    dt = getattr(mx, dname)
    hx, bx = mx.array(h).astype(dt), mx.array(b).astype(dt)
    flat = hx.reshape(-1, shape[-1])
    for fn, args in ((silu_gate, [flat]), (bias_gelu, [flat[:, : shape[-1] // 2], bx])):
        gpu = run(fn, args, mx.gpu, True)
        eager = run(fn, args, mx.gpu, False)
        cpu = run(fn, args, mx.cpu, False)
        np.testing.assert_array_equal(bits(gpu), bits(eager))
        want = np.array(cpu.astype(mx.float32))
        np.testing.assert_allclose(np.array(gpu.astype(mx.float32)), want, rtol=TOL[dname],
                                   atol=TOL[dname])
