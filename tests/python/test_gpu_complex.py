"""complex64 on the GPU: every elementwise op kiln computes on complex (generated kernels),
mixed complex/real programs fused by compile, reductions, the complex parts, indexing and
data movement, NaN/inf components, broadcasting, transposed and reversed views, empty
arrays; each result on mx.gpu against the same op on mx.cpu and, for finite inputs, numpy.

Skipped (with the reason) where no GPU is available; run on the GPU machine with
`python -m pytest tests/python/test_gpu_complex.py`."""

import numpy as np
import pytest

import kiln.core as mx

pytestmark = pytest.mark.skipif(
    not mx.is_available(mx.gpu), reason="no GPU is available on this machine"
)

RNG = np.random.default_rng(11)


def crand(shape, lo=-2.0, hi=2.0):
    re = RNG.uniform(lo, hi, size=shape).astype(np.float32)
    im = RNG.uniform(lo, hi, size=shape).astype(np.float32)
    return (re + 1j * im).astype(np.complex64)


# Components covering zeros of both signs, infinities, NaN, branch cuts and the unit
# circle's points where inverse functions have poles (+-1, +-i).
PARTS = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, np.inf, -np.inf, np.nan]
SPECIAL = np.array([complex(r, i) for r in PARTS for i in PARTS], dtype=np.complex64)


def run(fn, *args, device):
    with mx.stream(device):
        out = fn(*[mx.array(a) if isinstance(a, np.ndarray) else a for a in args])
        mx.eval(out)
    return out


def both(fn, *args):
    """fn on the GPU and on the CPU, as numpy arrays."""
    g = run(fn, *args, device=mx.gpu)
    c = run(fn, *args, device=mx.cpu)
    return np.array(g), np.array(c)


def parts(x):
    x = np.asarray(x)
    if np.iscomplexobj(x):
        return np.stack([x.real, x.imag])
    return x


