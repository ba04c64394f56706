"""Packed half-precision GPU kernels (kiln-codegen cuda_packed.rs): float16 / bfloat16 programs
computed two elements at a time must give eager's bits exactly (every node rounded to its
dtype), so compiled on mx.gpu == eager on mx.gpu == the per-element kernels
(KILN_CUDA_PACKED=0, run in a subprocess) bit for bit, NaN payloads aside; pure arithmetic
also equals the CPU bit for bit. Skipped without a GPU; run on the GPU machine with
`python -m pytest tests/python/test_cuda_packed_half.py`."""

import math
import os
import subprocess
import sys

import numpy as np
import pytest

import kiln.core as mx
from conftest import GPU_ONLY, bits

pytestmark = GPU_ONLY  # the gpu mark, and skipped where no GPU is available

DTYPES = {"bfloat16": mx.bfloat16, "float16": mx.float16}
# Element counts: below one vector, one vector, odd tails, several blocks.
SIZES = [1, 7, 8, 9, 1023, 4101]


def adam(p, g, m, v, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
    m2 = b1 * m + (1 - b1) * g
    v2 = b2 * v + (1 - b2) * g * g
    return p - lr * m2 / (mx.sqrt(v2) + eps), m2, v2


def other(dt):
    return mx.float16 if dt == mx.bfloat16 else mx.bfloat16


# name -> (number of inputs, function, arithmetic only: equal to the CPU bit for bit)
PROGRAMS = {
    "gelu_erf": (1, lambda x: x * (1 + mx.erf(x / math.sqrt(2))) / 2, False),
    "gelu_tanh": (1, lambda x: 0.5 * x * (1 + mx.tanh(0.7978845608 * (x + 0.044715 * x * x * x))), False),
    "silu_mul": (2, lambda g, u: g * mx.sigmoid(g) * u, False),
    "relu_chain": (3, lambda x, y, z: mx.maximum(x * y + z, 0) * 0.5 + x, True),
    "adam": (4, adam, True),
    "chain": (2, lambda x, y: ((x + y) * 3 - x * 0.25) * -y + 1.5, True),
    "neg_abs": (2, lambda x, y: -mx.abs(x - y) + -x, True),
    "div_pow2": (1, lambda x: (x / 4, x / -0.5, x / 2.0**-10, x / 3), True),
    "where_cmp": (2, lambda x, y: mx.where(x < y, mx.maximum(x, y), mx.minimum(x, -y)), True),
    "where_eq": (2, lambda x, y: (mx.where(x == y, x, y * 2), x >= y, mx.maximum(y, x)), True),
    "relu": (1, lambda x: mx.maximum(x, 0) + mx.minimum(0, x), True),
    # Picks against a literal: ptxas once made the bfloat16 high half of these a float
    # min / max whose canonical NaN (0x7fffffff) turned the low half NaN too.
    "pick_literal": (1, lambda x: (mx.minimum(0, x), mx.maximum(8, x), mx.minimum(8, x),
                                   mx.where(mx.logical_not(x > 0), x, 0)), True),
    "mixed_f32": (2, lambda x, y: ((x.astype(mx.float32) * 1.1 + y.astype(mx.float32)).astype(x.dtype) * x,
                                   x.astype(mx.float32) - y), True),
    "mixed_int": (2, lambda x, y: (x * 4).astype(mx.int32).astype(x.dtype) + y, True),
    "other_half": (1, lambda x: x.astype(other(x.dtype)).astype(x.dtype) * x, True),
    "exp_div": (2, lambda x, y: mx.exp(x) / (y * y + 1) - x, False),
    "add_zero": (1, lambda x: x + 0, True),
}


def apply(op, a, b, lit):
    """One step of a random program."""
    if op in ("add", "sub", "mul", "max", "min"):
        return {"add": mx.add, "sub": mx.subtract, "mul": mx.multiply, "max": mx.maximum,
                "min": mx.minimum}[op](a, b)
    if op == "div2":
        return a / 4
    if op == "neg":
        return -a
    if op == "abs":
        return mx.abs(a)
    if op == "where":
        return mx.where(a > b, a, b * lit)
    if op == "f32":
        return (a.astype(mx.float32) * lit).astype(a.dtype)
    if op == "lit":
        return a * lit - lit
    if op == "exp":
        return mx.exp(mx.minimum(a, 8))
    if op == "tanh":
        return mx.tanh(a)
    return a / (mx.abs(b) + 1)


def random_program(seed):
    """A random chain over two inputs: the packed ops (+ - * /2^k, negate, abs, max, min,
    where with a comparison), literals (-0.0 and 1e-3 included), float32 detours and, in
    some, transcendental ops computed per pair in float. Returns (function, arithmetic only)."""
    rng = np.random.default_rng(seed)
    transcendental = seed % 3 == 0
    ops = ["add", "sub", "mul", "div2", "neg", "abs", "max", "min", "where", "f32", "lit"]
    if transcendental:
        ops += ["exp", "tanh", "div"]
    plan = []
    for _ in range(int(rng.integers(4, 10))):
        plan.append((str(rng.choice(ops)), int(rng.integers(0, 1 << 30)), int(rng.integers(0, 1 << 30)),
                     float(rng.choice([0.5, 3.0, -2.0, 1e-3, -0.0, 0.0, 1.5]))))

    def f(x, y):
        vals = [x, y]
        for op, i, j, lit in plan:
            vals.append(apply(op, vals[i % len(vals)], vals[j % len(vals)], lit))
        return vals[-1], vals[-2]

    return f, not transcendental


for _k in range(9):
    _f, _arith = random_program(100 + _k)
    PROGRAMS[f"random_{_k}"] = (2, _f, _arith)

def specials(dt):
    """NaN, infinities, signed zeros, subnormals, the largest values and ones whose products
    overflow or underflow, as float32 (exact in `dt`)."""
    if dt == mx.bfloat16:
        tiny, sub, big = 2.0**-126, 2.0**-133, 3.3e38
    else:
        tiny, sub, big = 2.0**-14, 2.0**-24, 65504.0
    return np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, sub, -sub, 3 * sub, tiny, -tiny, tiny * 1.5,
                     big, -big, big / 3, 1.0, -1.0, 0.5, 2.0, 1e-3, 256.0, 3.0, -3.0], np.float32)


