"""Programmatic dependent launches (kiln-cuda's batch.rs; nvrtc.rs puts `griddepcontrol.wait`
first in every kernel): on sm_90 and later a kernel may be scheduled before the one ahead of
it has finished, and waits for that one's writes as its first statement. Checked here:
chains of dependent kernels of very different grids, a buffer freed by one kernel's input
and written by the next kernel (a write after a read), a pipelined decode-like loop into a
cache, and a compiled function replayed as a CUDA graph between early launches; each against
float64 numpy, and the same program with `KILN_EARLY_LAUNCH=0` (another process: the switch
is read once) giving the same bits. On older GPUs the launches are plain and the tests pass
the same way.

Skipped (with the reason) where no GPU is available."""

import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest

import kiln.core as mx
from conftest import GPU_ONLY

pytestmark = GPU_ONLY  # the gpu mark, and skipped where no GPU is available

SIZES = [1, 33, 4097, 1 << 20, 7, 65536]


def npy(x):
    return np.array(x.astype(mx.float32), dtype=np.float64)


def test_chain_of_kernels_of_varied_grids():
    # Each step reads the previous step's output: one-block kernels after a million-element
    # grid and the other way round, reductions between elementwise kernels.
    rng = np.random.default_rng(0)
    x_np = rng.uniform(-1, 1, size=(1 << 20,))
    want = x_np.copy()
    with mx.stream(mx.gpu):
        x = mx.array(x_np.astype(np.float32))
        for i in range(60):
            n = SIZES[i % len(SIZES)]
            head = x[:n] * 0.9 + 0.01 * i  # (a contraction: rounding errors do not grow)
            s = mx.sum(head) / n
            x = mx.concatenate([mx.tanh(head - s), x[n:]]) if n < x.size else mx.tanh(head - s)
            wh = want[:n] * 0.9 + 0.01 * i
            want = np.concatenate([np.tanh(wh - wh.sum() / n), want[n:]])
        mx.eval(x)
    np.testing.assert_allclose(npy(x), want, rtol=1e-4, atol=1e-4)


def test_freed_input_block_written_by_the_next_kernel():
    # `a`'s block goes back to the cache once the kernel reading it is issued; the next
    # output of the same size takes it: that kernel must not write before the read is done.
    rng = np.random.default_rng(1)
    for n in (1 << 22, 4096, 1 << 16):
        a_np = rng.uniform(-1, 1, size=(n,)).astype(np.float32)
        with mx.stream(mx.gpu):
            a = mx.array(a_np)
            mx.eval(a)
            outs = []
            for i in range(12):
                b = mx.sin(a) + 0.1 * i  # reads a
                a = None  # (a's block is free once the read is issued)
                c = mx.zeros((n,)) + 3.0  # same size: may take a's block
                outs.append(mx.sum(b * c))
                a = b * 0.5
            mx.eval(*outs)
        x = a_np.astype(np.float64)
        for i, got in enumerate(outs):
            b = np.sin(x) + 0.1 * i
            np.testing.assert_allclose(float(got.item()), float(np.sum(b * 3.0)), rtol=2e-4)
            x = b * 0.5


def decode_like(steps=40):
    """A pipelined loop of a decode step's kernels: rms_norm, a product, RoPE at a growing
    offset, a slice update into a preallocated cache, attention over the filled part, and
    an argmax read one step late. Returns the tokens and a digest of the cache's bytes."""
    rng = np.random.default_rng(2)
    d, heads, cap = 128, 4, 64
    w = mx.array((rng.normal(size=(d, heads * d)) / np.sqrt(d)).astype(np.float32))
    emb = mx.array(rng.normal(size=(97, d)).astype(np.float32))
    norm_w = mx.array(rng.uniform(0.5, 1.5, size=(d,)).astype(np.float32))
    tokens = []
    with mx.stream(mx.gpu):
        cache = mx.zeros((1, heads, cap, d))
        tok = mx.array([5])
        prev = None
        for t in range(steps):
            x = mx.fast.rms_norm(emb[tok], norm_w, 1e-5)
            q = (x @ w).reshape(1, 1, heads, d).transpose(0, 2, 1, 3)
            q = mx.fast.rope(q, d, traditional=False, base=10000.0, scale=1.0, offset=t)
            cache[:, :, t % cap : t % cap + 1, :] = q
            keys = cache[:, :, : min(t + 1, cap), :]
            o = mx.fast.scaled_dot_product_attention(q, keys, keys, scale=d ** -0.5)
            tok = mx.argmax(o.reshape(-1)[:97], keepdims=True).astype(mx.uint32)
            mx.async_eval(tok, cache)
            if prev is not None:
                tokens.append(int(prev.item()))
            prev = tok
        tokens.append(int(prev.item()))
        mx.eval(cache)
    return tokens, hashlib.sha256(np.array(cache).tobytes()).hexdigest()


def test_decode_like_loop_same_bits_with_plain_launches():
    here = decode_like()
    script = (
        "import sys; sys.path.insert(0, %r)\n"
        "import test_cuda_early_launch as t\n"
        "print(repr(t.decode_like()))\n" % os.path.dirname(os.path.abspath(__file__))
    )
    env = dict(os.environ, KILN_EARLY_LAUNCH="0")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    plain = eval(out.stdout.strip().splitlines()[-1])  # noqa: S307 (our own repr)
    assert here == plain


def test_compiled_replay_between_early_launches():
    # A compiled function becomes a CUDA graph from its third call (captured launches go out
    # plain); eager kernels launched early run before and after each replay.
    rng = np.random.default_rng(3)
    w_np = (rng.normal(size=(256, 256)) / 16).astype(np.float32)
    x_np = rng.normal(size=(8, 256)).astype(np.float32)
    f = mx.compile(lambda x, w: mx.tanh(x @ w) * 2.0 + 1.0)
    want = x_np.astype(np.float64)
    with mx.stream(mx.gpu):
        w, x = mx.array(w_np), mx.array(x_np)
        for i in range(8):
            x = f(x, w)
            x = x / (mx.max(mx.abs(x)) + i)
            want = np.tanh(want @ w_np.astype(np.float64)) * 2.0 + 1.0
            want = want / (np.abs(want).max() + i)
        mx.eval(x)
    np.testing.assert_allclose(npy(x), want, rtol=2e-4, atol=2e-5)
