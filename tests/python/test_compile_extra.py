"""mx.compile, continued: random graphs compiled equal eager (hypothesis), the fast call path
keys calls as the general one does, cache entries are evicted and freed, compiled functions
in reference cycles are collected, explain reports kernels, the disk cache keeps to its size
limit, the interpreter runs with no C compiler on PATH, and export_to_dot writes the graph."""

import gc
import io
import os
import subprocess
import sys
import weakref

import kiln.core as mx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kiln import _core
from kiln.core import _compile


@pytest.fixture(autouse=True)
def sync_kernels(monkeypatch, tmp_path):
    monkeypatch.setenv("KILN_CPU_JIT", "sync")
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "kernels"))
    yield


# ---- random graphs: compiled == eager ------------------------------------------------------

FLOAT_UNARY = ["exp", "tanh", "sigmoid", "abs", "negative", "sin", "square", "erf"]
INT_UNARY = ["abs", "negative", "square"]
BINARY = ["add", "subtract", "multiply", "maximum", "minimum"]


@st.composite
def programs(draw):
    dtype = draw(st.sampled_from(["float32", "float16", "int32"]))
    ndim = draw(st.integers(0, 3))
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=ndim, max_size=ndim)))
    n_inputs = draw(st.integers(1, 3))
    inputs = []
    for _ in range(n_inputs):
        # Each input: the full shape, a broadcastable one (some dims 1), or a view
        # (transposed / reversed) of a differently laid out array.
        kind = draw(st.sampled_from(["full", "broadcast", "transposed", "reversed"]))
        inputs.append(kind)
    steps = []
    n_steps = draw(st.integers(1, 8))
    for i in range(n_steps):
        avail = n_inputs + i
        kind = draw(st.sampled_from(["unary", "binary", "binary", "where", "reduce", "reshape"]))
        a, b, c = (draw(st.integers(0, avail - 1)) for _ in range(3))
        unary = FLOAT_UNARY if dtype != "int32" else INT_UNARY
        steps.append((kind, draw(st.sampled_from(unary)), draw(st.sampled_from(BINARY)), a, b, c))
    seed = draw(st.integers(0, 2**31 - 1))
    return dtype, shape, inputs, steps, seed


def make_inputs(dtype, shape, kinds, seed):
    rng = np.random.default_rng(seed)
    out = []
    for kind in kinds:
        s = shape
        if kind == "broadcast":
            s = tuple(1 if rng.random() < 0.5 else d for d in shape)
        if dtype == "int32":
            v = rng.integers(-50, 50, size=s).astype(np.int32)
        else:
            v = (rng.standard_normal(s) * 2).astype(np.float32)
        a = mx.array(v)
        if dtype == "float16":
            a = a.astype(mx.float16)
        if kind == "transposed" and len(shape) >= 2:
            a = mx.array(np.ascontiguousarray(np.swapaxes(np.array(a), -1, -2)))
            a = mx.swapaxes(a, -1, -2)
        elif kind == "reversed" and len(shape) >= 1:
            a = a[::-1]
            a = mx.array(np.ascontiguousarray(np.array(a)))[::-1]
        out.append(a)
    return out


