"""Shared helpers: dtype tables, input generators and numpy comparisons.

numpy is the oracle. bfloat16 has no numpy dtype, so bfloat16 arrays are compared through
float32 (`to_np`).
"""

import inspect
import zlib

import kiln.core as mx
import numpy as np
import pytest

try:
    import mlx.core as _mlx

    # MLX is an oracle for its CPU semantics: on a GPU machine with MLX-CUDA installed its
    # default device would be the GPU, where float64, svd and others are not supported.
    _mlx.set_default_device(_mlx.cpu)
except ImportError:
    pass

# kiln dtype name -> numpy dtype (bfloat16: the float32 its values are compared in).
NP = {
    "bool_": np.bool_,
    "uint8": np.uint8,
    "uint16": np.uint16,
    "uint32": np.uint32,
    "uint64": np.uint64,
    "int8": np.int8,
    "int16": np.int16,
    "int32": np.int32,
    "int64": np.int64,
    "float16": np.float16,
    "bfloat16": np.float32,
    "float32": np.float32,
    "float64": np.float64,
}
ALL = list(NP)
FLOATS = ["float16", "bfloat16", "float32", "float64"]
INTS = ["uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64"]
SIGNED = ["int8", "int16", "int32", "int64"]
NUMERIC = INTS + FLOATS


def dt(name):
    """The kiln dtype object of a name."""
    return getattr(mx, name)


def name_of(dtype):
    """The attribute name of a kiln dtype (`bool_` for bool)."""
    s = str(dtype).split(".")[-1]
    return "bool_" if s == "bool" else s


def is_float(name):
    return name in FLOATS


# Relative tolerances for results of a dtype (half types round at 2**-11 and 2**-8).
RTOL = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 2e-6, "float64": 1e-12}
ATOL = {"float16": 1e-3, "bfloat16": 1e-2, "float32": 1e-6, "float64": 1e-12}


def to_np(a):
    """A kiln array as row-major numpy (bfloat16 through float32). `np.asarray` alone would
    share a strided view's layout (the buffer protocol exports strides)."""
    if a.dtype == mx.bfloat16:
        a = a.astype(mx.float32)
    return np.asarray(np.asarray(a), order="C")


def make(name, shape, rng, low=-10, high=10, special=False):
    """Random kiln input of dtype `name` and `shape`, and its exact numpy values.

    Integers are drawn in [low, high] (unsigned from 0), floats from a normal of scale
    `high / 3`; `special` mixes NaN and +-inf into float inputs.
    """
    if name == "bool_":
        x = rng.random(shape) < 0.5
    elif name in INTS:
        lo = max(low, 0) if name.startswith("u") else low
        x = rng.integers(lo, high + 1, size=shape).astype(NP[name])
    else:
        x = (rng.standard_normal(shape) * high / 3).astype(np.float64)
        if special and x.size:
            flat = x.reshape(-1)
            picks = rng.choice(flat.size, size=min(3, flat.size), replace=False)
            for p, v in zip(picks, [np.nan, np.inf, -np.inf]):
                flat[p] = v
    a = mx.array(x, dtype=dt(name)) if name in FLOATS else mx.array(x)
    assert a.dtype == dt(name)
    return a, to_np(a)


def assert_matches(result, expected, name=None, rtol=None, atol=None):
    """`result` (kiln) equals `expected` (numpy): exactly for bool/int, within the dtype's
    tolerance for floats (NaN equal to NaN, infinities exact)."""
    name = name or name_of(result.dtype)
    got = to_np(result)
    assert got.shape == tuple(expected.shape), (got.shape, expected.shape)
    if name in FLOATS:
        expected = np.asarray(expected, dtype=np.float64)
        np.testing.assert_allclose(
            got.astype(np.float64),
            expected,
            rtol=RTOL[name] if rtol is None else rtol,
            atol=ATOL[name] if atol is None else atol,
            equal_nan=True,
        )
    else:
        np.testing.assert_array_equal(got, np.asarray(expected).astype(got.dtype))


