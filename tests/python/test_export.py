"""Function export (mx.export_function / import_function / exporter): round trips of many
primitives over shapes and dtypes, several traces per file, shapeless exports, keyword
arguments, constants, grad/vmap/compile of imported functions, MLX's argument rules and
messages (compared with MLX where installed), and bad files (truncated, wrong magic or
version, corrupted, random bytes) raising clear errors."""

import os
import pathlib
import struct

import numpy as np
import pytest

import kiln.core as mx

try:
    import mlx.core as mlx
except ImportError:  # pragma: no cover - MLX is optional
    mlx = None

needs_mlx = pytest.mark.skipif(mlx is None, reason="MLX is not installed")
RNG = np.random.default_rng(22)


def rand(shape, dtype="float32"):
    if dtype in ("float32", "float16", "bfloat16", "float64"):
        a = mx.array(RNG.standard_normal(shape).astype(np.float32))
        return a.astype(getattr(mx, dtype))
    if dtype == "bool_":
        return mx.array(RNG.random(shape) > 0.5)
    lo, hi = (0, 20) if dtype.startswith("u") else (-20, 20)
    return mx.array(RNG.integers(lo, hi, shape)).astype(getattr(mx, dtype))


def close(a, b, tol=1e-5):
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    if a.dtype == mx.bfloat16:
        a, b = a.astype(mx.float32), b.astype(mx.float32)
    if not mx.issubdtype(a.dtype, mx.inexact):
        np.testing.assert_array_equal(np.array(a), np.array(b))
        return
    np.testing.assert_allclose(np.array(a), np.array(b), rtol=tol, atol=tol, equal_nan=True)


def round_trip(tmp_path, fun, *args, shapeless=False, **kwargs):
    path = tmp_path / "f.kilnfn"
    mx.export_function(str(path), fun, *args, shapeless=shapeless, **kwargs)
    return mx.import_function(str(path))


# ---- round trips over primitives, shapes and dtypes -------------------------------------------

KEY = mx.random.key(3)
W = mx.array(RNG.standard_normal((4, 3)).astype(np.float32))

FUNS = {
    "elementwise": (lambda x: mx.exp(x) * 2 - mx.sin(x) / (1 + x * x), [(3, 4)]),
    "unary_chain": (lambda x: mx.tanh(mx.sigmoid(x)) + mx.erf(x) + mx.abs(x) ** 0.5, [(5,)]),
    "broadcast": (lambda x, y: mx.maximum(x, y) + x * y, [(3, 1), (1, 4)]),
    "reductions": (lambda x: [x.sum(axis=1), x.max(), mx.mean(x, axis=0), mx.argmax(x, 1)], [(4, 6)]),
    "matmul_const": (lambda x: x @ W + 1, [(2, 4)]),
    "softmax": (lambda x: mx.softmax(x, axis=-1) + mx.logsumexp(x, axis=0), [(3, 5)]),
    "shape_ops": (lambda x: mx.concatenate([x.T.reshape(-1), x[1:, ::2].flatten()]), [(4, 6)]),
    "index": (lambda x, i: x[i] + mx.take(x, i, axis=1).T, [(5, 5), "idx"]),
    "scatter": (lambda x, i: x.at[i].add(1.0), [(5, 3), "idx"]),
    "sort_scan": (lambda x: [mx.sort(x, axis=0), mx.cumsum(x, axis=1), mx.argsort(x)], [(4, 3)]),
    "where_astype": (lambda x: mx.where(x > 0, x, -x).astype(mx.float16), [(6,)]),
    "conv": (lambda x, w: mx.conv1d(x, w, stride=2, padding=1), [(2, 9, 4), (5, 3, 4)]),
    "fast_norms": (lambda x, w: [mx.fast.rms_norm(x, w, 1e-5), mx.fast.layer_norm(x, w, None, 1e-5)], [(3, 8), (8,)]),
    "rope": (lambda x: mx.fast.rope(x, 8, traditional=False, base=10000.0, scale=1.0, offset=2), [(1, 2, 5, 8)]),
    "attention": (lambda q, k, v: mx.fast.scaled_dot_product_attention(q, k, v, scale=0.5, mask="causal"), [(1, 2, 4, 8), (1, 2, 4, 8), (1, 2, 4, 8)]),
    "random_key": (lambda x: x + mx.random.uniform(shape=x.shape, key=KEY), [(3, 3)]),
    "arange_const": (lambda x: x * mx.arange(x.shape[-1]) + mx.linspace(0, 1, 4), [(2, 4)]),
    "linalg": (lambda x: mx.linalg.inv(x @ x.T + 4 * mx.eye(3)), [(3, 3)]),
    "fft": (lambda x: mx.abs(mx.fft.rfft(x)), [(8,)]),
    "complex": (lambda x: (x * 1j + 2).real, [(3,)]),
    "var_std": (lambda x: [mx.var(x, axis=0), mx.std(x)], [(5, 2)]),
}