def build(steps):
    def f(*xs):
        vals = list(xs)
        for kind, uop, bop, a, b, c in steps:
            x, y, z = vals[a], vals[b], vals[c]
            if kind == "unary":
                v = getattr(mx, uop)(x)
            elif kind == "binary":
                v = getattr(mx, bop)(x, y)
            elif kind == "where":
                v = mx.where(x > y, y, z)
            elif kind == "reduce":
                v = mx.sum(x, axis=-1, keepdims=True) if x.ndim else x + x
            else:  # reshape: flatten and back
                v = x.reshape(-1).reshape(x.shape)
            vals.append(v)
        return vals[len(xs):]

    return f


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_graphs_compiled_equal_eager(program):
    dtype, shape, kinds, steps, seed = program
    xs = make_inputs(dtype, shape, kinds, seed)
    f = build(steps)
    got, want = mx.compile(f)(*xs), f(*xs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        g32, w32 = np.array(g.astype(mx.float32)), np.array(w.astype(mx.float32))
        if dtype == "int32":
            np.testing.assert_array_equal(np.array(g), np.array(w))
            continue
        # Compiled exp/tanh/erf/sigmoid differ from eager's by a few ulp (docs/compile.md);
        # later ops can cancel, so the tolerance is relative to the result's magnitude.
        finite = w32[np.isfinite(w32)]
        scale = 1 + (np.abs(finite).max() if finite.size else 0)
        rtol = 2e-2 if dtype == "float16" else 1e-5
        np.testing.assert_allclose(g32, w32, rtol=rtol, atol=rtol * scale)


# ---- the fast call path --------------------------------------------------------------------


def test_fast_path_keys_like_the_general_path():
    calls = []

    def f(x, y=None):
        calls.append(1)
        return x * 2 if y is None else x * y

    c = mx.compile(f)
    x = mx.ones((3,))
    c(x)
    c(x)
    assert len(calls) == 1
    c(x, x)  # two arrays: another entry
    c(x, y=x)  # a keyword: the general path, another key
    c(x, x)
    assert len(calls) == 3
    c(x)
    c(mx.ones((4,)))
    assert len(calls) == 4
    info = c.explain()
    assert info["calls"] == 7 and info["cache_hits"] == 3 and info["traces"] == 4
    assert "shape" in info["last_retrace"]
    assert [e["key"]["inputs"][0]["shape"] for e in info["entries"]][-1] == (4,)
    mx.disable_compile()
    try:
        c(x)
        assert len(calls) == 5  # off: the original runs, also on the fast path
    finally:
        mx.enable_compile()
    np.testing.assert_array_equal(np.array(c(x)), [2, 2, 2])
    # Tracers (inside grad) take the original function.
    g = mx.grad(lambda x: mx.sum(c(x)))(x)
    np.testing.assert_array_equal(np.array(g), [2, 2, 2])


def test_fast_path_returns_each_entry_output_tree():
    c = mx.compile(lambda x: (x + 1, [x * 2]))
    _, (b,) = c(mx.ones((2,)))
    np.testing.assert_array_equal(np.array(b), [2, 2])
    single = mx.compile(lambda x: x + 1)
    assert isinstance(single(mx.ones((2,))), mx.array)


# ---- cache entries: eviction, memory, garbage collection -------------------------------------


def test_lru_eviction_frees_the_entry_and_its_constants(monkeypatch):
    monkeypatch.setattr(_compile, "MAX_ENTRIES", 2)
    n = 1 << 18

    def f(x):
        # A constant of the trace (does not depend on x): owned by the cache entry.
        big = mx.arange(n).astype(mx.float32) * 3
        return x + mx.sum(big)

    c = mx.compile(f)
    active = []
    for k in range(1, 4):
        mx.eval(c(mx.ones((k,))))
        gc.collect()
        active.append(mx.get_active_memory())
    info = c.explain()
    assert len(info["entries"]) == 2
    assert [e["key"]["inputs"][0]["shape"] for e in info["entries"]] == [(2,), (3,)]
    # Entry 3 added a constant of 4n bytes, evicting entry 1 freed one.
    assert active[2] - active[1] < 2 * n, active
    mx.eval(c(mx.ones((1,))))  # evicted: traces again
    assert c.explain()["traces"] == 4


def test_repeated_hits_keep_the_lru_order(monkeypatch):
    # A call with the last hit's shapes skips the lookup in Rust; the order must still be
    # the calls' order, so the entry evicted is the least recently used one.
    monkeypatch.setattr(_compile, "MAX_ENTRIES", 2)
    traced = []

    def f(x):
        traced.append(x.shape)
        return x + 1

    c = mx.compile(f)
    a, b, d = mx.ones((1,)), mx.ones((2,)), mx.ones((3,))
    for x in (a, b, a, a, a):
        c(x)
    c(d)  # evicts b, not a
    c(a)
    assert traced == [(1,), (2,), (3,)]
    c(b)
    assert traced[-1] == (2,)
    info = c.explain()
    assert info["calls"] == 8 and info["cache_hits"] == 4 and info["traces"] == 4
    assert info["last_retrace"] == "input 0: shape (1,) -> (2,)"
    np.testing.assert_array_equal(np.array(c(a)), [2])


def test_compiled_function_in_a_reference_cycle_is_collected():
    class Model:
        def __init__(self):
            self.w = mx.ones((3,))
            self.step = mx.compile(lambda x: self.w * x + 1)  # self -> step -> lambda -> self

    m = Model()
    mx.eval(m.step(mx.ones((3,))))
    ref, ref_step = weakref.ref(m), weakref.ref(m.step)
    del m
    gc.collect()
    assert ref() is None and ref_step() is None


# ---- explain, logging, disk cache ------------------------------------------------------------


@pytest.mark.cpu  # C kernel builds
def test_explain_reports_kernel_builds_runs_and_cache_hits():
    def f(x):  # a program no other test builds
        return mx.tanh(x * 0.40625) + x * 0.15625

    c = mx.compile(f)
    x = mx.ones((100,))
    for _ in range(3):
        mx.eval(c(x))
    info = c.explain()
    assert info["cache_hits"] == 2
    mine = [k for k in info["kernels"]["kernels"] if k["name"] == "Compiled_multiply_tanh_multiply_add"]
    assert len(mine) == 1, info["kernels"]["kernels"]
    k = mine[0]
    assert k["state"] == "ready" and k["variant"] == "contiguous"
    assert k["runs"] == 3 and k["run_ms"] > 0
    assert k["from_disk"] or k["build_ms"] > 0


@pytest.mark.cpu  # C kernel builds
def test_kiln_log_prints_kernel_builds(monkeypatch, capfd):
    monkeypatch.setenv("KILN_LOG", "compile")
    mx.eval(mx.compile(lambda x: mx.cos(x * 0.34375) * x)(mx.ones((3,))))
    err = capfd.readouterr().err
    assert "traced" in err and "kernel Compiled_multiply_cos_multiply" in err
    assert "built in" in err or "disk cache" in err


def test_disk_cache_keeps_to_its_size_limit(tmp_path, monkeypatch):
    cache = tmp_path / "limited"
    monkeypatch.setenv("KILN_CACHE_DIR", str(cache))
    previous = _core._set_disk_cache_limit(1)  # one byte: only the newest kernel may stay
    try:
        for k in range(3):
            scale = 0.5 + k / 64  # three distinct programs
            mx.eval(mx.compile(lambda x, s=scale: mx.sin(x * s) + x)(mx.ones((4,))))
            assert len(list(cache.glob("*.so"))) <= 1
        assert _core._jit_stats()["disk_cache_limit"] == 1
    finally:
        _core._set_disk_cache_limit(None if previous == 256 << 20 else previous)
    # Evicted files are rebuilt on the next miss; a truncated object is rebuilt, not run.
    for so in cache.glob("*.so"):
        so.write_bytes(so.read_bytes()[:100])
    script = (
        "import kiln.core as mx\n"
        "f = mx.compile(lambda x, s=0.53125: mx.sin(x * s) + x)\n"
        "print(f(mx.ones((4,))).tolist())\n"
    )
    env = dict(os.environ, KILN_CACHE_DIR=str(cache), KILN_CPU_JIT="sync")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, check=True)
    want = (np.sin(np.float32(0.53125)) + 1).item()
    assert abs(float(out.stdout.strip()[1:].split(",")[0]) - want) < 1e-6


