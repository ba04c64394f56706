"""mx.compile: results equal eager, traces are cached by signature, constants and trees are
keyed unambiguously, state is captured, transforms compose, bad uses are clear errors, and
the interpreter tier works with no (or a slow) C compiler."""

import functools
import inspect
import os
import time
from typing import NamedTuple

import numpy as np
import pytest

import kiln.core as mx
from kiln import _core


@pytest.fixture(autouse=True)
def sync_kernels(monkeypatch, tmp_path):
    # Deterministic: kernels build on first use, in a fresh disk cache.
    monkeypatch.setenv("KILN_CPU_JIT", "sync")
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "kernels"))
    yield


def gelu(x):
    return x * (1 + mx.erf(x / 1.4142135)) / 2


def gelu_tanh(x):
    return 0.5 * x * (1 + mx.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))


def silu_mul(a, b):
    return a * mx.sigmoid(a) * b


RNG = np.random.default_rng(0)


def data(shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def close(got, want, rtol=2e-6, atol=1e-6):
    np.testing.assert_allclose(
        np.array(got.astype(mx.float32)), np.array(want.astype(mx.float32)), rtol=rtol, atol=atol
    )


@pytest.mark.parametrize("fun", [gelu, gelu_tanh])
@pytest.mark.parametrize("shape", [(), (0,), (5,), (3, 7), (2, 3, 4001)])
def test_compiled_matches_eager(fun, shape, device):
    x = mx.array(data(shape))
    close(mx.compile(fun)(x), fun(x))


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16, mx.float64])
def test_half_and_double_match_eager_exactly(dtype, device):
    x = mx.array(data((1000,))).astype(dtype)
    got, want = mx.compile(gelu_tanh)(x), gelu_tanh(x)
    assert got.dtype == want.dtype == dtype
    if dtype == mx.float64:
        np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-14)
    else:
        assert np.array_equal(np.array(got.view(mx.uint16)), np.array(want.view(mx.uint16)))


@pytest.mark.parametrize("dtype", [mx.float32, mx.float16, mx.bfloat16],
                         ids=["float32", "float16", "bfloat16"])
def test_compiled_gelu_on_many_rows_and_a_transpose(dtype, device):
    if device == mx.cpu:
        pytest.skip("the CPU's fused kernels of these: test_compiled_matches_eager and "
                    "test_half_and_double_match_eager_exactly")
    f = mx.compile(gelu)
    x = mx.array(data((1000, 33))).astype(dtype)
    tol = {mx.float32: 4e-5, mx.float16: 8e-3, mx.bfloat16: 8e-2}[dtype]
    close(f(x), gelu(x), rtol=tol, atol=tol)
    y = mx.array(data((5, 7))).astype(dtype)
    close(f(y.T), gelu(y.T), rtol=tol, atol=tol)


def test_integer_edge_cases_match_eager():
    def f(a, b):
        return (a * b) // b + a % b - (a << b) + mx.maximum(a, b)

    a = mx.array(np.array([-128, -1, 0, 1, 7, 127, -77, 100], dtype=np.int8))
    b = mx.array(np.array([-1, 0, 3, -3, 0, 9, 2, -5], dtype=np.int8))
    assert np.array_equal(np.array(mx.compile(f)(a, b)), np.array(f(a, b)))
    for dt in (np.int32, np.uint32, np.int64, np.uint8):
        a2, b2 = mx.array(np.array(a).astype(dt)), mx.array(np.array(b).astype(dt))
        assert np.array_equal(np.array(mx.compile(f)(a2, b2)), np.array(f(a2, b2)))


def test_nan_inf_and_casts():
    def f(x):
        y = mx.where(x > 1, x * 2.5, mx.exp(x))
        return y.astype(mx.int32), y.astype(mx.uint8), y.astype(mx.bool_), mx.isnan(y)

    x = mx.array(np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -3.7, 2.5], np.float32))
    for g, w in zip(mx.compile(f)(x), f(x)):
        assert np.array_equal(np.array(g), np.array(w))


def test_strided_broadcast_and_negative_strides():
    a = mx.array(data((6, 5)))
    row = mx.array(data((5,)))
    f = mx.compile(silu_mul)
    close(f(a.T, mx.ones((5, 1))), silu_mul(a.T, mx.ones((5, 1))))
    close(f(a[::-1, ::-2], row[::-2]), silu_mul(a[::-1, ::-2], row[::-2]))
    close(f(a, row), silu_mul(a, row))
    ten = mx.array(data((2,) * 10))
    close(f(ten, ten.transpose()), silu_mul(ten, ten.transpose()))