def make_args(specs, dtype="float32"):
    out = []
    for s in specs:
        if s == "idx":
            out.append(mx.array(RNG.integers(0, 5, (3,)).astype(np.int32)))
        else:
            out.append(rand(s, dtype))
    return out


@pytest.mark.parametrize("name", sorted(FUNS))
def test_round_trip_matches_the_function(tmp_path, name):
    fun, specs = FUNS[name]
    f = round_trip(tmp_path, fun, *make_args(specs))
    for _ in range(2):  # new inputs of the traced signature
        args = make_args(specs)
        want = fun(*args)
        want = list(want) if isinstance(want, (list, tuple)) else [want]
        got = f(*args)
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            close(g, w, tol=1e-4)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int32", "uint8", "int64", "bool_"])
@pytest.mark.parametrize("shape", [(), (7,), (2, 3, 4)])
def test_round_trip_dtypes_and_shapes(tmp_path, dtype, shape):
    def fun(x):
        if dtype == "bool_":
            return [mx.logical_not(x), x.astype(mx.int32).sum()]
        return [x + x, (x * 3).astype(mx.float32), mx.maximum(x, x[..., None].max(axis=-1) if x.ndim else x)]

    x = rand(shape, dtype)
    f = round_trip(tmp_path, fun, x)
    y = rand(shape, dtype)
    for g, w in zip(f(y), fun(y)):
        close(g, w)


def test_compiled_function_exports(tmp_path):
    fun = mx.compile(lambda x: mx.exp(x) * x + 1)
    x = rand((4,))
    f = round_trip(tmp_path, fun, x)
    close(f(x)[0], fun(x))


def test_imported_function_exports_again(tmp_path):
    x = rand((3,))
    f = round_trip(tmp_path, lambda a: a * 2 + 1, x)
    path = tmp_path / "g.kilnfn"
    mx.export_function(str(path), lambda a: f(a)[0] ** 2, x)
    close(mx.import_function(str(path))(x)[0], (x * 2 + 1) ** 2)


# ---- outputs and arguments ---------------------------------------------------------------------


def test_outputs_are_tuples(tmp_path):
    x = rand((2,))
    assert len(round_trip(tmp_path, lambda a: a, x)(x)) == 1
    out = round_trip(tmp_path, lambda a: [a, a + 1], x)(x)
    assert isinstance(out, tuple) and len(out) == 2
    assert round_trip(tmp_path, lambda a: (), x)(x) == ()
    b, a = round_trip(tmp_path, lambda a, b: (b, a), x, x + 1)(x, x + 1)
    close(a, x)
    close(b, x + 1)


@pytest.mark.parametrize("out", [None, 3, (1, 2), [rand((1,)), (rand((1,)),)], {"a": rand((1,))}])
def test_bad_outputs(tmp_path, out):
    with pytest.raises(ValueError, match=r"\[export_function\] Outputs can be either a single array"):
        mx.export_function(str(tmp_path / "f"), lambda a: out, rand((1,)))


