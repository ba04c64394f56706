"""Decode attention on the GPU (kiln-cuda's `attention_decode`: a few query rows per KV head
against many keys, the keys split across blocks and the spans combined): against the CPU,
numpy and the simple kernel (KILN_CUDA_ATTENTION=simple), for every mask, GQA ratios, head
dims 64 to 256, one span and many, keys read in place from a slice of a preallocated cache
(mlx-lm's KVCache) and from misaligned views, NaN and inf in visible and hidden keys.

Skipped (with the reason) where no GPU is available."""

import math

import numpy as np
import pytest

import kiln.core as mx
from test_gpu_fast import np_sdpa  # the float64 reference attention

pytestmark = pytest.mark.skipif(
    not mx.is_available(mx.gpu), reason="no GPU is available on this machine"
)

RNG = np.random.default_rng(23)
FLOATS = [mx.float32, mx.float16, mx.bfloat16]
ATOL = {mx.float32: 1e-4, mx.float16: 1e-2, mx.bfloat16: 4e-2}

# B, Hq, Hk, Lq, Lk, D, Dv: one span (few keys), many spans, GQA 1 to 8, up to 16 rows per
# KV head (two row tiles), odd lengths, head dims 64 to 256.
SHAPES = [
    (1, 32, 8, 1, 4096, 128, 128),
    (1, 32, 8, 1, 40, 128, 128),
    (2, 8, 2, 3, 1000, 64, 64),
    (1, 4, 4, 16, 777, 96, 96),
    (1, 8, 1, 2, 3001, 128, 128),
    (1, 2, 2, 1, 5000, 256, 256),
    (1, 2, 1, 5, 129, 80, 80),
    (1, 3, 3, 1, 300, 128, 64),
    (3, 4, 2, 1, 1, 64, 64),
]
MASKS = [None, "causal", "bool", "additive"]


def rand(shape, dtype=mx.float32, lo=-3.0, hi=3.0):
    return mx.array(RNG.uniform(lo, hi, size=shape).astype(np.float32)).astype(dtype)


def npy(a):
    if a.dtype in (mx.float16, mx.bfloat16):
        a = a.astype(mx.float32)
    return np.array(a).astype(np.float64)


def on(device, fn):
    with mx.stream(device):
        y = fn()
        mx.eval(y)
    return npy(y)


def masks_for(kind, b, hq, lq, lk, dtype):
    if kind == "bool":
        m = RNG.random((b, 1, lq, lk)) < 0.7
        m[:, :, 0] = False  # a fully hidden row averages every value
        return mx.array(m), m
    if kind == "additive":
        m = rand((1, hq, lq, lk), dtype)
        return m, npy(m)
    return kind, kind


def close(a, b, tol):
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol, equal_nan=True)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dims", SHAPES)
@pytest.mark.parametrize("mask", MASKS)
def test_decode_matches_cpu_numpy_and_simple(dtype, dims, mask, monkeypatch):
    monkeypatch.delenv("KILN_CUDA_ATTENTION", raising=False)
    b, hq, hk, lq, lk, d, dv = dims
    q, k, v = rand((b, hq, lq, d), dtype), rand((b, hk, lk, d), dtype), rand((b, hk, lk, dv), dtype)
    m, nm = masks_for(mask, b, hq, lq, lk, dtype)
    scale = 1 / math.sqrt(d)
    fn = lambda: mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=m)  # noqa: E731
    g = on(mx.gpu, fn)
    assert g.shape == (b, hq, lq, dv)
    close(g, on(mx.cpu, fn), ATOL[dtype])
    close(g, np_sdpa(npy(q), npy(k), npy(v), scale, nm), ATOL[dtype])
    monkeypatch.setenv("KILN_CUDA_ATTENTION", "simple")
    close(g, on(mx.gpu, fn), ATOL[dtype])


@pytest.mark.parametrize("dtype", FLOATS)
def test_keys_from_a_preallocated_cache_and_misaligned_views(dtype):
    # mlx-lm's KVCache: a (B, Hk, capacity, D) buffer sliced to the keys written so far.
    b, hq, hk, d, cap = 1, 16, 4, 128, 1280
    kb, vb = rand((b, hk, cap, d), dtype), rand((b, hk, cap, d), dtype)
    q = rand((b, hq, 1, d), dtype)
    for n in [1, 255, 1024, 1111]:
        k, v = kb[..., :n, :], vb[..., :n, :]
        fn = lambda: mx.fast.scaled_dot_product_attention(q, k, v, scale=0.09)  # noqa: E731
        close(on(mx.gpu, fn), on(mx.cpu, fn), ATOL[dtype])
    # A view starting one row in (misaligned for 16-byte loads when D * size is not a
    # multiple of 16 past it) and one with an odd head dim: the element-wise tile loads.
    for kk, vv, qq in [
        (kb[:, :, 1:600, :], vb[:, :, 3:602, :], q),
        (kb[:, :, :500, :77], vb[:, :, :500, 1:78], q[..., :77]),
    ]:
        fn = lambda: mx.fast.scaled_dot_product_attention(qq, kk, vv, scale=0.1)  # noqa: E731
        close(on(mx.gpu, fn), on(mx.cpu, fn), ATOL[dtype])
    # Heads interleaved ((B, L, H, D) projections viewed as (B, H, L, D)).
    k = mx.swapaxes(rand((b, 700, hk, d), dtype), 1, 2)
    v = mx.swapaxes(rand((b, 700, hk, d), dtype), 1, 2)
    fn = lambda: mx.fast.scaled_dot_product_attention(q, k, v, scale=0.1, mask="causal")  # noqa: E731
    close(on(mx.gpu, fn), on(mx.cpu, fn), ATOL[dtype])