def inputs(name, dt, n, seed):
    rng = np.random.default_rng(seed)
    nin = PROGRAMS[name][0]
    sp = specials(dt)
    xs = []
    for _ in range(nin):
        x = rng.standard_normal(n).astype(np.float32) * np.float32(rng.choice([1.0, 4.0, 100.0]))
        k = min(n, len(sp))
        pos = rng.choice(n, size=k, replace=False)
        x[pos] = rng.permutation(sp)[:k]
        xs.append(mx.array(x).astype(dt))
    return xs


def as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


def cases():
    for dname in DTYPES:
        for name in PROGRAMS:
            for n in SIZES:
                yield dname, name, n


def compiled_bits(dname, name, n):
    dt = DTYPES[dname]
    nin, f, _ = PROGRAMS[name]
    xs = inputs(name, dt, n, seed=n * 31 + nin)
    with mx.stream(mx.gpu):
        outs = as_tuple(mx.compile(f)(*xs))
        mx.eval(*outs)
    return [bits(o) for o in outs]


def run_all():
    """Every case's compiled outputs as bits (the subprocess writes them for the comparison)."""
    out = {}
    for dname, name, n in cases():
        for k, b in enumerate(compiled_bits(dname, name, n)):
            out[f"{dname}-{name}-{n}-{k}"] = b
    return out


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("name", list(PROGRAMS))
@pytest.mark.parametrize("dname", list(DTYPES))
def test_compiled_equals_eager_bit_for_bit(dname, name, n):
    dt = DTYPES[dname]
    nin, f, arithmetic = PROGRAMS[name]
    xs = inputs(name, dt, n, seed=n * 31 + nin)
    with mx.stream(mx.gpu):
        compiled = as_tuple(mx.compile(f)(*xs))
        eager = as_tuple(f(*xs))
        mx.eval(*compiled, *eager)
    for c, e in zip(compiled, eager):
        assert c.dtype == e.dtype and c.shape == e.shape
        np.testing.assert_array_equal(bits(c), bits(e))
    if arithmetic:
        with mx.stream(mx.cpu):
            cpu = as_tuple(f(*xs))
            mx.eval(*cpu)
        for c, e in zip(compiled, cpu):
            np.testing.assert_array_equal(bits(c), bits(e))


