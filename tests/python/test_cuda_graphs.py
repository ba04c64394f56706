"""Compiled GPU functions replayed as CUDA graphs: every call from the third on relaunches one
captured graph. Results must equal eager evaluation and the lazy replay
(KILN_CUDA_GRAPHS=0) on every call, with fresh inputs each time, and outputs a caller keeps
must never be overwritten by later calls.

Skipped where no GPU is available; run on the GPU machine with
`python -m pytest tests/python/test_cuda_graphs.py`."""

import os

import numpy as np
import pytest

import kiln.core as mx
from conftest import GPU_ONLY

pytestmark = GPU_ONLY  # the gpu mark, and skipped where no GPU is available

RNG = np.random.default_rng(11)
CALLS = 6  # lazy, direct, capture, then graph launches


def rand(shape, dtype=mx.float32):
    return mx.array(RNG.standard_normal(shape).astype(np.float32)).astype(dtype)


def np32(x):
    return np.array(x.astype(mx.float32)) if x.dtype in (mx.float16, mx.bfloat16) else np.array(x)


def check_calls(fun, make_args, rtol=1e-5, atol=1e-5):
    """Calls compile(fun) CALLS times on fresh arguments; every result (kept to the end)
    equals fun run eagerly on the same arguments."""
    compiled = mx.compile(fun)
    kept = []
    for _ in range(CALLS):
        args = make_args()
        got = compiled(*args)
        want = fun(*args)
        kept.append((got, want))
    for got, want in kept:
        got = got if isinstance(got, (tuple, list)) else (got,)
        want = want if isinstance(want, (tuple, list)) else (want,)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(np32(g), np32(w), rtol=rtol, atol=atol, equal_nan=True)
    return compiled


def gelu_mlp(x, w1, w2):
    h = x @ w1
    h = 0.5 * h * (1 + mx.erf(h / np.sqrt(2.0)))
    return (h @ w2 + x).sum(axis=-1), mx.softmax(h, axis=-1)


@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16])
def test_mlp_every_call_matches_eager(dtype):
    tol = 1e-4 if dtype == mx.float32 else 5e-2
    check_calls(
        gelu_mlp,
        lambda: (rand((8, 64), dtype), rand((64, 128), dtype), rand((128, 64), dtype)),
        rtol=tol,
        atol=tol,
    )


def test_reductions_scans_sort_and_indexing():
    def f(x, idx):
        return (
            mx.cumsum(x, axis=1),
            mx.sort(x, axis=-1),
            mx.argmax(x, axis=0),
            x[idx] * 2,
            mx.logsumexp(x, axis=-1),
            mx.concatenate([x, x * 3], axis=0).max(axis=1),
        )

    def args():
        return rand((33, 17)), mx.array(RNG.integers(0, 33, size=(9,)).astype(np.int32))

    check_calls(f, args)


def test_outputs_that_are_inputs_constants_and_views():
    const = rand((4, 5))

    def f(x, y):
        return x, const, x.T, y[1:3], (x + 1).reshape(20), x + const

    check_calls(f, lambda: (rand((4, 5)), rand((6, 2))))


def test_strided_and_broadcast_inputs():
    def f(x, b):
        return mx.exp(x) * b

    def args():
        x = rand((16, 24))
        return x.T[::2], rand((1, 16))

    check_calls(f, args)


def test_graph_equals_lazy_replay(monkeypatch):
    args = [(rand((32, 48)), rand((48, 16)), rand((16, 48))) for _ in range(CALLS)]
    results = {}
    for mode in ("1", "0"):
        monkeypatch.setenv("KILN_CUDA_GRAPHS", mode)
        compiled = mx.compile(gelu_mlp)
        results[mode] = [compiled(*a) for a in args]
    for with_graph, lazy in zip(results["1"], results["0"]):
        for g, l in zip(with_graph, lazy):
            np.testing.assert_array_equal(np.array(g), np.array(l))


def test_training_state_through_inputs_and_outputs():
    """A compiled SGD step that reads and writes captured state, with the RNG captured too:
    the compiled run follows the eager one step for step."""

    def run(compiled_step):
        mx.random.seed(3)
        state = {"w": mx.array(np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8))}
        x = mx.array(np.arange(32, dtype=np.float32).reshape(4, 8) / 32)

        def loss(w, x):
            noise = mx.random.normal(x.shape) * 0.01
            return (mx.tanh((x + noise) @ w) ** 2).mean()

        def step(x):
            l, g = mx.value_and_grad(loss)(state["w"], x)
            state["w"] = state["w"] - 0.1 * g
            return l

        if compiled_step:
            step = mx.compile(step, inputs=[state, mx.random.state],
                              outputs=[state, mx.random.state])
        losses = [step(x) for _ in range(8)]
        mx.eval(losses, state)
        return [l.item() for l in losses], np.array(state["w"])

    eager_losses, eager_w = run(False)
    comp_losses, comp_w = run(True)
    np.testing.assert_allclose(comp_losses, eager_losses, rtol=1e-5)
    np.testing.assert_allclose(comp_w, eager_w, rtol=1e-5, atol=1e-6)


