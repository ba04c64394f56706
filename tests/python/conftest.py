"""Shared helpers: dtype tables, input generators and numpy comparisons, and the `device`
fixture.

numpy is the oracle. bfloat16 has no numpy dtype, so bfloat16 arrays are compared through
float32 (`to_np`). A test that takes `device` runs on each device (ids cpu and gpu; the gpu
one skipped where there is no GPU); `-m gpu` selects every test that runs on the GPU.
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


def _seed_name(request):
    """The test's name without its `device` parameter: both devices draw the inputs the test
    drew before it was parametrised by device."""
    name = request.node.name
    params = getattr(getattr(request.node, "callspec", None), "params", {})
    if "device" in params:
        dev = params["device"]
        for a, b in ((f"[{dev}]", ""), (f"[{dev}-", "["), (f"-{dev}-", "-"), (f"-{dev}]", "]")):
            if a in name:
                return name.replace(a, b, 1)
    return name


@pytest.fixture
def rng(request):
    # A fixed seed per test (str hashes vary between runs; crc32 does not).
    return np.random.default_rng(zlib.crc32(_seed_name(request).encode()))


def pytest_configure(config):
    config.addinivalue_line("markers", "cpu: runs on the CPU stream on a GPU machine")
    config.addinivalue_line(
        "markers",
        "gpu: runs on the GPU: the gpu parameter of the `device` fixture and the GPU-only "
        "modules (select them all with `-m gpu`)",
    )


# ---------------------------------------------------------------------------------------
# Devices: tests parametrised by `device` run once on the CPU and once on the GPU.
# ---------------------------------------------------------------------------------------

HAS_GPU = mx.is_available(mx.gpu)
NO_GPU = "no GPU is available on this machine"
# The module-level mark of the GPU-only modules (CUDA graphs, NVRTC, custom CUDA kernels...).
GPU_ONLY = [pytest.mark.gpu, pytest.mark.skipif(not HAS_GPU, reason=NO_GPU)]
FLOAT64_ON_GPU = "float64 has no GPU kernels (as in MLX, a clear error): the cpu param covers it"


def _is_float64(value):
    if isinstance(value, str):
        return value == "float64"
    if isinstance(value, type(mx.float64)):
        return value == mx.float64
    return value is np.float64


def _names_float64(request):
    """The dtype under test is float64: its id says so, or a parameter is float64 itself
    (not the test's name, nor a list of dtypes its body loops over)."""
    spec = getattr(request.node, "callspec", None)
    if spec is None:
        return False
    return "float64" in spec.id or any(_is_float64(v) for v in spec.params.values())


@pytest.fixture(params=["cpu", pytest.param("gpu", marks=GPU_ONLY)])
def device(request):
    """The test runs with `device` as the default device and stream, once with mx.cpu and
    once with mx.gpu (ids "cpu" and "gpu"; the gpu one skipped where there is no GPU, and
    for float64 cases). The default device too, so that what follows it (the memory
    counters, new threads) follows the test's device."""
    dev = mx.cpu if request.param == "cpu" else mx.gpu
    if dev == mx.gpu and _names_float64(request):
        pytest.skip(FLOAT64_ON_GPU)
    before = mx.default_device()
    mx.set_default_device(dev)
    try:
        with mx.stream(dev):
            yield dev
    finally:
        mx.set_default_device(before)


def looser(device, tol, gpu_tol):
    """A tolerance: `tol` on the CPU; on the GPU the larger of `tol` and `gpu_tol` (the
    GPU's math functions, accumulation orders and half-float products differ from the CPU's
    by the GPU tests' historical bounds)."""
    if device != mx.gpu or gpu_tol is None:
        return tol
    if tol is None:
        return gpu_tol
    return max(tol, gpu_tol)


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
    if "device" in request.fixturenames:  # the `device` fixture picks the stream itself
        yield
        return
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