@pytest.mark.parametrize(
    "args, kwargs",
    [((rand((1,)), 2.0), {}), ((rand((1,)), "s"), {}), ((rand((1,)),), {"s": 1}),
     (((rand((1,)), (rand((1,)),)),), {}), (((rand((1,)),), rand((1,))), {}),
     ((rand((1,)), {"b": rand((1,))}), {}), (([rand((1,))],), {"b": rand((1,))})],
)
def test_bad_inputs(tmp_path, args, kwargs):
    with pytest.raises(ValueError, match=r"\[export_function\] Inputs can either be"):
        mx.export_function(str(tmp_path / "f"), lambda *a, **k: a[0], *args, **kwargs)


def test_tuple_and_dict_forms(tmp_path):
    x, y = rand((2,)), rand((2,))
    fun = lambda a, b=None: a * b  # noqa: E731
    path = str(tmp_path / "t")
    mx.export_function(path, fun, (x,), {"b": y})
    f = mx.import_function(path)
    close(f(x, b=y)[0], x * y)
    close(f((x,), {"b": y})[0], x * y)
    close(f([x], {"b": y})[0], x * y)
    mx.export_function(path, lambda a, b: a - b, [x, y])
    close(mx.import_function(path)(x, y)[0], x - y)
    mx.export_function(path, lambda b: b * 2, {"b": y})
    close(mx.import_function(path)(b=y)[0], y * 2)
    close(mx.import_function(path)({"b": y})[0], y * 2)


def test_keyword_arguments_match_by_name(tmp_path):
    x, y = rand((2,)), rand((2,))
    f = round_trip(tmp_path, lambda *, a, b: a - b, a=x, b=y)
    close(f(b=y, a=x)[0], x - y)
    close(f(a=y, b=x)[0], y - x)
    with pytest.raises(ValueError, match="No imported function found"):
        f(x, y)
    with pytest.raises(ValueError, match="No imported function found"):
        f(a=x, c=y)
    with pytest.raises(ValueError, match=r"\[import_function::call\] Inputs can either be"):
        f(a=x, b=3.0)


def test_wrong_signatures_list_the_traces(tmp_path):
    x, y = mx.array(1.0), mx.array([1.0, 2, 3])
    f = round_trip(tmp_path, lambda a, y: a + y, x, y=y)
    with pytest.raises(ValueError) as e:
        f(x, y=mx.array([1, 2]))
    assert str(e.value) == (
        "[import_function::call] No imported function found which matches the given positional "
        "and keyword arguments. Possible functions include:\n"
        " 1. Function with 1 positional inputs and 1 keyword inputs:\n"
        "   1: () float32\n"
        '   "y": (3) float32\n'
        "\n"
        "Called with 1 positional inputs and 1 keyword inputs:\n"
        "  1: () float32\n"
        '  "y": (2) int32\n'
    )
    for bad in [lambda: f(x, y=y.astype(mx.float16)), lambda: f(x, y), lambda: f(y=y)]:
        with pytest.raises(ValueError, match="No imported function found"):
            bad()


# ---- several traces ------------------------------------------------------------------------------


def test_exporter_adds_traces_to_one_file(tmp_path):
    path = str(tmp_path / "m.kilnfn")

    def fun(*args):
        return sum(args)

    with mx.exporter(path, fun) as ex:
        assert isinstance(ex, mx.FunctionExporter)
        ex(mx.array(1))
        ex(mx.array(1), mx.array(2))
        ex(mx.array(1.0), mx.array(2.0), mx.array(3.0))
        ex(mx.ones((2, 3)))
        with pytest.raises(RuntimeError, match="twice with the same signature"):
            ex(mx.array(7))
        # The file is complete after every call.
        assert mx.import_function(path)(mx.array(4))[0].item() == 4
    with pytest.raises(RuntimeError, match="write after exporting is closed"):
        ex(mx.array(5))
    ex.close()  # closing again is fine
    f = mx.import_function(path)
    assert f(mx.array(4))[0].item() == 4 and f(mx.array(4))[0].dtype == mx.int32
    assert f(mx.array(4), mx.array(5))[0].item() == 9
    assert f(mx.array(4.0), mx.array(5.0), mx.array(6.0))[0].item() == 15.0
    close(f(mx.full((2, 3), 2.0))[0], mx.full((2, 3), 2.0))
    with pytest.raises(ValueError, match="No imported function found"):
        f(mx.array(4), mx.array(5), mx.array(6))  # int32 was not traced with 3 inputs
    with pytest.raises(ValueError, match="No imported function found"):
        f(mx.array([4]))