def test_interpreter_tier_with_no_compiler_on_path(tmp_path):
    script = (
        "import numpy as np, kiln.core as mx\n"
        "from kiln import _core\n"
        "x = mx.array(np.linspace(-3, 3, 5000, dtype=np.float32))\n"
        "f = lambda x: mx.tanh(x * 1.5) * x + 0.25\n"
        "got, want = np.array(mx.compile(f)(x)), np.array(f(x))\n"
        "s = _core._jit_stats()\n"
        "print(np.abs(got - want).max() < 1e-5, s['builds'], s['failures'] >= 1)\n"
    )
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "KILN_CC"}
    env.update(PATH=str(empty), KILN_CPU_JIT="sync", KILN_CACHE_DIR=str(tmp_path / "k"),
               KILN_DISABLE_GPU="1")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, check=True)
    assert out.stdout.split() == ["True", "0", "True"], out.stdout + out.stderr


# ---- export_to_dot ---------------------------------------------------------------------------


def test_export_to_dot_names_fused_kernels_and_arrays(tmp_path):
    x = mx.array([1.0, 2.0])
    y = mx.exp(x) * 2 + x
    z = mx.compile(lambda x: mx.exp(x * 0.75) * 2 + x)(x)
    buf = io.StringIO()
    mx.export_to_dot(buf, y, z, x=x, out=z)
    text = buf.getvalue()
    assert text.startswith("digraph {") and text.rstrip().endswith("}")
    # MLX's class names label primitives; a fused kernel keeps kiln's name.
    for label in ['"Exp"', '"Multiply"', '"Add"', '"Compiled_multiply_exp_multiply_add"']:
        assert f"label ={label}" in text, text
    assert '"x" ->' in text and '-> "out"' in text
    path = tmp_path / "g.dot"
    mx.export_to_dot(str(path), y)
    assert path.read_text().startswith("digraph {")
    with pytest.raises(TypeError):
        mx.export_to_dot(buf, 3)
    with pytest.raises(TypeError):
        mx.export_to_dot(12, y)


