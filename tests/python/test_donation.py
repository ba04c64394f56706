"""Buffer donation: a compiled elementwise kernel writes its output into an input's buffer
only when nothing else references it (not an array the user holds, not a view, not an
array exported to numpy, not one passed twice)."""

import numpy as np
import pytest

import kiln.core as mx

N = 1 << 16  # 256 KiB of float32: a second buffer shows in the memory counters


@pytest.fixture(autouse=True)
def sync_kernels(monkeypatch, tmp_path):
    # Donation is the C kernel's: build it on first use, in a fresh disk cache.
    monkeypatch.setenv("KILN_CPU_JIT", "sync")
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "kernels"))
    # Donation is the CPU backend's so far; the memory counters report the default device.
    previous = mx.default_device()
    mx.set_default_device(mx.cpu)
    yield
    mx.set_default_device(previous)


def step(x):
    return mx.sin(x) * 0.5 + 1.0


def np_step(x):
    return (np.sin(x) * np.float32(0.5) + np.float32(1.0)).astype(np.float32)


def fresh():
    x = mx.arange(N, dtype=mx.float32) / N
    mx.eval(x)
    return x


def test_steady_loop_allocates_no_second_buffer():
    f = mx.compile(step)
    x = fresh()
    ref = np.array(x)
    for _ in range(2):  # trace and build
        x = f(x)
        mx.eval(x)
        ref = np_step(ref)
    base = mx.get_active_memory()
    mx.reset_peak_memory()
    for _ in range(5):
        x = f(x)
        mx.eval(x)
        ref = np_step(ref)
    # In place: the loop never holds two (N,) buffers at once.
    assert mx.get_peak_memory() < base + N * 4 // 2
    np.testing.assert_allclose(np.array(x), ref, rtol=1e-6, atol=1e-6)


def test_without_compile_the_loop_needs_two_buffers():
    # The counter check above can fail: eager ops (no donation) hold input and output.
    x = fresh()
    mx.eval(step(x))
    base = mx.get_active_memory()
    mx.reset_peak_memory()
    x = mx.sin(x)
    mx.eval(x)
    assert mx.get_peak_memory() >= base + N * 4


def test_held_input_stays_intact():
    f = mx.compile(step)
    x = fresh()
    before = np.array(x)
    for _ in range(3):
        y = f(x)
        mx.eval(y)
        np.testing.assert_array_equal(np.array(x), before)
        np.testing.assert_allclose(np.array(y), np_step(before), rtol=1e-6, atol=1e-6)


def test_numpy_export_stays_intact():
    f = mx.compile(step)
    x = fresh()
    view = np.asarray(x)  # shares x's buffer
    before = view.copy()
    y = f(x)
    del x  # only the export and the graph hold the buffer now
    mx.eval(y)
    np.testing.assert_array_equal(view, before)
    np.testing.assert_allclose(np.array(y), np_step(before), rtol=1e-6, atol=1e-6)


def test_array_passed_twice_to_two_outputs():
    # Two outputs of one kernel: were the same input donated once per use, both outputs
    # would land in one buffer.
    g = mx.compile(lambda a, b: (mx.sin(a) + 1.0, mx.cos(b) * 2.0))
    for _ in range(2):
        x = fresh()
        xs = np.array(x)
        s, c = g(x, x)
        del x
        mx.eval(s, c)
        np.testing.assert_allclose(np.array(s), np.sin(xs) + 1, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(np.array(c), np.cos(xs) * 2, rtol=1e-6, atol=1e-6)


def test_views_and_other_dtypes():
    f = mx.compile(lambda x: (x * 3.0).astype(mx.int32))
    for _ in range(2):
        base = mx.arange(2 * N, dtype=mx.float32)
        y = f(base[::2])  # a strided view of a temporary: not written in place
        mx.eval(y)
        np.testing.assert_array_equal(np.array(y), np.arange(0, 2 * N, 2) * 3)
        z = f(mx.arange(N, dtype=mx.float32))  # a temporary of the same element size
        mx.eval(z)
        np.testing.assert_array_equal(np.array(z), np.arange(N) * 3)


def test_intermediate_of_a_longer_graph_is_donated():
    # A fused kernel after a non-elementwise op reuses that op's result buffer.
    f = mx.compile(lambda x: mx.exp(mx.cumsum(x) * 1e-6) - 1.0)
    x = fresh()
    xs = np.array(x).astype(np.float64)
    for _ in range(2):
        y = f(x)
        mx.eval(y)
    np.testing.assert_allclose(np.array(y), np.exp(np.cumsum(xs) * 1e-6) - 1, rtol=1e-4,
                               atol=1e-6)
    np.testing.assert_array_equal(np.array(x), xs.astype(np.float32))