def test_exporter_with_keyword_traces(tmp_path):
    path = str(tmp_path / "k")
    x, y = rand((2,)), rand((2,))
    with mx.exporter(path, lambda a, b=None: a if b is None else a * b) as ex:
        ex(x)
        ex(x, b=y)
    k = mx.import_function(path)
    close(k(x)[0], x)
    close(k(x, b=y)[0], x * y)


def test_exporter_checks_its_arguments(tmp_path):
    with pytest.raises(TypeError):
        mx.exporter(str(tmp_path / "e"), lambda a: a, rand((1,)))
    with pytest.raises(TypeError, match="callable"):
        mx.export_function(str(tmp_path / "e"), 3, rand((1,)))


# ---- shapeless -----------------------------------------------------------------------------------


def test_shapeless_takes_other_shapes_of_the_same_rank(tmp_path):
    fun = lambda a, b: mx.exp(a) + b  # noqa: E731
    f = round_trip(tmp_path, fun, rand((2,)), rand((2,)), shapeless=True)
    for n in (1, 2, 5, 33):
        a, b = rand((n,)), rand((n,))
        close(f(a, b)[0], fun(a, b))
    for bad in [(rand((2, 3)), rand((2, 3))), (rand((2,), "float16"), rand((2,), "float16"))]:
        with pytest.raises(ValueError, match="No imported function found"):
            f(*bad)
    with pytest.raises(ValueError):
        mx.eval(f(rand((3,)), rand((4,))))


def test_shapeless_mean_reshape_and_matmul(tmp_path):
    def fun(x, w):
        h = (x @ w).reshape(x.shape[0], -1)
        return [h - h.mean(axis=1, keepdims=True), x.sum(axis=0)]

    f = round_trip(tmp_path, fun, rand((2, 3)), rand((3, 4)), shapeless=True)
    for shape in [(2, 3, 4), (5, 7, 2), (1, 1, 1)]:
        x, w = rand(shape[:2]), rand(shape[1:])
        for g, want in zip(f(x, w), fun(x, w)):
            close(g, want, tol=1e-4)


def test_shapeless_broadcasting_follows_new_shapes(tmp_path):
    fun = lambda a, b: a * b + 1  # noqa: E731
    f = round_trip(tmp_path, fun, rand((3, 1)), rand((1, 3)), shapeless=True)
    a, b = rand((4, 1)), rand((1, 5))
    close(f(a, b)[0], fun(a, b))


def test_imported_function_without_compile(tmp_path):
    fun = lambda a: mx.exp(a) * 2 + a.mean()  # noqa: E731
    x = rand((6,))
    f = round_trip(tmp_path, fun, x)
    mx.disable_compile()
    try:
        close(f(x)[0], fun(x))
    finally:
        mx.enable_compile()
    close(f(x)[0], fun(x))


def test_shapeless_traces_of_other_ranks(tmp_path):
    path = str(tmp_path / "sm")
    with mx.exporter(path, lambda a: a * 2, shapeless=True) as ex:
        ex(rand((2,)))
        with pytest.raises(RuntimeError, match="same signature"):
            ex(rand((4,)))
        ex(rand((4, 3)))
    f = mx.import_function(path)
    close(f(mx.ones((2, 2)))[0], mx.full((2, 2), 2.0))
    close(f(mx.ones((7,)))[0], mx.full((7,), 2.0))
    with pytest.raises(ValueError, match="No imported function found"):
        f(mx.ones((2, 2, 2)))


# ---- constants -----------------------------------------------------------------------------------