def test_cyclic_captured_state_is_a_clear_error():
    state = {"w": mx.zeros((2,))}
    state["again"] = state  # contains itself
    f = mx.compile(lambda x: x + 1, inputs=state, outputs=state)
    with pytest.raises(ValueError, match="nested too deeply"):
        f(mx.zeros((2,)))


def test_captured_state_in_objects_lists_and_subclasses():
    class Holder:
        def __init__(self):
            self.params = {"w": mx.ones((3,))}
            self.items = [mx.zeros((3,))]

    class Tagged(dict):
        pass

    h, t = Holder(), Tagged(b=mx.full((3,), 2.0))
    state = [h, t]

    def step(x):
        h.params["w"] = h.params["w"] * 2
        h.items[0] = h.items[0] + x
        t["b"] = t["b"] - 1
        return h.params["w"].sum()

    f = mx.compile(step, inputs=state, outputs=state)
    for _ in range(3):
        f(mx.ones((3,)))
    assert np.array_equal(np.array(h.params["w"]), np.full(3, 8.0))
    assert np.array_equal(np.array(h.items[0]), np.full(3, 3.0))
    assert np.array_equal(np.array(t["b"]), np.full(3, -1.0))


@pytest.mark.parametrize(
    "a_shape,b_shape",
    [((5, 3), (3, 4)), ((2, 5, 3), (3, 4)), ((5, 3), (2, 3, 4)), ((2, 1, 5, 3), (3, 3, 4))],
)
def test_transposed_products_are_computed_transposed(a_shape, b_shape):
    """simplify rewrites (A @ B)^T as B^T @ A^T; results and Linear weight gradients are
    unchanged, and the product's output is row-major."""
    rng = np.random.default_rng(0)
    # Small integers: every sum is exact in float32, whatever the order.
    a = rng.integers(-4, 5, a_shape).astype(np.float32)
    b = rng.integers(-4, 5, b_shape).astype(np.float32)
    f = mx.compile(lambda x, y: mx.swapaxes(x @ y, -1, -2) + 1)
    want = np.swapaxes(a @ b, -1, -2) + 1
    np.testing.assert_array_equal(np.array(f(mx.array(a), mx.array(b))), want)
    # The product also read untransposed: not rewritten, still right.
    g = mx.compile(lambda x, y: (mx.swapaxes(x @ y, -1, -2), x @ y))
    got = g(mx.array(a), mx.array(b))
    np.testing.assert_array_equal(np.array(got[0]), np.swapaxes(a @ b, -1, -2))
    np.testing.assert_array_equal(np.array(got[1]), a @ b)


def test_linear_weight_gradient_compiled_equals_eager():
    import kiln.nn as nn

    mx.random.seed(0)
    layer = nn.Linear(6, 4)
    x = mx.random.normal((3, 6))
    loss = lambda m, x: (m(x) ** 2).sum()
    eager = nn.value_and_grad(layer, loss)(layer, x)[1]["weight"]
    compiled = mx.compile(lambda x: nn.value_and_grad(layer, loss)(layer, x)[1]["weight"])(x)
    np.testing.assert_allclose(np.array(compiled), np.array(eager), rtol=1e-5, atol=1e-6)
    flat = mx.compile(lambda x: nn.value_and_grad(layer, loss)(layer, x)[1]["weight"].reshape(-1))
    np.testing.assert_allclose(np.array(flat(x)), np.array(eager).reshape(-1), rtol=1e-5,
                               atol=1e-6)
