"""Streams and device probes as mlx.core has them on a CPU-only Linux build."""

import threading

import kiln.core as mx
import numpy as np
import pytest


def test_new_streams_have_fresh_indices():
    a, b = mx.new_stream(mx.cpu), mx.new_stream(mx.cpu)
    assert a != b and a == a
    assert a.device == mx.cpu
    assert repr(a).startswith("Stream(Device(cpu, 0), ")
    assert hash(a) != hash(b)
    assert mx.default_stream(mx.cpu) == mx.default_stream(mx.cpu)
    assert repr(mx.default_stream(mx.cpu)) == "Stream(Device(cpu, 0), 0)"


def test_ops_run_on_a_new_stream():
    s = mx.new_stream(mx.cpu)
    x = mx.add(mx.array([1.0, 2.0]), 1, stream=s)
    np.testing.assert_array_equal(np.array(x), [2.0, 3.0])
    with mx.stream(s):
        assert mx.default_stream(mx.cpu) == s
        np.testing.assert_array_equal(np.array(mx.arange(3) * 2), [0, 2, 4])
    mx.synchronize(s)
    mx.synchronize()
    mx.synchronize(mx.cpu)


def test_set_default_stream_and_clear_streams():
    s = mx.new_stream(mx.cpu)
    try:
        mx.set_default_stream(s)
        assert mx.default_stream(mx.cpu) == s
        assert mx.default_device() == (mx.gpu if mx.is_available(mx.gpu) else mx.cpu)
        np.testing.assert_array_equal(np.array(mx.ones((2,)) + 1), [2, 2])
        seen = {}
        t = threading.Thread(target=lambda: seen.setdefault("s", mx.default_stream(mx.cpu)))
        t.start()
        t.join()
        assert seen["s"] != s  # per-thread, as in MLX
    finally:
        mx.clear_streams()
    assert repr(mx.default_stream(mx.cpu)) == "Stream(Device(cpu, 0), 0)"
    with pytest.raises(TypeError):
        mx.set_default_stream(mx.cpu)


def test_thread_local_stream():
    t = mx.new_thread_local_stream(mx.cpu)
    assert t == t and t != mx.new_thread_local_stream(mx.cpu)
    assert t.device == mx.cpu
    assert repr(t).startswith("ThreadLocalStream(Device(cpu, 0), ")
    assert isinstance(t, mx.ThreadLocalStream)
    np.testing.assert_array_equal(np.array(mx.add(mx.ones(2), 1, stream=t)), [2, 2])
    seen = {}

    def worker(name):
        with mx.stream(t):
            seen[name] = repr(mx.default_stream(mx.cpu))
            mx.eval(mx.ones(3) * 2)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert seen[0] != seen[1]  # a different stream in each thread
    mx.synchronize(t)


@pytest.mark.skipif(mx.is_available(mx.gpu), reason="this machine has a GPU")
def test_gpu_is_unavailable():
    for f in (mx.new_stream, mx.default_stream, mx.new_thread_local_stream, mx.synchronize):
        with pytest.raises(ValueError):
            f(mx.gpu)
    assert mx.metal.is_available() is False
    assert mx.cuda.is_available() is False
    assert mx.device_count(mx.cpu) == 1
    assert mx.device_count(mx.gpu) == 0
    assert mx.device_info(mx.gpu) == {}


def test_device_info_matches_mlx():
    info = mx.device_info(mx.cpu)
    assert set(info) == {"architecture", "device_name"}
    mlx = pytest.importorskip("mlx.core")
    assert info == mlx.device_info(mlx.cpu)


def test_metal_module_and_wired_limit():
    assert mx.set_wired_limit(1 << 20) == 0
    assert mx.set_wired_limit(0) == 0
    with pytest.warns(DeprecationWarning):
        assert mx.metal.get_active_memory() == mx.get_active_memory()
    with pytest.warns(DeprecationWarning):
        assert mx.metal.device_info() == {}
    mx.metal.start_capture("unused")
    mx.metal.stop_capture()