def test_constants_are_saved_in_the_file(tmp_path):
    big = rand((256, 64))
    c = mx.array([10.0, float("nan"), -0.0, float("inf")])
    h = mx.array([1.5, 2.5, 3.5, 4.5]).astype(mx.bfloat16)
    fun = lambda x: [x @ big, x[:4] * c, h * 2]  # noqa: E731
    path = tmp_path / "c.kilnfn"
    x = rand((256,))
    mx.export_function(str(path), fun, x)
    assert os.path.getsize(path) > 256 * 64 * 4
    want = fun(x)
    del big, c, h
    f = mx.import_function(str(path))
    for g, w in zip(f(x), want):
        close(g, w, tol=1e-4)
    # NaN, inf and -0 come back bit for bit.
    assert np.array_equal(np.array(f(x)[1]).view(np.uint32), np.array(want[1]).view(np.uint32))


def test_constants_are_frozen_at_export(tmp_path):
    state = [mx.array([1.0, 2.0])]
    f = round_trip(tmp_path, lambda x: x + state[0], mx.zeros((2,)))
    state[0] = mx.array([100.0, 200.0])
    close(f(mx.zeros((2,)))[0], mx.array([1.0, 2.0]))


def test_closure_over_an_argument_is_an_error(tmp_path):
    y = rand((2,))
    with pytest.raises(ValueError, match="closure"):
        mx.export_function(str(tmp_path / "cl"), lambda a: a + y, y)


# ---- transforms of imported functions ------------------------------------------------------------


def test_grad_vmap_compile_of_imported(tmp_path):
    fun = lambda a, b: mx.exp(a) * b + mx.sin(a * b)  # noqa: E731
    x, y = rand((3,)), rand((3,))
    for shapeless in (False, True):
        f = round_trip(tmp_path, fun, x, y, shapeless=shapeless)
        g = mx.grad(lambda a: f(a, y)[0].sum())(x)
        close(g, mx.grad(lambda a: fun(a, y).sum())(x), tol=1e-5)
        gg = mx.grad(lambda a: mx.grad(lambda u: f(u, y)[0].sum())(a).sum())(x)
        close(gg, mx.grad(lambda a: mx.grad(lambda u: fun(u, y).sum())(a).sum())(x), tol=1e-4)
        xs = rand((4, 3))
        close(mx.vmap(lambda a: f(a, y)[0])(xs), mx.vmap(lambda a: fun(a, y))(xs), tol=1e-5)
        cf = mx.compile(lambda a: f(a, y)[0] * 2)
        close(cf(x), fun(x, y) * 2, tol=1e-5)
        close(cf(x + 1), fun(x + 1, y) * 2, tol=1e-5)
        _, vjp = mx.vjp(lambda a: f(a, y)[0], [x], [mx.ones((3,))])
        close(vjp[0], mx.grad(lambda a: fun(a, y).sum())(x), tol=1e-5)
        _, jvp = mx.jvp(lambda a: f(a, y)[0], [x], [mx.ones((3,))])
        close(jvp[0], mx.jvp(lambda a: fun(a, y), [x], [mx.ones((3,))])[1][0], tol=1e-5)


def test_value_and_grad_of_a_model_step(tmp_path):
    w = rand((4, 2))

    def loss(w, x, t):
        return [((mx.tanh(x @ w) - t) ** 2).mean()]

    x, t = rand((8, 4)), rand((8, 2))
    f = round_trip(tmp_path, loss, w, x, t)
    v, g = mx.value_and_grad(lambda w: f(w, x, t)[0])(w)
    v2, g2 = mx.value_and_grad(lambda w: loss(w, x, t)[0])(w)
    close(v, v2)
    close(g, g2, tol=1e-5)


def test_export_inside_grad(tmp_path):
    path = str(tmp_path / "gg")

    def outer(a):
        mx.export_function(path, lambda b: b * 2, a)
        return a.sum()

    close(mx.grad(outer)(rand((2,))), mx.ones((2,)))
    close(mx.import_function(path)(mx.ones((2,)))[0], mx.full((2,), 2.0))


# ---- unsupported content -------------------------------------------------------------------------


