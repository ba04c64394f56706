"""async_eval on kiln's issuing thread (kiln-core's background.rs, `KILN_ASYNC_THREAD=1` or
`_core._set_async_thread`): the work is issued while the caller builds its next graph.
Checked on each device against the same programs evaluated on the caller's thread: a
pipelined KV-cache decode loop, reads right after async_eval (values, numpy, item, from
another thread), far more jobs than the queue holds, a kernel failing or interrupted inside
a job (errors reach the reader; interrupted work is recomputed), and synchronize."""

import threading

import numpy as np
import pytest

import kiln.core as mx
from kiln import _core


@pytest.fixture
def issuing_thread():
    _core._set_async_thread(True)
    try:
        yield
    finally:
        mx.synchronize()
        _core._set_async_thread(None)


def decode(steps, w, cache_len=32):
    """A decode-like loop in mlx-lm's pattern: a KV cache written in place by slice updates,
    attention over its filled part, argmax fed back, step n+1 issued before token n is read."""
    d = w.shape[0]
    keys = mx.zeros((1, cache_len, d))
    tokens = []

    def step(x, keys, n):
        k = mx.tanh(x @ w)
        keys[:, n : n + 1, :] = k[:, None, :]
        scores = (keys[:, : n + 1, :] @ x[:, :, None])[..., 0]
        p = mx.softmax(scores, axis=-1)
        h = (p[:, None, :] @ keys[:, : n + 1, :])[:, 0, :] + x
        return h / mx.sqrt(mx.sum(h * h, axis=-1, keepdims=True)), mx.argmax(h, axis=-1), keys

    x = mx.ones((1, d)) / d**0.5
    x, tok, keys = step(x, keys, 0)
    mx.async_eval(x, tok)
    for n in range(1, steps):
        nx, ntok, keys = step(x, keys, n)
        mx.async_eval(nx, ntok)
        tokens.append(tok.item())
        x, tok = nx, ntok
    tokens.append(tok.item())
    return tokens, np.array(x), np.array(keys)


def test_pipelined_decode_matches_the_callers_thread(device):
    rng = np.random.default_rng(0)
    w = mx.array(rng.normal(size=(64, 64)).astype(np.float32) / 8)
    _core._set_async_thread(False)
    want = decode(24, w)
    _core._set_async_thread(True)
    try:
        got = decode(24, w)
    finally:
        _core._set_async_thread(None)
    assert got[0] == want[0]
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got[2], want[2], rtol=1e-6, atol=1e-6)


def test_reads_right_after_async_eval(device, issuing_thread):
    a = mx.arange(1000, dtype=mx.float32) ** 2
    b = mx.sum(mx.ones((256, 256)) @ mx.ones((256, 256)))
    c = mx.cumsum(mx.arange(10)) * 3
    mx.async_eval(a)
    mx.async_eval(b, c)
    assert b.item() == 256.0**3
    np.testing.assert_array_equal(np.array(a), np.arange(1000, dtype=np.float32) ** 2)
    assert c.tolist() == (np.cumsum(np.arange(10)) * 3).tolist()
    # Built on an array that may still be queued, and read at once.
    d = mx.sum(a[:10] + 1)
    mx.eval(d)
    assert d.item() == float((np.arange(10) ** 2 + 1).sum())
    e = mx.exp(mx.array([0.0, 1.0]))
    mx.async_eval(e)
    seen = {}
    t = threading.Thread(target=lambda: seen.setdefault("e", np.array(e)))
    t.start()
    t.join()
    np.testing.assert_allclose(seen["e"], np.exp([0.0, 1.0]), rtol=1e-6)


def test_more_jobs_than_the_queue_holds(device, issuing_thread):
    xs = [mx.full((128,), float(i)) * 2 + 1 for i in range(64)]
    for x in xs:
        mx.async_eval(x)
    mx.synchronize()
    assert [x[0].item() for x in xs] == [2.0 * i + 1 for i in range(64)]
    chain = mx.array(1.0)
    for _ in range(50):
        chain = chain * 1.5 - 0.25
        mx.async_eval(chain)
    want = 1.0
    for _ in range(50):
        want = want * 1.5 - 0.25
    assert chain.item() == pytest.approx(want, rel=1e-6)


def test_failed_kernel_in_a_job_reaches_the_reader(device, issuing_thread):
    x = mx.array(np.linspace(-2, 2, 64).astype(np.float32))
    first = mx.exp(x) + 1.0
    bad = mx.sqrt(mx.abs(first) + 1)
    _core._inject_eval_panic("sqrt")
    try:
        mx.async_eval(first, bad)
        with pytest.raises(RuntimeError, match="sqrt"):
            mx.eval(bad)
        with pytest.raises(RuntimeError, match="sqrt"):
            np.array(bad)
    finally:
        _core._inject_eval_panic(None)
    np.testing.assert_allclose(np.array(first), np.exp(np.linspace(-2, 2, 64)) + 1, rtol=1e-5)
    again = mx.sqrt(mx.abs(first) + 1)
    mx.async_eval(again)
    np.testing.assert_allclose(np.array(again), np.sqrt(np.exp(np.linspace(-2, 2, 64)) + 2),
                               rtol=1e-5)


def test_interrupted_job_is_recomputed_by_its_reader(device, issuing_thread):
    x = mx.random.normal((300, 200), key=mx.random.key(1))
    e = mx.exp(x)
    s = mx.sum(e, axis=1)
    _core._inject_eval_interrupt("sum")
    try:
        mx.async_eval(s)
        mx.synchronize()
    finally:
        _core._inject_eval_interrupt(None)
    want = np.exp(np.array(x)).sum(axis=1)
    np.testing.assert_allclose(np.array(s), want, rtol=1e-5)
    np.testing.assert_allclose(np.array(e), np.exp(np.array(x)), rtol=1e-5)


def test_jobs_from_several_threads(device, issuing_thread):
    results = {}
    dev = mx.default_device()

    def run(t):
        mx.set_default_device(dev)
        ys = [mx.arange(64, dtype=mx.float32) + t * 100 + i for i in range(20)]
        for y in ys:
            mx.async_eval(y)
        results[t] = [y.tolist() for y in ys]

    threads = [threading.Thread(target=run, args=(t,)) for t in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for t in range(3):
        for i, got in enumerate(results[t]):
            assert got == [float(v + t * 100 + i) for v in range(64)]


def test_async_eval_inside_a_transform_is_still_refused(issuing_thread):
    def f(x):
        y = x * 2
        mx.async_eval(y)
        return y.sum()

    with pytest.raises(ValueError, match="async_eval"):
        mx.grad(f)(mx.ones((3,)))


def test_exit_with_jobs_still_queued():
    # The interpreter goes away right after handing over work: the jobs are issued first
    # (an atexit drain), and the process ends cleanly.
    import os
    import subprocess
    import sys

    code = (
        "import kiln.core as mx\n"
        "xs = [mx.sum(mx.ones((256, 256)) @ mx.ones((256, 256))) + i for i in range(30)]\n"
        "for x in xs:\n"
        "    mx.async_eval(x)\n"
        "print('handed over', flush=True)\n"
    )
    env = dict(os.environ, KILN_ASYNC_THREAD="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "handed over"