@pytest.mark.parametrize("dname", list(DTYPES))
def test_views_and_broadcast_scalars(dname):
    """Broadcast scalars (read packed once), strided views and 2-D shapes give eager's bits."""
    dt = DTYPES[dname]
    x = inputs("chain", dt, 4101, seed=3)[0]
    s = mx.array(np.float32(0.3)).astype(dt)
    grid = x[: 64 * 64].reshape(64, 64)
    f = lambda a, b: (a * b + a) * -3 - b
    for a, b in [(x, s), (grid.T, grid), (x[::-1], x), (x[1:], s)]:
        with mx.stream(mx.gpu):
            c, e = mx.compile(f)(a, b), f(a, b)
            mx.eval(c, e)
        with mx.stream(mx.cpu):
            h = f(a, b)
            mx.eval(h)
        np.testing.assert_array_equal(bits(c), bits(e))
        np.testing.assert_array_equal(bits(c), bits(h))


BIT_OPS = {
    "relu": lambda x, y: mx.maximum(x, 0.0),
    "maximum": mx.maximum,
    "minimum": mx.minimum,
    "negative_abs": lambda x, y: (-x, mx.abs(y)),
    "add": mx.add,
    "subtract": mx.subtract,
    "multiply": mx.multiply,
    "divide_pow2": lambda x, y: (x / 4, y / -0.5),
    "where": lambda x, y: mx.where(x < y, x, y),
    # The shuffled operand puts NaN high halves beside numbers (see PROGRAMS "pick_literal").
    "pick_literal": lambda x, y: (mx.minimum(0.0, y), mx.maximum(8.0, y),
                                  mx.where(mx.logical_not(y > 0), y, 0.0)),
}


@pytest.mark.parametrize("op", list(BIT_OPS))
@pytest.mark.parametrize("dname", list(DTYPES))
def test_every_bit_pattern_equals_the_cpu(dname, op):
    """All 65536 half values against a shuffle of them: the packed bit tricks (relu, masks,
    selects) and instructions (subnormals, infinities, NaN, signed zeros) equal the CPU."""
    dt = DTYPES[dname]
    pattern = np.arange(1 << 16, dtype=np.uint16)
    other_half = np.random.default_rng(5).permutation(pattern)
    x, y = (mx.array(p).view(dt) for p in (pattern, other_half))
    f = BIT_OPS[op]
    with mx.stream(mx.gpu):
        gpu = as_tuple(mx.compile(f)(x, y))
        mx.eval(*gpu)
    with mx.stream(mx.cpu):
        cpu = as_tuple(f(x, y))
        mx.eval(*cpu)
    for g, c in zip(gpu, cpu):
        np.testing.assert_array_equal(bits(g), bits(c))

def test_packed_equals_per_element_kernels(tmp_path):
    """Everything above with KILN_CUDA_PACKED=0 (the switch is read once per process)."""
    out = tmp_path / "per_element.npz"
    env = dict(os.environ, KILN_CUDA_PACKED="0")
    subprocess.run([sys.executable, __file__, str(out)], env=env, check=True, timeout=600)
    ref = np.load(out)
    mine = run_all()
    assert set(ref.files) == set(mine)
    for key, b in mine.items():
        np.testing.assert_array_equal(b, ref[key], err_msg=key)


def test_special_values_follow_kiln_rules():
    """Spot checks against numpy float16 (per-node rounding): subnormal products are kept,
    overflow gives inf, maximum propagates NaN from either side, -0.0 * 1 stays -0.0."""
    a = np.array([2.0**-12, 65504.0, np.nan, 1.0, -0.0, 2.0, -3.0, 0.0], np.float16)
    b = np.array([2.0**-12, 2.0, 1.0, np.nan, 1.0, 0.0, -0.0, -0.0], np.float16)
    x, y = mx.array(a), mx.array(b)
    with mx.stream(mx.gpu):
        prod, twice, top = mx.compile(lambda x, y: (x * y, x + x, mx.maximum(x, y)))(x, y)
        mx.eval(prod, twice, top)
    with np.errstate(all="ignore"):
        want_prod, want_twice = a * b, a + a
    # kiln's maximum: a where a is NaN or a > b, else b (-0.0 vs 0.0 gives the second one).
    want_top = np.array([2.0**-12, 65504.0, np.nan, np.nan, 1.0, 2.0, -0.0, -0.0], np.float16)
    for got, want in [(prod, want_prod), (twice, want_twice), (top, want_top)]:
        got = np.array(got)
        np.testing.assert_array_equal(got, want)
        num = ~np.isnan(want)
        np.testing.assert_array_equal(np.signbit(got[num]), np.signbit(want[num]))

if __name__ == "__main__":
    mx.set_default_device(mx.gpu)
    np.savez(sys.argv[1], **run_all())