def test_custom_functions_and_kernels_are_refused(tmp_path):
    @mx.custom_function
    def f(x):
        return x * 2

    @f.vjp
    def f_vjp(primals, cotangent, output):
        return (cotangent * 2,)

    with pytest.raises(ValueError, match=r"\[export_function\].*custom transform rules"):
        mx.export_function(str(tmp_path / "c"), f, rand((2,)))
    with pytest.raises(ValueError, match=r"\[export_function\].*custom transform rules"):
        mx.export_function(str(tmp_path / "c"), mx.checkpoint(lambda x: x * 2), rand((2,)))
    kernel = mx.fast.c_kernel("copy", ["x"], ["y"], "for (int64_t i = 0; i < x_size; i++) y[i] = x[i];")

    def k(x):
        return kernel(inputs=[x], output_shapes=[x.shape], output_dtypes=[x.dtype])[0]

    with pytest.raises(ValueError, match=r"\[export_function\].*custom kernels"):
        mx.export_function(str(tmp_path / "k"), k, rand((2,)))


# ---- metadata and paths --------------------------------------------------------------------------


def test_metadata_and_paths(tmp_path):
    x = rand((2,))
    path = tmp_path / "md.kilnfn"
    mx.export_function(path, lambda a: a, x, metadata='{"a": 1}')
    f, md = mx.import_function(path, return_metadata=True)
    assert md == '{"a": 1}' and callable(f)
    mx.export_function(str(path), lambda a: a, x)
    assert mx.import_function(str(path), return_metadata=True)[1] == ""
    with mx.exporter(pathlib.Path(tmp_path / "e"), lambda a: a, metadata="m") as ex:
        ex(x)
    assert mx.import_function(tmp_path / "e", return_metadata=True)[1] == "m"
    with pytest.raises(RuntimeError, match=r"\[export_function\] Failed to open"):
        mx.export_function(str(tmp_path / "no" / "dir" / "f"), lambda a: a, x)
    # A callback instead of a file gets the graph as dicts (test_issue22_rest.py).
    got = []
    mx.export_function(got.append, lambda a: a, x)
    assert [d["type"] for d in got] == ["inputs", "keyword_inputs", "outputs", "constants"]


# ---- bad files -----------------------------------------------------------------------------------


@pytest.fixture
def good_file(tmp_path):
    path = tmp_path / "good.kilnfn"
    mx.export_function(str(path), lambda a: a * mx.array([1.0, 2.0, 3.0]) + 1, rand((3,)))
    return path, path.read_bytes()


def load_error(tmp_path, data):
    bad = tmp_path / "bad.kilnfn"
    bad.write_bytes(data)
    with pytest.raises(RuntimeError) as e:
        mx.import_function(str(bad))
    msg = str(e.value)
    assert msg.startswith(f"[import_function] Cannot load {bad}: "), msg
    return msg


