"""Eager kernels batched per evaluation and replayed as CUDA graphs (kiln-cuda's batch.rs):
a batch whose kernel sequence was flushed before runs as one graph with its nodes' arguments
updated. Checked for values against numpy across repeated steps whose scalars, buffers and
sizes change (graph updates), small host arrays (written by a kernel's arguments, so they join
the batch), steps that mix in cuBLAS, host reads and CPU work (each
flushes the batch first), two threads issuing at once, a failing evaluation, and a pipelined
KV-cache decode loop that must give the same tokens with graphs off (`KILN_EAGER_GRAPHS=0`).
Batching is off by default for now (`KILN_EAGER_GRAPHS=1` turns it on): every test runs both
ways."""

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import kiln.core as mx
from conftest import GPU_ONLY

pytestmark = GPU_ONLY


@pytest.fixture(autouse=True, params=["graphs", "direct"])
def batching(request):
    # Batching is off by default for now: each test runs with it on and off.
    from kiln import _core

    _core._set_eager_graphs(request.param == "graphs")
    yield request.param
    _core._set_eager_graphs(os.environ.get("KILN_EAGER_GRAPHS") == "1")


def chain(x, c):
    # Sixteen-odd kernels: elementwise ops, a reduction, a softmax, a slice update.
    y = mx.exp(mx.tanh(x * c) - 0.5) + c
    y = y / (1 + mx.abs(y))
    y = mx.softmax(y, axis=-1) * x.shape[-1]
    z = mx.sum(y * y, axis=-1, keepdims=True)
    y = mx.maximum(y - z / x.shape[-1], -c)
    y[..., :1] = z
    return mx.sqrt(mx.abs(y) + 1) * mx.sign(y)


def chain_np(x, c):
    y = np.exp(np.tanh(x * c) - 0.5) + c
    y = y / (1 + np.abs(y))
    e = np.exp(y - y.max(-1, keepdims=True))
    y = e / e.sum(-1, keepdims=True) * x.shape[-1]
    z = np.sum(y * y, axis=-1, keepdims=True)
    y = np.maximum(y - z / x.shape[-1], -c)
    y[..., :1] = z
    return np.sqrt(np.abs(y) + 1) * np.sign(y)


def test_repeated_steps_with_new_scalars_buffers_and_sizes(batching):
    from kiln import _core

    rng = np.random.default_rng(0)
    before = _core._eager_graph_stats()
    with mx.stream(mx.gpu):
        for n in [64, 64, 64, 64, 1000, 1000, 1000, 37, 37, 37, 64]:
            for c in [0.5, 1.5]:
                x = rng.normal(size=(3, n)).astype(np.float32)
                got = np.array(chain(mx.array(x), c))
                np.testing.assert_allclose(got, chain_np(x, c), rtol=2e-5, atol=2e-5)
    after = _core._eager_graph_stats()
    graphs = after["graph_launches"] - before["graph_launches"]
    if batching == "graphs":  # the steps did replay, their nodes updated
        assert graphs >= 10 and after["nodes_updated"] > before["nodes_updated"], after
    else:
        assert graphs == 0, after


def test_a_step_fed_by_its_own_output_many_times():
    # The same sequence over and over, each step's input the last one's output: the graph's
    # buffers rotate through the allocator's cache.
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 128)).astype(np.float32)
    want = x
    with mx.stream(mx.gpu):
        a = mx.array(x)
        for i in range(12):
            a = chain(a, 0.25 + 0.01 * i)
            mx.async_eval(a)
            want = chain_np(want, 0.25 + 0.01 * i)
        np.testing.assert_allclose(np.array(a), want, rtol=1e-4, atol=1e-4)


def test_steps_mixing_cublas_host_reads_and_cpu_work():
    rng = np.random.default_rng(2)
    w = rng.normal(size=(96, 96)).astype(np.float32) / 10
    with mx.stream(mx.gpu):
        wg = mx.array(w)
        for i in range(6):
            x = rng.normal(size=(4, 96)).astype(np.float32)
            h = chain(mx.array(x) @ wg, 1.0)  # cuBLAS in the middle of the batch
            k = int(mx.argmax(h[0]).item())  # a host read flushes it
            inv = mx.linalg.inv(h[:, :4] @ h[:, :4].T + 4 * mx.eye(4), stream=mx.cpu)
            out = chain(h + inv[0, 0], 0.5) @ wg
            hn = chain_np(x @ w, 1.0)
            assert k == int(np.argmax(hn[0]))
            invn = np.linalg.inv(hn[:, :4] @ hn[:, :4].T + 4 * np.eye(4))
            want = chain_np(hn + invn[0, 0], 0.5) @ w
            np.testing.assert_allclose(np.array(out), want, rtol=1e-3, atol=1e-3)