def test_graph_shape():
    x = mx.array(data((64,)))
    c = mx.compile(gelu)
    c(x)
    entry = c.explain()["entries"][0]
    assert len(entry["graph"]) == 2, entry["graph"]  # one fused node + return
    assert entry["graph"][0].split(" = ")[1].startswith("Compiled_divide_erf_add_multiply")
    lone = mx.compile(lambda x: mx.exp(x))
    lone(x)
    assert lone.explain()["entries"][0]["regions"] == []


def test_traces_once_per_signature():
    calls = []

    def f(x, y):
        calls.append(1)
        return x + y

    c = mx.compile(f)
    x = mx.zeros((2, 3))
    for _ in range(3):
        c(x, x)
    assert len(calls) == 1
    c(mx.zeros((3, 3)), mx.zeros((3, 3)))
    assert len(calls) == 2
    c(x.astype(mx.float16), x.astype(mx.float16))
    assert len(calls) == 3
    info = c.explain()
    assert info["traces"] == 3 and "dtype" in info["last_retrace"]
    c(x, x)
    assert len(calls) == 3 and c.explain()["cache_hits"] == 3


def test_constants_are_keyed_unambiguously():
    seen = []

    def f(x, c):
        seen.append(c)
        return x * 2 if c is None or isinstance(c, (int, float, str)) else x + len(c)

    g = mx.compile(f)
    x = mx.ones((2,))
    for c in [1, True, 1.0, "1", None, [1], (1,), [1, 2], float("nan"), float("nan"), 1]:
        g(x, c)
    # nan twice is one entry; the final 1 is cached.
    assert len(seen) == 9
    with pytest.raises(ValueError, match="compile"):
        g(x, object())
    with pytest.raises(ValueError, match="compile"):
        g(x, {1, 2})


def test_none_and_array_in_one_place_are_different_entries():
    g = mx.compile(lambda x, y=None: x if y is None else x + y)
    x = mx.ones((2,))
    assert np.array(g(x)).tolist() == [1, 1]
    assert np.array(g(x, x)).tolist() == [2, 2]
    assert np.array(g(x, y=x)).tolist() == [2, 2]


class Pair(NamedTuple):
    a: mx.array
    b: mx.array


def test_trees_in_and_out_keep_their_types():
    def f(p, d, *, scale):
        return {"sum": p.a + p.b * scale, "pair": Pair(d["x"], p.a)}, [p.b]

    g = mx.compile(f)
    p = Pair(mx.ones((2,)), mx.full((2,), 3.0))
    out, rest = g(p, {"x": mx.zeros((2,))}, scale=2.0)
    assert isinstance(out["pair"], Pair) and isinstance(rest, list)
    assert np.array(out["sum"]).tolist() == [7, 7]


def test_output_structure_depends_on_a_constant():
    g = mx.compile(lambda x, n: tuple(x * i for i in range(n)) if n > 1 else x)
    x = mx.ones((2,))
    assert isinstance(g(x, 3), tuple) and len(g(x, 3)) == 3
    assert isinstance(g(x, 1), mx.array)


def test_wrapper_keeps_name_doc_signature():
    def fancy(x, y=2):
        """Doc of fancy."""
        return x * y

    c = mx.compile(fancy)
    assert c.__name__ == "fancy" and c.__doc__ == "Doc of fancy."
    assert str(inspect.signature(c)) == "(x, y=2)"

    @functools.wraps(fancy)
    def wrapper(*a, **k):
        return c(*a, **k)

    assert wrapper.__name__ == "fancy"
    assert np.array(wrapper(mx.ones((1,)))).tolist() == [2]

    @functools.partial(mx.compile, shapeless=False)
    def deco(x):
        return x + 1

    assert np.array(deco(mx.ones((1,)))).tolist() == [2]


def test_closure_over_an_argument_is_a_value_error():
    x = mx.ones((3,))
    with pytest.raises(ValueError, match="closure"):
        mx.compile(lambda y: x + 1)(x)


def test_closure_arrays_are_frozen_constants():
    w = mx.array([1.0, 2.0])
    g = mx.compile(lambda x: x * w)
    assert np.array(g(mx.ones((2,)))).tolist() == [1, 2]


def test_evaluating_a_placeholder_names_compile():
    def f(x):
        return x * x.item()

    with pytest.raises(ValueError, match="compile"):
        mx.compile(f)(mx.ones(()))

    def g(x):
        np.array(x)
        return x

    with pytest.raises(ValueError, match="compile"):
        mx.compile(g)(mx.ones((2,)))


