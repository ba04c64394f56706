"""Regression tests for reliability defects: shapeless replay when a later call broadcasts
where the trace did not (every JIT tier), arrays whose evaluation failed, and kernel panics
reaching Python as exceptions."""

import kiln.core as mx
import numpy as np
import pytest

from kiln import _core

TIERS = ["off", "sync", "async"]


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


@pytest.mark.parametrize("tier", TIERS)
def test_shapeless_broadcast_appears_on_a_later_call(tier, monkeypatch):
    monkeypatch.setenv("KILN_CPU_JIT", tier)
    f = mx.compile(lambda a, b: mx.sigmoid(b) + a, shapeless=True)
    mx.eval(f(mx.zeros((2, 3)), mx.zeros((2, 3))))
    b = np.array([[-10.0], [0.0], [1.0], [10.0]], np.float32)
    for _ in range(3):  # the async tier builds its kernel meanwhile
        out = f(mx.zeros((4, 3)), mx.array(b))
        np.testing.assert_allclose(np.array(out), np.broadcast_to(_sigmoid(b), (4, 3)), rtol=1e-6)
    a = np.random.default_rng(0).normal(size=(300, 200)).astype(np.float32)
    c = np.random.default_rng(1).normal(size=(300, 1)).astype(np.float32)
    out = f(mx.array(a), mx.array(c))
    np.testing.assert_allclose(np.array(out), _sigmoid(c) + a, rtol=1e-5, atol=1e-6)
    out = f(mx.array(c), mx.array(a))  # the broadcast moved to the other operand
    np.testing.assert_allclose(np.array(out), _sigmoid(a) + c, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("tier", TIERS)
def test_shapeless_broadcast_pattern_changes(tier, monkeypatch):
    monkeypatch.setenv("KILN_CPU_JIT", tier)
    g = mx.compile(lambda a, b: a * b, shapeless=True)
    assert g(mx.ones((3, 1)), mx.ones((1, 3))).shape == (3, 3)
    x = np.arange(4, dtype=np.float32).reshape(4, 1)
    y = np.arange(4, dtype=np.float32).reshape(1, 4) + 1
    np.testing.assert_array_equal(np.array(g(mx.array(x), mx.array(y))), x * y)
    np.testing.assert_array_equal(np.array(g(mx.array(y), mx.array(x))), y * x)
    # Rank grows too: (5,) with (2, 5).
    z = np.ones((2, 5), np.float32) * 3
    np.testing.assert_array_equal(np.array(g(mx.arange(5.0), mx.array(z))), np.arange(5.0) * z)
    with pytest.raises(ValueError, match="broadcast"):
        g(mx.ones((2, 3)), mx.ones((4, 3)))


def test_failed_evaluation_fails_on_every_access():
    a = mx.linalg.inv(mx.zeros((3, 3)), stream=mx.cpu)
    b = a + 1
    for _ in range(3):
        with pytest.raises(RuntimeError, match="singular"):
            mx.eval(a)
        with pytest.raises(RuntimeError, match="singular"):
            np.array(a)
        with pytest.raises(RuntimeError, match="singular"):
            b.sum().item()


@pytest.fixture
def disarm():
    yield
    _core._inject_eval_panic(None)  # a fault that did not fire must not hit a later test


@pytest.fixture
def on_cpu():
    previous = mx.default_device()
    mx.set_default_device(mx.cpu)
    yield
    mx.set_default_device(previous)


def test_kernel_panic_is_an_exception_and_stays_failed(disarm):
    x = mx.arange(6.0).reshape(2, 3)
    y = mx.exp(x)
    _core._inject_eval_panic("exp")
    with pytest.raises(RuntimeError, match=r"\[exp\] Internal error.*injected fault"):
        mx.eval(y)
    # The same array fails again (its kernel may have half-written a buffer)...
    with pytest.raises(RuntimeError, match="injected fault"):
        y.item() if y.size == 1 else np.array(y)
    with pytest.raises(RuntimeError, match="injected fault"):
        (y * 2).sum().item()
    # ...and nothing else is affected: the same computation built again runs.
    np.testing.assert_allclose(np.array(mx.exp(x)), np.exp(np.arange(6.0).reshape(2, 3)), rtol=1e-6)
    assert x.sum().item() == 15.0


def test_panic_in_a_compiled_kernel(monkeypatch, disarm, on_cpu):
    # On the CPU: a GPU entry replays as one CUDA graph, past the per-kernel fault hook.
    monkeypatch.setenv("KILN_CPU_JIT", "off")
    f = mx.compile(lambda a: mx.exp(a) * 2 + 1)
    x = mx.ones((4,))
    np.testing.assert_allclose(np.array(f(x)), np.exp(1) * 2 + 1, rtol=1e-6)
    _core._inject_eval_panic("Compiled")
    out = f(x)
    with pytest.raises(RuntimeError, match="injected fault"):
        mx.eval(out)
    np.testing.assert_allclose(np.array(f(x)), np.exp(1) * 2 + 1, rtol=1e-6)


@pytest.mark.parametrize(
    "make",
    [
        lambda: mx.zeros((1 << 62, 1 << 62)),
        lambda: mx.ones((1 << 32, 1 << 32)),
        lambda: mx.broadcast_to(mx.ones((1, 1)), (1 << 33, 1 << 33)),
        lambda: mx.random.uniform(shape=(1 << 40, 1 << 40)),
        lambda: mx.ones((1 << 31,)).reshape(1 << 31, 1) * mx.ones((1 << 40,)),
    ],
)
def test_sizes_that_overflow_are_errors(make):
    with pytest.raises(ValueError, match="more elements than fit in memory|too large"):
        make()


def test_sizes_in_shapeless_replay():
    f = mx.compile(lambda a, b: a + b, shapeless=True)
    f(mx.ones((2, 1)), mx.ones((1, 2)))
    with pytest.raises(ValueError, match="more elements than fit"):
        f(mx.zeros((1 << 40, 1)), mx.zeros((1, 1 << 40)))


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda: mx.random.normal((-2,)), ValueError, "Negative dimensions"),
        (lambda: mx.zeros((1 << 70,)), OverflowError, r"\[zeros\].*64 bits"),
        (lambda: mx.zeros((2, 3.0)), TypeError, r"\[zeros\] Expected a shape"),
        (lambda: mx.sum(mx.ones((2, 2)), axis=1.5), TypeError, "Expected an int or a sequence"),
        (lambda: mx.sum(mx.ones((2, 2)), axis="a"), TypeError, "got str"),
        (lambda: mx.set_memory_limit(-1), ValueError, r"\[set_memory_limit\] The limit"),
        (lambda: mx.set_cache_limit(-5), ValueError, r"\[set_cache_limit\] The limit"),
        (lambda: mx.expand_dims(mx.ones(2), None), TypeError, r"\[expand_dims\]"),
    ],
)
def test_clear_argument_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_int_like_arguments_still_accepted():
    assert mx.sum(mx.ones((2, 2)), axis=np.int64(1)).shape == (2,)
    assert mx.zeros(np.array([2, 3])).shape == (2, 3)
    assert mx.zeros(np.int32(3)).shape == (3,)
    assert mx.ones((2, 3)).reshape(np.int64(3), 2).shape == (3, 2)
    assert mx.random.normal(np.array([2])).shape == (2,)
