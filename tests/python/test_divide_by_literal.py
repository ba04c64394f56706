"""Compiled division by a literal gives eager's bits. Generated code divides by a literal its
own way (kiln-codegen `divide_by_literal`): the CUDA preamble multiplies by the reciprocal and
applies Markstein's correction for float math, bfloat16 multiplies by the float reciprocal, the
C preamble divides. Divisors of many significands and magnitudes, numerators across the whole
range (subnormal, huge, +-0, +-inf, NaN). Runs on the default device (the GPU where there is
one, so both generators are checked)."""

import math

import numpy as np
import pytest

import kiln.core as mx
from conftest import bits

DIVISORS = [3.0, math.sqrt(2), 0.1, 7.0, -2.7182817, 1 / 3, 1e-5, 255.0, 6.0221e23,
            1.1754944e-19, 8.5e18, 2.0, -0.5, 1e-30, 3e30]
SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-42, 1e-38, 3.4e38, -3.3e38, 1.0,
            8.673617379884035e-19, 1.152921504606847e18]


def numerators(dname, n=4099):
    rng = np.random.default_rng(7)
    signs = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    x = np.ldexp(rng.uniform(1.0, 2.0, n), rng.integers(-149, 128, n)) * signs
    with np.errstate(over="ignore"):
        x = x.astype(np.float32)
    x[: len(SPECIALS)] = np.array(SPECIALS, dtype=np.float32)
    return mx.array(x).astype(getattr(mx, dname))


@pytest.mark.parametrize("c", DIVISORS, ids=[f"{c:.6g}" for c in DIVISORS])
@pytest.mark.parametrize("dname", ["float32", "float16", "bfloat16"])
def test_compiled_division_by_a_literal_equals_eager(dname, c):
    x = numerators(dname)

    def f(x):
        return x / c

    g = mx.compile(f)
    want = f(x)
    for _ in range(3):  # later calls run the built kernel
        got = g(x)
        mx.eval(got, want)
        np.testing.assert_array_equal(bits(got), bits(want))


def test_division_by_a_literal_inside_a_fused_chain():
    """The literal divisor in a longer chain, over a strided view (the GPU's Rows kernel)."""
    rng = np.random.default_rng(3)
    h = mx.array(rng.standard_normal((6, 64), dtype=np.float32))

    def f(h):
        g, u = h[:, :32], h[:, 32:]
        return (g / 3.0 + u) / math.sqrt(2) * (u / 0.1)

    got, want = mx.compile(f)(h), f(h)
    np.testing.assert_array_equal(bits(got), bits(want))