def test_two_threads_issuing_at_once():
    errors = []

    def work(seed):
        try:
            rng = np.random.default_rng(seed)
            with mx.stream(mx.gpu):
                for i in range(10):
                    x = rng.normal(size=(2, 200 + seed)).astype(np.float32)
                    got = np.array(chain(mx.array(x), 0.1 * i))
                    np.testing.assert_allclose(got, chain_np(x, 0.1 * i), rtol=2e-5, atol=2e-5)
        except Exception as e:  # noqa: BLE001  (reported by the main thread)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in (3, 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_a_failed_step_leaves_the_next_ones_right():
    # A kernel failing halfway through a batch: the launches before it still reach the
    # stream (their outputs hold data), the error names the op, later steps are right.
    from kiln import _core

    rng = np.random.default_rng(5)
    with mx.stream(mx.gpu):
        for i in range(4):
            x = rng.normal(size=(2, 64)).astype(np.float32)
            np.testing.assert_allclose(np.array(chain(mx.array(x), 1.0)), chain_np(x, 1.0),
                                       rtol=2e-5, atol=2e-5)
        x = rng.normal(size=(2, 64)).astype(np.float32)
        a = mx.array(x)
        first = mx.exp(mx.tanh(a * 1.0) - 0.5) + 1.0
        bad = mx.sqrt(mx.abs(first) + 1)
        _core._inject_eval_panic("sqrt")
        try:
            with pytest.raises(RuntimeError, match="sqrt"):
                mx.eval(first, bad)
        finally:
            _core._inject_eval_panic(None)
        np.testing.assert_allclose(np.array(first), np.exp(np.tanh(x) - 0.5) + 1.0, rtol=2e-5)
        np.testing.assert_allclose(np.array(chain(a, 2.0)), chain_np(x, 2.0), rtol=2e-5,
                                   atol=2e-5)


@pytest.mark.parametrize("dtype", ["bool_", "int8", "uint16", "int32", "float16", "bfloat16",
                                   "float32", "int64", "complex64"])
def test_small_host_arrays_reach_the_gpu_exactly(dtype):
    # Up to 64 bytes go as a kernel's arguments (transfer.rs), more as a copy: every size
    # around the word and limit edges, each value bit for bit.
    rng = np.random.default_rng(8)
    np_dtype = np.float32 if dtype == "bfloat16" else getattr(np, dtype)
    size = np.dtype(np_dtype).itemsize if dtype != "bfloat16" else 2
    for n in sorted({1, 2, 3, 7, 8, 9, 15, 16, 17, 64 // size, 64 // size + 1, 100}):
        host = (rng.normal(size=n) * 50).astype(np_dtype)
        if dtype == "complex64":
            host = host + 1j * rng.normal(size=n).astype(np.float32)
        with mx.stream(mx.cpu):
            x = mx.array(host)
            if dtype == "bfloat16":
                x = x.astype(mx.bfloat16)
            mx.eval(x)
        got = mx.concatenate([x, x], stream=mx.gpu)
        want = np.array(x.astype(mx.float32) if dtype == "bfloat16" else x)
        out = np.array(got.astype(mx.float32) if dtype == "bfloat16" else got)
        np.testing.assert_array_equal(out, np.concatenate([want, want]))


DECODE = textwrap.dedent(
    """
    import numpy as np
    import kiln.core as mx
    rng = np.random.default_rng(7)
    H, D, V, L = 4, 32, 64, 40
    wq, wk, wv, wo = (mx.array(rng.normal(size=(H * D, H * D)).astype(np.float32) / 12)
                      for _ in range(4))
    emb = mx.array(rng.normal(size=(V, H * D)).astype(np.float32))
    head = mx.array(rng.normal(size=(H * D, V)).astype(np.float32) / 8)
    mx.set_default_device(mx.gpu)
    keys = mx.zeros((1, H, 64, D)); values = mx.zeros((1, H, 64, D))
    def step(tok, pos):
        global keys, values
        x = mx.fast.rms_norm(emb[tok], None, 1e-5)
        def heads(w):
            return (x @ w).reshape(1, 1, H, D).transpose(0, 2, 1, 3)
        q = mx.fast.rope(heads(wq), D, traditional=False, base=1e4, scale=1.0, offset=pos)
        k = mx.fast.rope(heads(wk), D, traditional=False, base=1e4, scale=1.0, offset=pos)
        keys[..., pos:pos + 1, :] = k
        values[..., pos:pos + 1, :] = heads(wv)
        o = mx.fast.scaled_dot_product_attention(q, keys[..., :pos + 1, :],
                                                 values[..., :pos + 1, :], scale=D ** -0.5)
        h = x + o.transpose(0, 2, 1, 3).reshape(1, H * D) @ wo
        logits = h @ head
        logprobs = logits - mx.logsumexp(logits, keepdims=True)
        # The next input moves with the position, so every step reads a new embedding row.
        return (mx.argmax(logprobs, axis=-1) + 7 * pos) % V, mx.max(logprobs)
    tok, top = step(mx.array([3]), 0)
    mx.async_eval(tok, top)
    out = []
    for pos in range(1, L):
        nxt, ntop = step(tok, pos)
        mx.async_eval(nxt, ntop)
        out.append(f"{int(tok.item())}:{top.item():.4f}")
        tok, top = nxt, ntop
    out.append(f"{int(tok.item())}:{top.item():.4f}")
    print(" ".join(out))
    """
)


def run_decode(graphs):
    env = dict(os.environ, KILN_EAGER_GRAPHS="1" if graphs else "0", KILN_LOG="graphs")
    r = subprocess.run([sys.executable, "-c", DECODE], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.split(), r.stderr


def test_a_pipelined_decode_loop_gives_the_same_tokens_as_direct_launches():
    direct, direct_log = run_decode(False)
    graphs, graphs_log = run_decode(True)
    assert len(direct) == 40 and len(set(direct)) > 20  # tokens and top log-probabilities
    assert graphs == direct
    assert "one CUDA graph" in graphs_log  # the steps did run as graphs
    assert "one CUDA graph" not in direct_log