def close(got, want, rtol=2e-5, atol=2e-6):
    """Real and imaginary parts compared separately (NaN and infinities in place)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape)
    if got.dtype == np.bool_ or np.issubdtype(got.dtype, np.integer):
        np.testing.assert_array_equal(got, want)
        return
    np.testing.assert_allclose(parts(got), parts(want), rtol=rtol, atol=atol, equal_nan=True)


UNARY = {
    "negative": np.negative,
    "exp": np.exp,
    "log": np.log,
    "log2": np.log2,
    "log10": np.log10,
    "log1p": np.log1p,
    "sqrt": np.sqrt,
    "rsqrt": lambda z: 1 / np.sqrt(z),
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "tanh": np.tanh,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "arcsin": np.arcsin,
    "arccos": np.arccos,
    "arctan": np.arctan,
    "arcsinh": np.arcsinh,
    "arccosh": np.arccosh,
    "arctanh": np.arctanh,
    "sign": lambda z: np.where(z == 0, 0, z / np.abs(z)).astype(np.complex64),
    "round": lambda z: (np.round(z.real) + 1j * np.round(z.imag)).astype(np.complex64),
    "abs": np.abs,
    "square": np.square,
    "reciprocal": np.reciprocal,
    "conjugate": np.conjugate,
    "real": np.real,
    "imag": np.imag,
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_matches_cpu_and_numpy(name):
    x = crand((33, 65))
    g, c = both(getattr(mx, name), x)
    close(g, c, rtol=1e-5, atol=1e-6)
    want = UNARY[name](x)
    np.testing.assert_allclose(parts(g), parts(want.astype(g.dtype)), rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_special_values_match_cpu(name):
    """NaN/inf/signed-zero components follow the CPU's formulas (num-complex's)."""
    g, c = both(getattr(mx, name), SPECIAL)
    close(g, c, rtol=1e-5, atol=1e-6)


BINARY = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": np.divide,
    "power": np.power,
    "maximum": None,  # lexicographic order (MLX): CPU only
    "minimum": None,
    "logaddexp": None,
    "floor_divide": None,  # MLX: plain division on complex
    "equal": np.equal,
    "not_equal": np.not_equal,
    "less": None,
    "less_equal": None,
    "greater": None,
    "greater_equal": None,
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_matches_cpu_and_numpy(name):
    a, b = crand((17, 40)), crand((17, 40))
    b[0, :5] = a[0, :5]  # equal pairs
    b[1, :5] = a[1, :5].real + 1j * (a[1, :5].imag + 1)  # equal real parts
    g, c = both(getattr(mx, name), a, b)
    # power is exp(b log a): the GPU's expf/logf/sincosf differ from the CPU's by an ulp,
    # which b log a amplifies where it is large.
    close(g, c, rtol=1e-3 if name == "power" else 1e-5, atol=1e-6)
    ref = BINARY[name]
    if ref is not None:
        want = np.asarray(ref(a, b))
        if want.dtype != np.bool_:
            want = want.astype(np.complex64)
        close(g, want, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_special_values_match_cpu(name):
    a = np.repeat(SPECIAL, SPECIAL.size)
    b = np.tile(SPECIAL, SPECIAL.size)
    g, c = both(getattr(mx, name), a, b)
    close(g, c, rtol=1e-5, atol=1e-6)


def test_division_edge_cases():
    """Annex G: x/0 is infinite, finite/inf is zero, huge parts do not overflow."""
    a = np.array([1 + 0j, 1 + 1j, 3e38 + 3e38j, 0j, np.inf + 1j], dtype=np.complex64)
    b = np.array([0j, np.inf + 0j, 3e38 + 3e38j, 0j, 2 + 1j], dtype=np.complex64)
    g, c = both(mx.divide, a, b)
    close(g, c, rtol=0, atol=0)
    assert g[2] == 1 + 0j
    assert np.isinf(g[0].real)


@pytest.mark.parametrize(
    "make",
    [
        lambda: (crand((3, 1, 5)), RNG.standard_normal((4, 5)).astype(np.float32)),
        lambda: (RNG.integers(-5, 5, (4, 5)).astype(np.int32), crand((5,))),
        lambda: (crand(()), RNG.standard_normal((2, 3)).astype(np.float16)),
        lambda: (crand((2, 3)), np.array(True)),
    ],
)
@pytest.mark.parametrize("name", ["add", "multiply", "divide", "subtract", "equal", "less"])
def test_mixed_dtypes_and_broadcasting(make, name):
    a, b = make()
    g, c = both(getattr(mx, name), a, b)
    close(g, c)


def test_scalars_and_python_complex():
    x = crand((4, 6))
    close(*both(lambda x: x * (1 + 2j) - 3, x))
    close(*both(lambda x: 2.5 / x + 1j, x))
    r = RNG.standard_normal((5,)).astype(np.float32)
    close(*both(lambda r: r * 1j + r, r))


DTYPES = [mx.bool_, mx.uint8, mx.uint16, mx.uint32, mx.uint64, mx.int8, mx.int16, mx.int32,
          mx.int64, mx.float16, mx.bfloat16, mx.float32]


@pytest.mark.parametrize("dtype", DTYPES)
def test_astype_to_and_from_complex(dtype):
    z = crand((7, 9), lo=-100, hi=100)
    z[0, :4] = [0j, 1j, np.nan + 0j, 0.5 + 0j]
    # bfloat16 is compared through float32 (numpy has no bfloat16; the widening is exact).
    widen = (lambda y: y.astype(mx.float32)) if dtype == mx.bfloat16 else (lambda y: y)
    g, c = both(lambda z: widen(z.astype(dtype)), z)
    close(g, c, rtol=0, atol=0)
    x = run(lambda z: z.astype(dtype), z, device=mx.cpu)
    g2 = run(lambda x: x.astype(mx.complex64), x, device=mx.gpu)
    c2 = run(lambda x: x.astype(mx.complex64), x, device=mx.cpu)
    close(np.array(g2), np.array(c2), rtol=0, atol=0)


def test_isnan_isinf_isfinite_and_where():
    z = SPECIAL.reshape(9, 9)
    for name in ["isnan", "isinf", "isfinite"]:
        close(*both(getattr(mx, name), z))
    m = RNG.random((9, 9)) < 0.5
    close(*both(lambda m, a, b: mx.where(m, a, b), m, z, crand((9, 9))))
    close(*both(lambda m, a: mx.where(m, a, 2.0), m, z))


@pytest.mark.parametrize("view", ["transpose", "reverse", "step", "broadcast"])
def test_strided_inputs(view):
    z = crand((6, 10))
    w = crand((10, 6))
    take = {
        "transpose": lambda z, w: (z.T, w),
        "reverse": lambda z, w: (z[::-1, ::-2], w[::-2, ::-1].T),
        "step": lambda z, w: (z[1::2, 2:8], w[2:8, 1::2].T),
        "broadcast": lambda z, w: (mx.broadcast_to(z[:1], (6, 10)).T, w),
    }[view]

    def f(z, w):
        a, b = take(z, w)
        return mx.exp(a) * b + mx.sqrt(b), mx.abs(a), mx.real(b) + mx.imag(a)

    for g, c in zip(*both(lambda z, w: f(z, w), z, w)):
        close(np.array(g), np.array(c))


def test_empty_and_zero_dim():
    for shape in [(0,), (0, 4), (3, 0, 2), ()]:
        z = crand(shape)
        close(*both(lambda z: mx.exp(z) + z * 1j, z))
        close(*both(mx.abs, z))
        close(*both(lambda z: mx.sum(z, axis=0) if z.ndim else mx.sum(z), z))


@pytest.mark.parametrize("axis", [None, 0, 1, 2, (0, 2), (1, 2)])
@pytest.mark.parametrize("name", ["sum", "prod", "max", "min", "mean"])
def test_reductions(name, axis):
    z = crand((5, 37, 9), lo=-1, hi=1)
    g, c = both(lambda z: getattr(mx, name)(z, axis=axis), z)
    close(g, c, rtol=1e-4, atol=1e-5)
    if name in ("sum", "prod", "mean"):
        want = getattr(np, name)(z.astype(np.complex128), axis=axis).astype(np.complex64)
        close(g, want, rtol=1e-3, atol=1e-4)


def test_long_reductions_use_partials():
    z = crand((3, 70000), lo=-1, hi=1)
    g, c = both(lambda z: mx.sum(z, axis=1), z)
    close(g, c, rtol=1e-4, atol=1e-3)
    g, c = both(lambda z: mx.sum(z.T, axis=1), z)  # reduced axis leading in memory
    close(g, c, rtol=1e-4, atol=1e-3)
    g, c = both(lambda z: mx.sum(z), z)
    close(g, c, rtol=1e-4, atol=1e-2)


def test_reductions_with_nan_components():
    z = crand((4, 8))
    z[1, 3] = complex(np.nan, 1)
    z[2, 5] = complex(1, np.inf)
    for name in ["sum", "prod", "max", "min"]:
        close(*both(lambda z: getattr(mx, name)(z, axis=1), z), rtol=1e-5)


def test_indexing_and_data_movement():
    z = crand((8, 6))
    idx = RNG.integers(0, 8, (5,)).astype(np.int32)
    close(*both(lambda z, i: z[i], z, idx))
    close(*both(lambda z, i: mx.take(z, i, axis=1), z, idx % 6))
    close(*both(lambda z: mx.concatenate([z, z[::-1] * 1j], axis=1), z))
    close(*both(lambda z: mx.pad(z, ((1, 2), (0, 1))), z))
    close(*both(lambda z: z.reshape(3, 16).T.reshape(-1), z))

    def update(z):
        z = z * 1
        z[2:5, ::2] = mx.array(1 + 1j)
        return z

    close(*both(update, z))
    rows = np.array([0, 3, 3, 7], dtype=np.int32)
    v = crand((4, 6))
    close(*both(lambda z, i, v: z.at[i].add(v), z, rows, v), rtol=1e-5)
    close(*both(lambda z, i, v: z.at[i].multiply(v), z, rows, v), rtol=1e-5)
    close(*both(lambda z, i, v: z.at[i].maximum(v), z, rows, v))
    mask = RNG.random((8, 6)) < 0.4
    close(*both(lambda z, m: mx.where(m, z, 0), z, mask))
    close(*both(lambda z: z.view(mx.float32), z))


def test_compiled_mixed_complex_and_real():
    """A program mixing complex and real values fuses into one GPU kernel and equals the
    CPU's eager result on every call (lazy, direct, captured graph, graph replay)."""

    def f(z, x):
        w = mx.exp(z * 0.5) * x + (1 - 2j)
        r = mx.abs(w) + mx.real(w) * x
        return mx.where(r > 1, w, mx.conjugate(w)), r, mx.sum(w * w, axis=0)

    compiled = mx.compile(f)
    for k in range(4):
        z, x = crand((16, 12)), RNG.standard_normal((12,)).astype(np.float32)
        with mx.stream(mx.gpu):
            got = compiled(mx.array(z), mx.array(x))
            mx.eval(got)
        want = run(f, z, x, device=mx.cpu)
        for g, w in zip(got, want):
            close(np.array(g), np.array(w), rtol=1e-5, atol=1e-5)