def test_failed_trace_leaves_no_entry():
    state = {"fail": True}

    def f(x):
        if state["fail"]:
            raise KeyError("boom")
        return x + 1

    g = mx.compile(f)
    with pytest.raises(KeyError):
        g(mx.ones((2,)))
    assert g.explain()["entries"] == []
    state["fail"] = False
    assert np.array(g(mx.ones((2,)))).tolist() == [2, 2]


def test_lazy_inputs_work():
    x = mx.ones((4,)) * 3  # unevaluated
    assert np.array(mx.compile(gelu)(x)).tolist() == pytest.approx(np.array(gelu(x)).tolist())


def test_captured_state_is_read_and_written_back():
    state = {"count": mx.zeros(()), "hist": [mx.zeros((2,))]}

    def step(x):
        state["count"] = state["count"] + 1
        state["hist"][0] = state["hist"][0] + x
        return state["count"] * 10

    g = mx.compile(step, inputs=state, outputs=state)
    for i in range(1, 4):
        out = g(mx.ones((2,)))
        assert out.item() == 10 * i
    assert state["count"].item() == 3
    assert np.array(state["hist"][0]).tolist() == [3, 3]
    assert g.explain()["traces"] == 1


def test_state_is_restored_when_the_trace_fails():
    state = [mx.zeros((1,))]

    def bad(x):
        state[0] = state[0] + x
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        mx.compile(bad, inputs=state, outputs=state)(mx.ones((1,)))
    assert np.array(state[0]).tolist() == [0]


def test_disable_and_enable_compile():
    calls = []

    def f(x):
        calls.append(1)
        return x + 1

    g = mx.compile(f)
    x = mx.ones((1,))
    g(x)
    g(x)
    mx.disable_compile()
    try:
        g(x)
        g(x)
        assert len(calls) == 3
    finally:
        mx.enable_compile()
    g(x)
    assert len(calls) == 3


def test_transforms_compose():
    def loss(w, x):
        return mx.sum(gelu(w * x))

    w, x = mx.array(data((5,))), mx.array(data((5,)))
    want = mx.grad(loss)(w, x)
    close(mx.grad(mx.compile(loss))(w, x), want, rtol=1e-5)
    close(mx.compile(mx.grad(loss))(w, x), want, rtol=1e-5)
    v, g = mx.compile(mx.value_and_grad(loss))(w, x)
    close(g, want, rtol=1e-5)
    batched = mx.array(data((3, 5)))
    close(mx.vmap(mx.compile(gelu))(batched), gelu(batched))
    _, tangent = mx.jvp(mx.compile(gelu), [w], [mx.ones((5,))])
    _, want_t = mx.jvp(gelu, [w], [mx.ones((5,))])
    close(tangent[0], want_t[0], rtol=1e-5)


def test_nested_compiled_functions_are_inlined():
    inner = mx.compile(lambda x: mx.exp(x) * 2)
    outer = mx.compile(lambda x: inner(x) + 1)
    x = mx.array(data((8,)))
    close(outer(x), mx.exp(x) * 2 + 1)
    entry = outer.explain()["entries"][0]
    assert len(entry["graph"]) == 2, entry["graph"]


def test_other_argument_types_are_clear_errors():
    class Model:
        pass

    with pytest.raises(ValueError, match="Model"):
        mx.compile(lambda m, x: x)(Model(), mx.ones((1,)))


def test_interpreter_tier_without_a_compiler(monkeypatch):
    monkeypatch.setenv("KILN_CC", "/nonexistent/cc")
    monkeypatch.setenv("KILN_CPU_JIT", "async")
    x = mx.array(data((10000,)))

    def f(x):  # a program no other test builds
        return mx.tanh(x * 1.25 + 0.125) * x

    close(mx.compile(f)(x), f(x))


def test_interpreter_never_allocates_intermediates_at_full_size(monkeypatch):
    monkeypatch.setenv("KILN_CPU_JIT", "off")
    n = 1 << 20
    x = mx.array(data((n,)))
    mx.eval(x)

    def chain(x):
        for _ in range(6):
            x = mx.sin(x) * 1.5 + 0.25
        return x

    g = mx.compile(chain)
    mx.eval(g(x))  # warm: trace and cache
    mx.reset_peak_memory()
    base = mx.get_active_memory()
    y = g(x)
    mx.eval(y)
    # The output is one full-size array; the chunked intermediates are a few KB each.
    assert mx.get_peak_memory() - base < 4 * n + (1 << 20)
    close(y, chain(x), rtol=1e-5)