def test_nan_and_inf_keys():
    dtype = mx.bfloat16
    b, hq, hk, lk, d = 1, 8, 2, 3000, 64
    q = rand((b, hq, 1, d), dtype)
    k = np.asarray(RNG.uniform(-1, 1, (b, hk, lk, d)), np.float32)
    v = np.asarray(RNG.uniform(-1, 1, (b, hk, lk, d)), np.float32)
    k[0, 0, 2500] = np.nan  # head group 0 sees a NaN score
    v[0, 1, 100, :] = np.inf  # head group 1 sees an infinite value
    kk, vv = mx.array(k).astype(dtype), mx.array(v).astype(dtype)
    fn = lambda m: lambda: mx.fast.scaled_dot_product_attention(q, kk, vv, scale=0.1, mask=m)  # noqa: E731
    g, c = on(mx.gpu, fn(None)), on(mx.cpu, fn(None))
    np.testing.assert_array_equal(np.isnan(g), np.isnan(c))
    assert np.isnan(g[0, :4]).all() and not np.isnan(g[0, 4:]).all()
    # Hidden keys stay hidden: a mask over the NaN key gives its heads finite rows (a hidden
    # infinite value still meets a zero weight: 0 * inf, NaN as in every product).
    keep = np.ones((1, 1, 1, lk), np.bool_)
    keep[..., 2500] = False
    g, c = on(mx.gpu, fn(mx.array(keep))), on(mx.cpu, fn(mx.array(keep)))
    assert np.isfinite(g[0, :4]).all()
    np.testing.assert_array_equal(np.isnan(g), np.isnan(c))
    close(g, c, ATOL[dtype])
    # An additive -inf row: NaN as the CPU (0 / 0), one span or many.
    for n in [20, 3000]:
        m = np.zeros((1, hq, 1, n), np.float32)
        m[0, 3] = -np.inf
        mm = mx.array(m).astype(dtype)
        f = lambda: mx.fast.scaled_dot_product_attention(q, kk[:, :, :n], vv[:, :, :n], scale=0.1, mask=mm)  # noqa: E731
        g, c = on(mx.gpu, f), on(mx.cpu, f)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(c))
        close(g, c, ATOL[dtype])


def test_no_keys_and_inside_compile():
    q, k = rand((2, 4, 1, 64), mx.float16), rand((2, 2, 0, 64), mx.float16)
    fn = lambda: mx.fast.scaled_dot_product_attention(q, k, k, scale=1.0)  # noqa: E731
    np.testing.assert_array_equal(on(mx.gpu, fn), np.zeros((2, 4, 1, 64)))
    q, k, v = rand((1, 8, 1, 128), mx.bfloat16), rand((1, 2, 2000, 128), mx.bfloat16), rand((1, 2, 2000, 128), mx.bfloat16)
    f = mx.compile(lambda q, k, v: mx.fast.scaled_dot_product_attention(q, k, v, scale=0.1) * 2)
    with mx.stream(mx.gpu):
        g = npy(f(q, k, v))
        g2 = npy(f(q, k, v))
    np.testing.assert_array_equal(g, g2)
    close(g, on(mx.cpu, lambda: mx.fast.scaled_dot_product_attention(q, k, v, scale=0.1) * 2), 8e-2)


def test_cache_updates_write_in_place_and_keep_held_values():
    # mlx-lm's KVCache: `self.keys[..., prev:offset, :] = keys` on a preallocated buffer.
    # The update writes into the buffer when nothing else holds it; an array the user still
    # holds keeps its values.
    with mx.stream(mx.gpu):
        buf = mx.zeros((1, 2, 64, 8), mx.bfloat16)
        mx.eval(buf)
        want = np.zeros((1, 2, 64, 8), np.float32)
        held = buf[:, :1]  # a view of the first buffer: that one must not be written
        mx.eval(held)
        for t in range(40):
            new = rand((1, 2, 1, 8), mx.bfloat16)
            want[..., t : t + 1, :] = npy(new)
            buf[..., t : t + 1, :] = new
            view = buf[..., : t + 1, :]
            mx.eval(view)
            np.testing.assert_array_equal(npy(view), want[..., : t + 1, :])
            del view
        np.testing.assert_array_equal(npy(buf), want)
        np.testing.assert_array_equal(npy(held), np.zeros((1, 1, 64, 8)))
        # A strided update and one that broadcasts.
        base = rand((4, 6), mx.float32)
        mx.eval(base)
        b = npy(base)
        base[1::2, ::3] = mx.array([[7.0, 8.0]])
        b[1::2, ::3] = [[7.0, 8.0]]
        np.testing.assert_array_equal(npy(base), b)