# Shapes for unary ops and reductions: 0-d, 1-d, 2-d, 3-d and empty.
SHAPES = [(), (5,), (3, 4), (2, 3, 4), (0,), (2, 0, 3)]

# Broadcasting pairs for binary ops.
PAIRS = [
    ((), ()),
    ((4,), ()),
    ((), (4,)),
    ((3, 4), (3, 4)),
    ((3, 1), (1, 4)),
    ((2, 3, 4), (4,)),
    ((0,), (1,)),
    ((2, 0), (2, 1)),
]


def bits(a):
    """An array's raw values for bit-for-bit comparison: half floats as their bits, NaNs of
    every float dtype made one pattern (payloads aside)."""
    if a.dtype in (mx.bfloat16, mx.float16):
        u = np.array(a.view(mx.uint16)).astype(np.uint32)
        exp_mask, man_mask = (0x7F80, 0x7F) if a.dtype == mx.bfloat16 else (0x7C00, 0x3FF)
        nan = ((u & exp_mask) == exp_mask) & ((u & man_mask) != 0)
        return np.where(nan, 0xFFFFFFFF, u)
    v = np.array(a)
    if v.dtype.kind in "fc":
        v = v.copy()
        v[np.isnan(v)] = np.nan
        if v.dtype.kind == "f":
            return v.view(np.uint32 if v.itemsize == 4 else np.uint64)
    return v


def view_variants(name, shape, rng, **kw):
    """Inputs as fresh arrays, transposed views and negative-step slices, each with its
    numpy twin."""
    a, x = make(name, shape, rng, **kw)
    yield "plain", a, x
    if len(shape) >= 2:
        # Build the transposed shape, then view it back to `shape`.
        b, y = make(name, shape[::-1], rng, **kw)
        yield "transposed", b.T, y.T
    if len(shape) >= 1 and shape[0] > 0:
        c, z = make(name, (shape[0] * 2,) + shape[1:], rng, **kw)
        yield "reversed", c[::-2], z[::-2]


@pytest.fixture
def rng(request):
    # A fixed seed per test (str hashes vary between runs; crc32 does not).
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


def pytest_configure(config):
    config.addinivalue_line("markers", "cpu: runs on the CPU stream on a GPU machine")


# Tests of the CPU's own kernels (SIMD paths, error bounds, host buffer export) and of
# transforms checked by float64 finite differences stay on the CPU on a GPU machine.
CPU_MODULES = {"test_kernels", "test_buffer", "test_transforms", "test_transforms_rules",
               "test_transforms_complex", "test_donation",  # donation: CPU fused kernels only
               "test_attention_fused_vjp"}  # the CPU kernels of attention's training primitives
_USES_FLOAT64 = {}


def _uses_float64(fn):
    if fn not in _USES_FLOAT64:
        try:
            _USES_FLOAT64[fn] = "float64" in inspect.getsource(fn)
        except (OSError, TypeError):
            _USES_FLOAT64[fn] = False
    return _USES_FLOAT64[fn]


@pytest.fixture(autouse=True)
def _float64_on_the_cpu(request):
    """On a machine with a GPU the suite runs there (the GPU is the default device). float64
    has no GPU kernels (as in MLX: a clear error), so tests of float64 values run on the
    CPU stream, as do the CPU-specific modules above."""
    params = getattr(getattr(request.node, "callspec", None), "params", {})
    on_cpu = mx.default_device() == mx.gpu and (
        "float64" in request.node.name
        or "float64" in repr(params)
        or request.node.get_closest_marker("cpu") is not None
        or request.module.__name__.rsplit(".", 1)[-1] in CPU_MODULES
        or _uses_float64(request.function)
    )
    if on_cpu:
        with mx.stream(mx.cpu):
            yield
    else:
        yield
