"""Reading a GPU result waits for the evaluation that computed it, not for work issued
after it (kiln-core's completion.rs, kiln-cuda's ready.rs): mlx-lm's decode loop issues
token n+1 with `async_eval` and then reads token n. Checked here for values: pipelined loops
against the same loop evaluated synchronously, results read long after (their event
dropped), reads from another thread, eval of old and new outputs together, and a failed
evaluation leaving nothing half-made.

Skipped (with the reason) where no GPU is available."""

import threading

import numpy as np
import pytest

import kiln.core as mx
from conftest import GPU_ONLY

pytestmark = GPU_ONLY  # the gpu mark, and skipped where no GPU is available


def step(x, w):
    # A decode-like step: a product, a nonlinearity, an argmax read back as the next input.
    h = mx.tanh(x @ w)
    return h, mx.argmax(h, axis=-1)


def reference(x, w, steps):
    out = []
    for _ in range(steps):
        x = np.tanh(x @ w)
        out.append(int(np.argmax(x, axis=-1)[0]))
    return out


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_pipelined_loop_reads_each_token_correctly(dtype):
    rng = np.random.default_rng(3)
    w_np = rng.normal(size=(256, 256)).astype(np.float32) / 16
    x_np = rng.normal(size=(1, 256)).astype(np.float32)
    with mx.stream(mx.gpu):
        w = mx.array(w_np).astype(getattr(mx, dtype)).astype(mx.float32)
        x = mx.array(x_np)
        x, tok = step(x, w)
        mx.async_eval(x, tok)
        got = []
        for _ in range(40):
            nx, ntok = step(x, w)
            # Heavy work queued after the token that is read next.
            busy = mx.sum(mx.ones((2048, 2048)) @ mx.ones((2048, 2048)))
            mx.async_eval(nx, ntok, busy)
            got.append(tok.item())
            x, tok = nx, ntok
        got.append(tok.item())
        assert busy.item() == 2048.0**3
    want = reference(x_np, np.array(w.astype(mx.float32)), 41)
    assert got == want


def test_results_read_long_after_their_evaluation():
    with mx.stream(mx.gpu):
        first = [mx.arange(8, dtype=mx.float32) * i for i in range(3)]
        mx.async_eval(*first)
        later = [mx.full((16,), float(i)) + 1 for i in range(200)]
        for a in later:
            mx.async_eval(a)  # far more evaluations than events kept
        for i, a in enumerate(first):
            np.testing.assert_array_equal(np.array(a), np.arange(8, dtype=np.float32) * i)
        mx.eval(first[0], later[-1])
        assert later[-1].tolist() == [200.0] * 16
        assert [a[0].item() for a in later] == [float(i + 1) for i in range(200)]


def test_reads_from_another_thread():
    with mx.stream(mx.gpu):
        a = mx.arange(1000, dtype=mx.float32) ** 2
        mx.async_eval(a)
        b = mx.sum(mx.ones((1024, 1024)) @ mx.ones((1024, 1024)))
        mx.async_eval(b)
    seen = {}
    t = threading.Thread(target=lambda: seen.setdefault("a", np.array(a)))
    t.start()
    t.join()
    np.testing.assert_array_equal(seen["a"], np.arange(1000, dtype=np.float32) ** 2)
    assert b.item() == 1024.0**3


def test_eval_waits_for_its_outputs_across_evaluations():
    with mx.stream(mx.gpu):
        xs = []
        x = mx.ones((64, 64))
        for _ in range(10):
            x = x @ mx.ones((64, 64)) / 64
            mx.async_eval(x)
            xs.append(x)
        mx.eval(*xs)
        for a in xs:
            np.testing.assert_allclose(np.array(a), np.ones((64, 64)), rtol=1e-6)


def test_failed_evaluation_then_reads():
    with mx.stream(mx.gpu):
        ok = mx.arange(4, dtype=mx.float32) + 1
        mx.async_eval(ok)
        bad = mx.ones((3,), dtype=mx.float64) * 2  # float64 has no GPU kernel: fails
        with pytest.raises(ValueError, match="float64"):
            mx.eval(bad)
        assert ok.tolist() == [1.0, 2.0, 3.0, 4.0]
        again = ok * 2
        mx.async_eval(again)
        assert again.tolist() == [2.0, 4.0, 6.0, 8.0]


def test_async_eval_far_ahead_of_the_reads_and_from_threads():
    with mx.stream(mx.gpu):
        xs = [mx.full((256,), float(i)) * 2 for i in range(50)]
        for x in xs:
            mx.async_eval(x)
        mx.synchronize()
        assert [x[0].item() for x in xs] == [2.0 * i for i in range(50)]

    results = {}

    def run(t):
        with mx.stream(mx.gpu):
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


def test_async_eval_then_dependent_work_and_sync_eval():
    with mx.stream(mx.gpu):
        a = mx.random.normal((128, 128), key=mx.random.key(0))
        b = a @ a.T
        mx.async_eval(b)
        c = mx.sum(b * 2)  # built on b while it may still be queued
        mx.eval(c)
        want = (np.array(a, np.float64) @ np.array(a, np.float64).T * 2).sum()
        assert c.item() == pytest.approx(want, rel=1e-4)
