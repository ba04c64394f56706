"""Two Python threads build and evaluate graphs at the same time; eval releases the GIL."""

import threading
import time

import numpy as np

import kiln.core as mx


def work(seed, results):
    x = mx.random.normal((64, 64), key=mx.random.key(seed))
    y = x
    for _ in range(20):
        y = mx.tanh(y @ x / 64) + 0.1
    results[seed] = (np.array(x), np.array(y))


def test_threads_build_and_evaluate_concurrently():
    results = {}
    threads = [threading.Thread(target=work, args=(s, results)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in range(4):
        x, y = results[s]
        ref = x.astype(np.float64)
        expect = ref
        for _ in range(20):
            expect = np.tanh(expect @ ref / 64) + 0.1
        np.testing.assert_allclose(y, expect, rtol=1e-3, atol=1e-4)


def test_shared_graph_evaluated_from_two_threads():
    base = mx.exp(mx.arange(1000, dtype=mx.float32) / 1000)
    outs = [mx.sum(base * k) for k in range(1, 5)]
    got = {}
    threads = [threading.Thread(target=lambda i=i: got.__setitem__(i, outs[i].item())) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ref = np.exp(np.arange(1000, dtype=np.float32) / 1000).sum()
    for i in range(4):
        np.testing.assert_allclose(got[i], ref * (i + 1), rtol=1e-4)


def test_eval_releases_the_gil():
    # While one thread evaluates a long graph, another keeps running Python code.
    x = mx.ones((256, 256))
    y = x
    for _ in range(200):
        y = mx.tanh(y @ x / 256)
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    t = threading.Thread(target=ticker)
    t.start()
    start = time.perf_counter()
    mx.eval(y)
    elapsed = time.perf_counter() - start
    stop.set()
    t.join()
    during = [v for v in ticks if start <= v <= start + elapsed]
    if elapsed > 0.05:  # only meaningful when eval took a while
        assert len(during) >= 3, f"ticker ran {len(during)} times in {elapsed:.3f}s of eval"