def test_op_without_gpu_kernel_falls_back():
    """A complex64 sort has no GPU kernel: the entry keeps the lazy replay (CPU for that op)."""

    def f(x):
        z = x.astype(mx.complex64) * (1 + 2j)
        return mx.abs(mx.sort(z, axis=-1)) + x

    check_calls(f, lambda: (rand((5, 7)),))


def test_memory_does_not_grow_across_calls():
    compiled = mx.compile(gelu_mlp)
    args = (rand((64, 64)), rand((64, 64)), rand((64, 64)))
    for _ in range(4):
        mx.eval(compiled(*args))
    before = mx.get_active_memory()
    for _ in range(20):
        mx.eval(compiled(*args))
    assert mx.get_active_memory() <= before


def test_graph_is_captured(monkeypatch, capfd):
    monkeypatch.setenv("KILN_LOG", "compile")
    compiled = mx.compile(lambda x: mx.exp(x) @ x + 1)
    for _ in range(4):
        mx.eval(compiled(rand((16, 16))))
    assert "captured a device graph" in capfd.readouterr().err


def test_unchanged_inputs_are_not_copied_again_but_new_ones_are():
    """Weights passed on every call stay in the graph's buffers; a new array (even of equal
    shape) is copied in."""
    w1, w2 = rand((64, 128)), rand((128, 64))
    check_calls(gelu_mlp, lambda: (rand((8, 64)), w1, w2), rtol=1e-4, atol=1e-4)
    compiled = mx.compile(gelu_mlp)
    x = rand((8, 64))
    for _ in range(4):
        compiled(x, w1, w2)
    w3 = w1 * 2
    got = compiled(x, w3, w2)
    np.testing.assert_allclose(np.array(got[0]), np.array(gelu_mlp(x, w3, w2)[0]), rtol=1e-4, atol=1e-4)


def test_explain_reports_the_graph():
    compiled = mx.compile(lambda x: mx.exp(x) + mx.sum(x))  # two kernels: a graph pays
    x = rand((8,))
    mx.eval(compiled(x))
    assert compiled.explain()["entries"][0]["cuda_graph"]["state"] == "lazy"
    for _ in range(3):  # direct run, capture + launch, launch
        mx.eval(compiled(x))
    info = compiled.explain()
    graph = info["entries"][0]["cuda_graph"]
    assert graph["state"] == "captured" and graph["nodes"] >= 2 and graph["launches"] == 2
    np.testing.assert_allclose(
        np.array(compiled(x)), np.exp(np.array(x)) + np.array(x).sum(), rtol=1e-5
    )
    cuda = info["kernels"]["cuda"]
    fused = [k for k in cuda["kernels"] if k["name"] == "kiln_Compiled_exp_add"]
    assert fused and "kiln_Compiled_exp_add" in fused[0]["source"]
    assert cuda["builds"] + cuda["disk_hits"] >= len(cuda["kernels"]) >= 1


def test_one_kernel_entries_launch_it_directly():
    """A graph launch and the copy of its outputs are two driver calls; one fused kernel is
    launched straight into fresh outputs on every call instead, never captured."""
    compiled = mx.compile(lambda x: mx.exp(x) + 1)
    kept = []
    for _ in range(5):
        x = rand((8,))
        kept.append((x, compiled(x)))
    graph = compiled.explain()["entries"][0]["cuda_graph"]
    assert graph["state"] == "direct" and graph["nodes"] == 0 and graph["launches"] == 4
    for x, got in kept:
        np.testing.assert_allclose(np.array(got), np.exp(np.array(x)) + 1, rtol=1e-6)


def test_shapeless_entries_keep_the_lazy_replay():
    compiled = mx.compile(lambda x: mx.exp(x) + 1, shapeless=True)
    for n in (3, 5, 7, 9):
        x = rand((n,))
        np.testing.assert_allclose(np.array(compiled(x)), np.exp(np.array(x)) + 1, rtol=1e-6)
    assert compiled.explain()["entries"][0]["cuda_graph"] is None


def test_threads_capture_and_evaluate_side_by_side():
    """One thread's capture never records another thread's work: both stay correct."""
    import threading

    errors = []
    x, w1, w2 = rand((8, 64)), rand((64, 128)), rand((128, 64))
    want = [np.array(a) for a in gelu_mlp(x, w1, w2)]
    y = rand((256, 256))
    want_y = np.array(y) @ np.array(y)

    def compiled_calls():
        try:
            for _ in range(3):
                compiled = mx.compile(gelu_mlp)  # a fresh entry: lazy, direct, capture, ...
                for _ in range(5):
                    got = compiled(x, w1, w2)
                    for g, w in zip(got, want):
                        np.testing.assert_allclose(np.array(g), w, rtol=1e-4, atol=1e-4)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def eager_calls():
        try:
            for _ in range(40):
                np.testing.assert_allclose(np.array(y @ y), want_y, rtol=1e-3, atol=1e-3)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=compiled_calls), threading.Thread(target=eager_calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
