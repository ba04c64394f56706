"""Devices, streams, the stream= keyword, eval over pytrees."""

import threading

import kiln.core as mx
import numpy as np
import pytest


def test_device_types():
    assert repr(mx.cpu) == "DeviceType.cpu" and mx.gpu.name == "gpu"
    assert mx.cpu == mx.DeviceType.cpu and mx.cpu != mx.gpu
    assert repr(mx.Device(mx.gpu, 1)) == "Device(gpu, 1)"
    assert mx.Device(mx.cpu).type == mx.cpu
    assert mx.Device(mx.cpu) == mx.cpu and mx.Device(mx.cpu, 1) != mx.cpu
    expected = mx.gpu if mx.is_available(mx.gpu) else mx.cpu
    assert repr(mx.default_device()) == f"Device({expected.name}, 0)"
    assert mx.default_device() == expected
    assert repr(mx.default_stream(mx.cpu)) == "Stream(Device(cpu, 0), 0)"


@pytest.mark.skipif(mx.is_available(mx.gpu), reason="checks a machine without a GPU")
def test_availability():
    assert mx.is_available(mx.cpu) and mx.is_available(mx.Device(mx.cpu, 0))
    assert not mx.is_available(mx.gpu) and not mx.is_available(mx.Device(mx.cpu, 1))
    with pytest.raises(ValueError, match=r"\[set_default_device\]"):
        mx.set_default_device(mx.gpu)
    mx.set_default_device(mx.cpu)
    mx.set_default_device(mx.Device(mx.cpu, 0))
    with pytest.raises(TypeError):
        mx.set_default_device("cpu")


@pytest.mark.skipif(mx.is_available(mx.gpu), reason="checks a machine without a GPU")
def test_stream_context_and_keyword():
    with mx.stream(mx.cpu):
        assert (mx.arange(3) + 1).tolist() == [1, 2, 3]
    with mx.stream(mx.Device(mx.cpu)):
        pass
    with pytest.raises(ValueError, match=r"\[(default_)?stream\]"), mx.stream(mx.gpu):
        pass
    assert mx.add(1, 2, stream=mx.cpu).item() == 3
    assert mx.sum(mx.arange(3), stream=mx.Device(mx.cpu)).item() == 3
    assert mx.arange(3).sum(stream=mx.cpu).item() == 3
    assert mx.zeros((2,), stream=mx.default_stream(mx.cpu)).tolist() == [0, 0]
    with pytest.raises(ValueError, match=r"\[(default_)?stream\]"):
        mx.add(1, 2, stream=mx.gpu)
    with pytest.raises(TypeError, match=r"\[stream\]"):
        mx.add(1, 2, stream="cpu")


def test_eval_pytrees():
    a, b, c = mx.arange(3) * 2, mx.ones((2,)) + 1, mx.array(1) + 1
    assert mx.eval(a, [b, {"k": (c, "x")}], 1, None) is None
    mx.eval()
    assert a.tolist() == [0, 2, 4] and c.item() == 2


def test_conversions_and_async_eval(device):
    x = np.random.default_rng(3).uniform(-3, 3, (100,)).astype(np.float32)
    y = mx.exp(mx.array(x))
    mx.async_eval(y)
    mx.synchronize()
    np.testing.assert_allclose(np.array(y), np.exp(x.astype(np.float64)), rtol=2e-6)
    assert float(mx.sum(y).item()) == pytest.approx(float(np.exp(x.astype(np.float64)).sum()), rel=1e-5)
    assert "array" in repr(y)


def test_eval_errors_are_exceptions():
    # Errors surface at the call site, never as a panic.
    with pytest.raises(ValueError):
        mx.eval(mx.reshape(mx.arange(6), (4, 2)))


def test_threads():
    # Evaluation releases the GIL; concurrent use from threads must work.
    results = [None] * 4

    def work(i):
        x = mx.arange(10000, dtype=mx.int64) * i
        results[i] = mx.sum(x).item()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [sum(range(10000)) * i for i in range(4)]