def test_complex_ops_stay_on_the_gpu(capfd, monkeypatch):
    monkeypatch.setenv("KILN_LOG", "gpu")
    z, x = crand((8, 8)), RNG.standard_normal((8, 8)).astype(np.float32)

    def f(z, x):
        w = mx.sqrt(z) / (z + x) - mx.log(z) * 1j
        return mx.sum(w, axis=1), mx.abs(w), mx.imag(w), w[1:3].T

    run(f, z, x, device=mx.gpu)
    mx.eval(mx.compile(f)(mx.array(z), mx.array(x)))
    err = capfd.readouterr().err
    assert "has no GPU kernel" not in err, err


def test_shapeless_mean_stays_on_the_gpu(capfd, monkeypatch):
    """NumberOfElements runs on the GPU: shapeless compiled mean/var need no CPU node."""
    monkeypatch.setenv("KILN_LOG", "gpu")
    f = mx.compile(lambda x: (mx.mean(x, axis=0), mx.var(x)), shapeless=True)
    for n in [3, 5, 8, 5]:
        x = RNG.standard_normal((n, 4)).astype(np.float32)
        with mx.stream(mx.gpu):
            m, v = f(mx.array(x))
            mx.eval(m, v)
        np.testing.assert_allclose(np.array(m), x.mean(axis=0), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.array(v), x.var(), rtol=1e-4, atol=1e-6)
    for dtype in [mx.float16, mx.bfloat16]:
        x = mx.array(RNG.standard_normal((6, 4)).astype(np.float32)).astype(dtype)
        with mx.stream(mx.gpu):
            g = f(x)[0]
        with mx.stream(mx.cpu):
            c = mx.mean(x, axis=0)
        np.testing.assert_allclose(np.array(g.astype(mx.float32)), np.array(c.astype(mx.float32)),
                                   rtol=1e-2, atol=1e-2)
    assert "number_of_elements has no GPU kernel" not in capfd.readouterr().err


def test_sorts_scans_and_arg_reductions_from_gpu_arrays():
    """Sorts, arg reductions and scans of complex64 from GPU arrays equal the CPU's (the full
    set of cases is in test_gpu_complex_linalg.py)."""
    z = crand((4, 7))
    close(*both(lambda z: mx.sort(z, axis=1), z))
    close(*both(lambda z: mx.argmax(z, axis=1), z))
    close(*both(lambda z: mx.cumsum(z, axis=1), z), rtol=1e-5)