@pytest.mark.cpu  # counts C compiler builds
def test_first_call_does_not_wait_for_a_slow_compiler(monkeypatch, tmp_path):
    # Earlier tests' builds still in flight (an empty cache in CI) would count below.
    _core._wait_for_builds()
    slow = tmp_path / "slow-cc"
    slow.write_text('#!/bin/sh\nsleep 3\nexec cc "$@"\n')
    slow.chmod(0o755)
    monkeypatch.setenv("KILN_CC", str(slow))
    monkeypatch.setenv("KILN_CPU_JIT", "async")

    def f(x):  # unique program: never cached before
        return mx.cos(x * 0.3125) - x * 0.0625

    x = mx.array(data((4096,)))
    start = time.perf_counter()
    y = mx.compile(f)(x)
    mx.eval(y)
    assert time.perf_counter() - start < 2.5
    close(y, f(x))
    before = _core._jit_stats()["builds"]
    _core._wait_for_builds()
    assert _core._jit_stats()["builds"] == before + 1


@pytest.mark.cpu  # counts C compiler builds
def test_disk_cache_is_reused_and_survives_corruption(tmp_path, monkeypatch):
    cache = tmp_path / "disk"
    monkeypatch.setenv("KILN_CACHE_DIR", str(cache))
    script = (
        "import kiln.core as mx\n"
        "from kiln import _core\n"
        "f = mx.compile(lambda x: mx.exp(x * 0.1875) + x)\n"
        "print(f(mx.ones((3,))).tolist())\n"
        "s = _core._jit_stats()\n"
        "print(s['builds'], s['disk_hits'])\n"
    )
    import subprocess
    import sys

    env = dict(os.environ, KILN_CACHE_DIR=str(cache), KILN_CPU_JIT="sync", KILN_DISABLE_GPU="1")
    run = lambda: subprocess.run(  # noqa: E731
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    first = run()
    assert first[1] == "1 0"
    second = run()
    assert second[1] == "0 1" and second[0] == first[0]
    for so in cache.glob("*.so"):
        so.write_bytes(b"garbage")
    third = run()
    assert third[1] == "1 0" and third[0] == first[0]


def test_random_state_capture_advances_the_key():
    def noisy(x):
        return x + mx.random.uniform(shape=x.shape)

    x = mx.zeros((4,))
    mx.random.seed(7)
    frozen = mx.compile(noisy)
    a, b = np.array(frozen(x)), np.array(frozen(x))
    assert np.array_equal(a, b)  # without the state captured, the numbers repeat (MLX)

    mx.random.seed(7)
    stateful = mx.compile(noisy, inputs=mx.random.state, outputs=mx.random.state)
    c, d = np.array(stateful(x)), np.array(stateful(x))
    assert not np.array_equal(c, d)
    mx.random.seed(7)
    e, f = np.array(noisy(x)), np.array(noisy(x))
    np.testing.assert_array_equal(c, e)
    np.testing.assert_array_equal(d, f)
    assert stateful.explain()["traces"] == 1


def test_compiled_functions_run_from_several_threads():
    import threading

    g = mx.compile(gelu)
    x = mx.array(data((1000,)))
    want = np.array(gelu(x))
    errors = []

    def work():
        try:
            for _ in range(20):
                np.testing.assert_allclose(np.array(g(x)), want, rtol=2e-6, atol=1e-6)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_kiln_log_prints_traces(monkeypatch, capfd):
    monkeypatch.setenv("KILN_LOG", "compile")
    mx.compile(gelu)(mx.ones((3,)))
    err = capfd.readouterr().err
    assert "[kiln compile] traced gelu (first call)" in err and "Compiled_" in err


def test_shapeless_follows_new_shapes_without_retracing():
    calls = []

    def f(x, b):
        calls.append(1)
        return mx.tanh(x * 2.0 + b) - 1

    g = mx.compile(f, shapeless=True)
    for shape in [(3, 4), (5, 4), (7, 2), (11,)]:
        x, b = mx.array(data(shape)), mx.array(data(shape[-1:]))
        close(g(x, b), f(x, b))
    assert g.explain()["traces"] == 2  # one per ndim
    assert len(calls) == 2 + 4  # two traces, four eager reference calls


def test_shapeless_baked_shapes_raise_clear_errors():
    g = mx.compile(lambda x: x.reshape(2, 3) + 1, shapeless=True)
    g(mx.ones((6,)))
    with pytest.raises(ValueError, match="reshape"):
        g(mx.ones((8,)))
