"""Buffer donation in the fused interpreter tier (no C kernel: KILN_CPU_JIT=off), as the C
kernels do it: a steady `x = f(x)` loop runs in place, and a buffer something else
references is never written."""

import numpy as np
import pytest

import kiln.core as mx

N = 1 << 16  # 256 KiB of float32: a second buffer shows in the memory counters


@pytest.fixture(autouse=True)
def interpreter_only(monkeypatch):
    monkeypatch.setenv("KILN_CPU_JIT", "off")
    previous = mx.default_device()
    mx.set_default_device(mx.cpu)  # donation is the CPU backend's; counters follow it
    yield
    mx.set_default_device(previous)


def step(x):
    # Constants unlike any other test's, so no C kernel of this program is loaded already.
    return mx.cos(x) * 0.375 + 0.125


def np_step(x):
    return (np.cos(x) * np.float32(0.375) + np.float32(0.125)).astype(np.float32)


def fresh():
    x = mx.arange(N, dtype=mx.float32) / N
    mx.eval(x)
    return x


def test_interpreter_steady_loop_runs_in_place():
    f = mx.compile(step)
    x = fresh()
    ref = np.array(x)
    for _ in range(2):
        x = f(x)
        mx.eval(x)
        ref = np_step(ref)
    base = mx.get_active_memory()
    mx.reset_peak_memory()
    runs_before = c_kernel_runs(f)
    for _ in range(5):
        x = f(x)
        mx.eval(x)
        ref = np_step(ref)
    # Chunk intermediates are small; the loop never holds two (N,) buffers at once.
    assert mx.get_peak_memory() < base + N * 4 // 2
    np.testing.assert_allclose(np.array(x), ref, rtol=1e-6, atol=1e-6)
    assert c_kernel_runs(f) == runs_before  # the interpreter ran every call


def c_kernel_runs(f):
    """Runs of the process's C kernels (loaded by any test)."""
    return sum(k["runs"] for k in f.explain()["kernels"]["kernels"])


@pytest.mark.parametrize("hold", ["array", "numpy", "twice", "view"])
def test_interpreter_never_writes_a_referenced_buffer(hold):
    f = mx.compile(lambda a, b: mx.cos(a) * 0.375 + b)
    x = fresh()
    before = np.array(x, copy=True)
    kept = {"array": lambda: x, "numpy": lambda: np.asarray(x), "twice": lambda: None,
            "view": lambda: x[::2]}[hold]()
    y = f(x, x) if hold == "twice" else f(x, mx.ones((N,)))
    mx.eval(y)
    np.testing.assert_array_equal(np.array(x), before)
    want = np.cos(before) * np.float32(0.375) + (before if hold == "twice" else 1)
    np.testing.assert_allclose(np.array(y), want, rtol=1e-6, atol=1e-6)
    del kept


@pytest.mark.parametrize("n", [1, 4095, 4097, 3 * 4096 + 5])
def test_interpreter_in_place_across_chunk_borders(n):
    f = mx.compile(lambda a: mx.cos(a) * 0.375 + a)
    x = mx.arange(n, dtype=mx.float32) / 7
    mx.eval(x)
    ref = np.array(x, copy=True)
    for _ in range(3):
        x = f(x)
        ref = (np.cos(ref) * np.float32(0.375) + ref).astype(np.float32)
    np.testing.assert_allclose(np.array(x), ref, rtol=1e-6, atol=1e-6)
