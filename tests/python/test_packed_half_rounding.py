"""The premise of the packed half-precision GPU kernels (kiln-codegen cuda_packed.rs), checked on
the CPU: eager float16 / bfloat16 + - * (and / by a power of two) compute in float32 and round
to the half type, and that equals the exact result rounded once to the half type (what the GPU's
add/sub/mul.rn.{bf16x2,f16x2} instructions return), subnormals, overflow and signed zeros
included. Exact results are Python Fractions."""

import math
from fractions import Fraction

import numpy as np
import pytest

import kiln.core as mx

# (mantissa bits with the implicit one, minimum normal exponent, largest finite) per type.
FORMATS = {"bfloat16": (8, -126, (2 - 2.0**-7) * 2.0**127), "float16": (11, -14, 65504.0)}


def round_half(x: Fraction, dtype: str) -> float:
    """`x` rounded to nearest even in the half type (as a float; inf on overflow)."""
    p, emin, top = FORMATS[dtype]
    if x == 0:
        return 0.0
    sign = -1.0 if x < 0 else 1.0
    a = abs(x)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    quantum = Fraction(2) ** (max(e, emin) - (p - 1))
    q, r = divmod(a, quantum)
    half = quantum / 2
    if r > half or (r == half and q % 2 == 1):
        q += 1
    v = q * quantum
    if v > Fraction(top):
        return sign * math.inf
    return sign * float(v)


def values(dtype, rng, n):
    """Random half values over the whole exponent range, subnormals and specials included."""
    p, emin, top = FORMATS[dtype]
    bits = rng.integers(0, 1 << 16, size=n, dtype=np.uint32).astype(np.uint16)
    if dtype == "float16":
        x = bits.view(np.float16).astype(np.float32)
    else:
        x = (bits.astype(np.uint32) << 16).view(np.float32)
    sub = 2.0 ** (emin - p + 1)
    x[:12] = [0.0, -0.0, sub, -sub, 2.0**emin, top, -top, 1.0, 3 * sub, 2.0**emin - sub, 0.5, -2.0]
    return x[np.isfinite(x)]


OPS = {"add": lambda a, b: a + b, "subtract": lambda a, b: a - b, "multiply": lambda a, b: a * b}


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("dtype", list(FORMATS))
def test_eager_half_arithmetic_is_correctly_rounded(dtype, op):
    rng = np.random.default_rng(11)
    a = values(dtype, rng, 3000)
    b = rng.permutation(values(dtype, rng, 3000))[: len(a)]
    a = a[: len(b)]
    dt = getattr(mx, dtype)
    f = OPS[op]
    with mx.stream(mx.cpu):
        got = np.array(f(mx.array(a).astype(dt), mx.array(b).astype(dt)).astype(mx.float32))
    want = np.array([round_half(f(Fraction(float(x)), Fraction(float(y))), dtype)
                     for x, y in zip(a, b)], np.float32)
    # Zeros take the sign of the IEEE result (exact zero sums are +0 unless both are -0;
    # underflowing products keep the product's sign): float64 gets both right here.
    f64 = f(a.astype(np.float64), b.astype(np.float64))
    want = np.where(want == 0, np.copysign(np.float32(0), f64), want).astype(np.float32)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("dtype", list(FORMATS))
@pytest.mark.parametrize("k", [1, 2, -1, 10, -3])
def test_divide_by_a_power_of_two_is_multiply_by_its_reciprocal(dtype, k):
    rng = np.random.default_rng(k + 5)
    a = values(dtype, rng, 3000)
    dt = getattr(mx, dtype)
    with mx.stream(mx.cpu):
        x = mx.array(a).astype(dt)
        q = np.array((x / (2.0**k)).astype(mx.float32))
        m = np.array((x * (2.0**-k)).astype(mx.float32))
    np.testing.assert_array_equal(q, m)
    np.testing.assert_array_equal(np.signbit(q), np.signbit(m))