def test_truncated_files(tmp_path, good_file):
    _, data = good_file
    for cut in [0, 3, 8, 11, 20, 27, 28, 40, len(data) // 2, len(data) - 5, len(data) - 1]:
        assert "truncated" in load_error(tmp_path, data[:cut]), cut


def test_wrong_magic_and_version(tmp_path, good_file):
    _, data = good_file
    assert "not a kiln function file" in load_error(tmp_path, b"MLXFN\0\0\0" + data[8:])
    for v in (0, 2, 1000):
        msg = load_error(tmp_path, data[:8] + struct.pack("<I", v) + data[12:])
        assert f"unsupported file format version {v}" in msg


def test_corrupted_and_random_files(tmp_path, good_file):
    _, data = good_file
    for at in [30, len(data) // 2, len(data) - 8, len(data) - 2]:
        b = bytearray(data)
        b[at] ^= 0x10
        assert "corrupted" in load_error(tmp_path, bytes(b)), at
    assert "corrupted" in load_error(tmp_path, data + b"\0")
    rng = np.random.default_rng(0)
    for n in [1, 7, 100, 5000]:
        msg = load_error(tmp_path, rng.integers(0, 256, n, dtype=np.uint8).tobytes())
        assert "not a kiln function file" in msg or "truncated" in msg
    for n in [50, 5000]:  # the magic, then garbage
        garbage = b"KILNFUNC" + rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        msg = load_error(tmp_path, garbage)
        assert any(w in msg for w in ("truncated", "corrupted", "version")), msg


def test_missing_file(tmp_path):
    with pytest.raises(RuntimeError, match=r"\[import_function\] Failed to open"):
        mx.import_function(str(tmp_path / "nothere.kilnfn"))


@needs_mlx
def test_mlx_files_are_refused_clearly(tmp_path):
    path = str(tmp_path / "m.mlxfn")
    mlx.export_function(path, lambda a: a + 1, mlx.array([1.0]))
    with pytest.raises(RuntimeError, match="not a kiln function file"):
        mx.import_function(path)


# ---- against MLX ---------------------------------------------------------------------------------


def both(tmp_path, build):
    """Runs `build(module, path)` with kiln and with MLX; returns both results."""
    out = []
    for m, name in ((mx, "k"), (mlx, "m")):
        out.append(build(m, str(tmp_path / name)))
    return out


@needs_mlx
@pytest.mark.parametrize("shapeless", [False, True])
def test_same_results_as_mlx(tmp_path, shapeless):
    xs = RNG.standard_normal((3, 4)).astype(np.float32)
    ys = RNG.standard_normal((4,)).astype(np.float32)
    xs2 = RNG.standard_normal((5, 4)).astype(np.float32)

    def build(m, path):
        def fun(x, *, y):
            return [m.softmax(x * y, axis=-1), (x @ y).sum(), m.exp(x).max(axis=0)]

        with m.exporter(path, fun, shapeless=shapeless) as ex:
            ex(m.array(xs), y=m.array(ys))
            ex(m.array(xs[0]), y=m.array(ys))
        f = m.import_function(path)
        out = list(f(m.array(xs), y=m.array(ys))) + list(f(m.array(xs[1]), y=m.array(ys)))
        if shapeless:
            out += list(f(m.array(xs2), y=m.array(ys)))
        return [np.array(o) for o in out]

    k, m = both(tmp_path, build)
    assert len(k) == len(m)
    for a, b in zip(k, m):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@needs_mlx
def test_same_messages_as_mlx(tmp_path):
    def build(m, path):
        with m.exporter(path, lambda *a, **k: sum(a) + sum(k.values())) as ex:
            ex(m.array([1.0, 2.0]))
            ex(m.array([1.0]), m.array([1.0]))
            ex(m.array([1.0]), b=m.array([2.0]), a=m.array([3.0]))
            ex(m.ones((2, 3)))
        f = m.import_function(path)
        msgs = []
        for call in [lambda: f(m.array(1)), lambda: f(m.array([1, 2]), c=m.array(1.0)),
                     lambda: f(m.array(1.0), 2.0), lambda: f((m.array(1.0),), {"a": 1})]:
            try:
                call()
                msgs.append(None)
            except ValueError as e:
                msgs.append(str(e))
        for bad in [lambda: m.export_function(path, lambda a: None, m.array(1.0)),
                    lambda: m.export_function(path, lambda a, b: a, m.array(1.0), 2)]:
            try:
                bad()
            except ValueError as e:
                msgs.append(str(e))
        ex = m.exporter(path, lambda a: a)
        ex(m.array(1.0))
        for bad in [lambda: ex(m.array(2.0)), lambda: (ex.close(), ex(m.array(1)))]:
            try:
                bad()
            except RuntimeError as e:
                msgs.append(str(e))
        return msgs

    k, m = both(tmp_path, build)
    assert k == m


@needs_mlx
def test_mlx_round_trip_of_model_step_gradients(tmp_path):
    w = RNG.standard_normal((4, 2)).astype(np.float32)
    x = RNG.standard_normal((6, 4)).astype(np.float32)

    def build(m, path):
        mx_w, mx_x = m.array(w), m.array(x)
        m.export_function(path, lambda w, x: ((m.tanh(x @ w)) ** 2).mean(), mx_w, mx_x)
        f = m.import_function(path)
        g = m.grad(lambda w: f(w, mx_x)[0])(mx_w)
        v = m.vmap(lambda xi: f(mx_w, m.broadcast_to(xi, (6, 4)))[0])(mx_x)
        return [np.array(g), np.array(v)]

    k, m = both(tmp_path, build)
    for a, b in zip(k, m):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
