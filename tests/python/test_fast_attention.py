"""mx.fast.scaled_dot_product_attention's tiled CPU kernel: shapes that cross its query
blocks (64), key blocks (256) and register tiles (6/32 scores, 4/64 and 8 value columns),
masks across blocks, GQA, half types and strided views, against numpy.

Then the GPU kernels' shape classes on every device, against numpy: the tensor-core flash
kernel (head dims around 64 and 128, partial tiles, GQA, Lq != Lk, every mask, fully hidden
rows), the simple kernel's (D 72, Dv != D), and split-key decode (a few query rows per KV
head against many keys: one span and many, GQA 1 to 8, head dims 64 to 256, keys read in
place from a preallocated cache and from misaligned views, NaN and inf keys). The GPU's
alternative paths (KILN_CUDA_ATTENTION=simple) are in test_cuda_fast_paths.py."""

import math

import kiln.core as mx
import numpy as np
import pytest

RNG = np.random.default_rng(1)
TOL = {"float32": 1e-4, "float64": 1e-10, "float16": 1e-2, "bfloat16": 5e-2}


def np_sdpa(q, k, v, scale, mask=None):
    g = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    s = scale * q @ np.swapaxes(k, -1, -2)
    lq, lk = q.shape[2], k.shape[2]
    if isinstance(mask, str):
        mask = np.arange(lk)[None, :] <= np.arange(lq)[:, None] + (lk - lq)
    if mask is not None and mask.dtype == np.bool_:
        s = np.where(mask, s, np.finfo(s.dtype).min)
    elif mask is not None:
        s = s + mask
    with np.errstate(invalid="ignore"):
        s = s - s.max(-1, keepdims=True)
        p = np.exp(s)
        return (p / p.sum(-1, keepdims=True)) @ v


def f64(a):
    return np.array(a.astype(mx.float64 if a.dtype == mx.float64 else mx.float32)).astype(np.float64)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def check(q, k, v, mask, dtype="float32", scale=None):
    dt = getattr(mx, dtype)
    d = q.shape[-1]
    scale = 1 / math.sqrt(d) if scale is None else scale
    qa, ka, va = (mx.array(x).astype(dt) for x in (q, k, v))
    m = mx.array(mask).astype(dt if mask.dtype != np.bool_ else mx.bool_) \
        if isinstance(mask, np.ndarray) else mask
    y = mx.fast.scaled_dot_product_attention(qa, ka, va, scale=scale, mask=m)
    assert y.dtype == dt and y.shape == q.shape[:3] + (v.shape[-1],)
    nm = f64(m) if isinstance(m, mx.array) and m.dtype != mx.bool_ else (
        np.array(m) if isinstance(m, mx.array) else m)
    ref = np_sdpa(f64(qa), f64(ka), f64(va), scale, nm)
    tol = TOL[dtype]
    np.testing.assert_allclose(f64(y), ref, rtol=tol, atol=tol)


SHAPES = [  # B, Hq, Hk, Lq, Lk, D, Dv: blocks, tiles and their remainders
    (1, 2, 2, 130, 300, 64, 64),   # 3 query blocks, 2 key blocks
    (1, 2, 1, 65, 513, 37, 80),    # odd D, Dv = 64 + 16 columns, GQA
    (2, 4, 2, 200, 200, 128, 130),  # Dv = 128 + 2 columns
    (1, 1, 1, 1, 1000, 16, 3),     # one query, narrow values
    (1, 3, 3, 300, 70, 8, 8),      # Lq > Lk
]


@pytest.mark.parametrize("dims", SHAPES)
@pytest.mark.parametrize("mask", [None, "causal", "bool", "additive"])
def test_blocked_shapes(dims, mask, device):
    b, hq, hk, lq, lk, d, dv = dims
    q, k, v = rand(b, hq, lq, d), rand(b, hk, lk, d), rand(b, hk, lk, dv)
    m = {"bool": RNG.random((b, 1, lq, lk)) < 0.6,
         "additive": rand(1, hq, lq, lk)}.get(mask, mask)
    check(q, k, v, m)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
@pytest.mark.parametrize("mask", [None, "causal"])
def test_half_and_double(dtype, mask, device):
    check(rand(1, 4, 100, 64), rand(1, 2, 300, 64), rand(1, 2, 300, 64), mask, dtype)


def test_neg_inf_additive_mask_across_blocks(device):
    # The first key block of every row is -inf: it must add nothing (not NaN) and the
    # later block decides; a row that is -inf everywhere is NaN as in the composition.
    lq, lk = 5, 600
    mask = np.zeros((lq, lk), np.float32)
    mask[:, :300] = -np.inf
    mask[4, :] = -np.inf
    q, k, v = rand(1, 1, lq, 8), rand(1, 1, lk, 8), rand(1, 1, lk, 8)
    y = np.array(mx.fast.scaled_dot_product_attention(
        mx.array(q), mx.array(k), mx.array(v), scale=0.5, mask=mx.array(mask)))
    ref = np_sdpa(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), 0.5, mask)
    np.testing.assert_allclose(y[0, 0, :4], ref[0, 0, :4], rtol=1e-4, atol=1e-4)
    assert np.isnan(y[0, 0, 4]).all()


def test_causal_fully_hidden_rows_and_large_scores(device):
    # Lq > Lk: the first queries see no key (they average every value, as MLX); large
    # scores must not overflow the running maximum.
    q, k, v = rand(1, 2, 330, 16) * 30, rand(1, 2, 270, 16), rand(1, 2, 270, 16)
    check(q, k, v, "causal", scale=1.0)


def test_nan_propagates(device):
    q, k, v = rand(1, 1, 70, 8), rand(1, 1, 300, 8), rand(1, 1, 300, 8)
    k[0, 0, 280, 3] = np.nan  # second key block
    y = np.array(mx.fast.scaled_dot_product_attention(
        mx.array(q), mx.array(k), mx.array(v), scale=1.0))
    assert np.isnan(y).all()


def test_strided_views(device):
    base = rand(1, 70, 2, 2 * 16)
    q = mx.array(base).transpose(0, 2, 1, 3)[..., ::2]  # (1, 2, 70, 16), strided
    k = mx.array(rand(1, 2, 16, 290)).swapaxes(-1, -2)
    v = mx.array(rand(1, 2, 290, 24))[:, ::-1]
    y = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.25, mask="causal")
    ref = np_sdpa(f64(q), f64(k), f64(v), 0.25, "causal")
    np.testing.assert_allclose(f64(y), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dims", SHAPES + [(1, 2, 1, 100, 101, 16, 24)])
@pytest.mark.parametrize("mask", [None, "causal", "bool", "additive"])
def test_bfloat16_against_float32_kernel(dims, mask):
    # bfloat16 inputs run on bfloat16 dot products on AMD CPUs with AVX512-BF16 (the
    # probabilities are rounded to bfloat16 for the second product): same values, same
    # infinities and NaN as the float32 kernel, within bfloat16 rounding. Lk - Lq odd makes
    # a causal block end on an odd key; the next key's infinite value must stay unseen.
    b, hq, hk, lq, lk, d, dv = dims
    q, k, v = rand(b, hq, lq, d), rand(b, hk, lk, d), rand(b, hk, lk, dv)
    if lk == 101:
        v[:, :, 65] = np.inf
    m = {"bool": RNG.random((b, 1, lq, lk)) < 0.6,
         "additive": rand(1, hq, lq, lk)}.get(mask, mask)
    qa, ka, va = (mx.array(x).astype(mx.bfloat16) for x in (q, k, v))
    ma = mx.array(m).astype(mx.bfloat16 if m.dtype != np.bool_ else mx.bool_) \
        if isinstance(m, np.ndarray) else m
    with mx.stream(mx.cpu):  # the CPU kernels (a GPU's float32 kernel sees hidden infinities)
        y = mx.fast.scaled_dot_product_attention(qa, ka, va, scale=0.3, mask=ma)
        f32 = [x.astype(mx.float32) for x in (qa, ka, va)]
        m32 = ma.astype(mx.float32) if isinstance(ma, mx.array) and ma.dtype != mx.bool_ else ma
        want = mx.fast.scaled_dot_product_attention(*f32, scale=0.3, mask=m32)
        assert y.dtype == mx.bfloat16
        got, want = np.array(y.astype(mx.float32)), np.array(want)
    if lk == 101 and mask == "causal":
        assert np.isfinite(got[:, :, :64]).all()
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)


def test_bfloat16_nan_propagates():
    q, k, v = rand(1, 1, 70, 8), rand(1, 1, 301, 8), rand(1, 1, 301, 8)
    k[0, 0, 280, 3] = np.nan
    y = mx.fast.scaled_dot_product_attention(
        *(mx.array(x).astype(mx.bfloat16) for x in (q, k, v)), scale=1.0)
    assert np.isnan(np.array(y.astype(mx.float32))).all()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("mask", [None, "causal"])
def test_head_dim_zero(dtype, mask, device):
    # Every score is 0: each query averages the values it sees (as MLX).
    check(rand(1, 2, 3, 0), rand(1, 2, 5, 0), rand(1, 2, 5, 4), mask, dtype, scale=1.0)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_no_keys_and_empty_values(dtype, device):
    # No keys: zeros (as MLX); value dim 0: an empty result.
    dt = getattr(mx, dtype)
    q, k, v = (mx.array(rand(*s)).astype(dt) for s in ((1, 2, 5, 8), (1, 2, 0, 8), (1, 2, 0, 4)))
    y = mx.fast.scaled_dot_product_attention(q, k, v, scale=1.0)
    assert y.shape == (1, 2, 5, 4) and not np.array(y.astype(mx.float32)).any()
    k, v = (mx.array(rand(*s)).astype(dt) for s in ((1, 2, 7, 8), (1, 2, 7, 0)))
    y = mx.fast.scaled_dot_product_attention(q, k, v, scale=1.0, mask="causal")
    assert y.shape == (1, 2, 5, 0) and y.dtype == dt


# ---- the GPU kernels' shape classes, on every device -----------------------------------

GPU_FLOATS = [mx.float32, mx.float16, mx.bfloat16]
GPU_IDS = ["float32", "float16", "bfloat16"]
# The GPU's half-float path rounds the probabilities to the input dtype before the P V
# product (as flash attention does); the CPU keeps them in float32.
ATOL = {mx.float32: 1e-4, mx.float16: 1e-2, mx.bfloat16: 4e-2}
URNG = np.random.default_rng(11)


def uniform(shape, dtype=mx.float32, lo=-3.0, hi=3.0):
    x = URNG.random(shape, dtype=np.float32) * np.float32(hi - lo) + np.float32(lo)
    return mx.array(x).astype(dtype)


def close(a, b, tol):
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol, equal_nan=True)


def grouped_sdpa(q, k, v, scale, mask=None):
    """np_sdpa without repeating K and V per query head: (B, Hk, G, Lq, D) queries against
    broadcast (B, Hk, 1, Lk, D) keys (decode shapes have thousands of keys)."""
    b, hq, lq, d = q.shape
    hk, lk = k.shape[1], k.shape[2]
    g = hq // hk
    s = scale * q.reshape(b, hk, g, lq, d) @ np.swapaxes(k, -1, -2)[:, :, None]
    if isinstance(mask, str):
        mask = np.arange(lk)[None, :] <= np.arange(lq)[:, None] + (lk - lq)
    if mask is not None:
        m = np.asarray(mask)
        m = m.reshape((1,) * (4 - m.ndim) + m.shape)
        m = m.reshape(m.shape[0], hk, g, lq, lk) if m.shape[1] == hq and hq > 1 else m[:, :, None]
        s = np.where(m, s, np.finfo(s.dtype).min) if m.dtype == np.bool_ else s + m
    with np.errstate(invalid="ignore"):
        s = s - s.max(-1, keepdims=True)
        p = np.exp(s)
        out = (p / p.sum(-1, keepdims=True)) @ v[:, :, None]
    return out.reshape(b, hq, lq, v.shape[-1])


def mask_inputs(kind, b, hq, lq, lk, dtype, hidden_rows):
    """The mask argument and its numpy twin: bool masks hide the first `hidden_rows` rows
    entirely (such a row averages every value)."""
    if kind == "bool":
        m = URNG.random((b, 1, lq, lk)) < (0.6 if hidden_rows > 1 else 0.7)
        m[:, :, :min(hidden_rows, lq)] = False
        return mx.array(m), m
    if kind == "additive":
        m = uniform((1, hq, lq, lk), dtype)
        return m, f64(m)
    return kind, kind


ATTN_SHAPES = [  # B, Hq, Hk, Lq, Lk, D, Dv
    (1, 2, 2, 130, 300, 64, 64),    # partial query and key tiles
    (2, 4, 2, 65, 129, 128, 128),   # GQA 2
    (1, 4, 1, 1, 77, 64, 64),       # one query, GQA 4
    (1, 2, 2, 200, 150, 80, 80),    # D 80: padded tiles on the tensor-core path
    (1, 2, 1, 33, 40, 32, 32),      # D 32
    (1, 2, 2, 9, 70, 16, 16),       # D 16
    (1, 2, 1, 50, 90, 72, 72),      # D 72 (not a multiple of 16): the simple kernel
    (1, 1, 1, 70, 70, 128, 64),     # Dv != D: the simple kernel
    (2, 8, 2, 17, 300, 128, 128),   # Lq < Lk, GQA 4
    (1, 2, 2, 100, 64, 64, 64),     # Lq > Lk: causal rows that see no key
]
MASKS = [None, "causal", "bool", "additive"]


def attention_case(dims, dtype, mask, hidden_rows):
    b, hq, hk, lq, lk, d, dv = dims
    q, k, v = uniform((b, hq, lq, d), dtype), uniform((b, hk, lk, d), dtype), uniform((b, hk, lk, dv), dtype)
    m, nm = mask_inputs(mask, b, hq, lq, lk, dtype, hidden_rows)
    return q, k, v, m, nm


@pytest.mark.parametrize("dtype", GPU_FLOATS, ids=GPU_IDS)
@pytest.mark.parametrize("dims", ATTN_SHAPES, ids=str)
@pytest.mark.parametrize("mask", MASKS)
def test_kernel_shapes(dtype, dims, mask, device):
    q, k, v, m, nm = attention_case(dims, dtype, mask, hidden_rows=3)
    scale = 1 / math.sqrt(dims[5])
    y = mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=m)
    assert y.shape == dims[:2] + (dims[3], dims[6])
    close(f64(y), grouped_sdpa(f64(q), f64(k), f64(v), scale, nm), ATOL[dtype])


@pytest.mark.parametrize("dtype", GPU_FLOATS, ids=GPU_IDS)
def test_strided_inputs_and_broadcast_masks(dtype, device):
    # The usual layout: (B, L, H, D) projections viewed as (B, H, L, D).
    b, lq, lk, hq, hk, d = 2, 70, 90, 4, 2, 64
    q = mx.swapaxes(uniform((b, lq, hq, d), dtype), 1, 2)
    k = mx.swapaxes(uniform((b, lk, hk, d), dtype), 1, 2)
    v = mx.swapaxes(uniform((b, lk, hk, d), dtype), 1, 2)[:, :, ::-1]
    masks = [
        mx.array(URNG.random((lq, lk)) < 0.5),  # 2-d, broadcast over B and H
        mx.array(URNG.random((b, 1, 1, lk)) < 0.5),  # key padding
        mx.swapaxes(uniform((b, hq, lk, lq), dtype), -1, -2),  # transposed additive mask
    ]
    for m in masks:
        y = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.2, mask=m)
        nm = np.array(m) if m.dtype == mx.bool_ else f64(m)
        close(f64(y), grouped_sdpa(f64(q), f64(k), f64(v), 0.2, nm), ATOL[dtype])


def test_edges_of_the_kernels(device):
    # No keys: zeros. Additive -inf rows: NaN (0 / 0). Large scores stay finite.
    q, k = uniform((1, 2, 5, 64), mx.bfloat16), uniform((1, 2, 0, 64), mx.bfloat16)
    y = mx.fast.scaled_dot_product_attention(q, k, k, scale=1.0)
    np.testing.assert_array_equal(f64(y), np.zeros((1, 2, 5, 64)))
    q, k, v = (uniform(s, mx.float16) for s in ((1, 1, 4, 64), (1, 1, 9, 64), (1, 1, 9, 64)))
    m = np.zeros((4, 9), np.float32)
    m[1] = -np.inf
    mh = mx.array(m).astype(mx.float16)
    y = f64(mx.fast.scaled_dot_product_attention(q, k, v, scale=1.0, mask=mh))
    want = grouped_sdpa(f64(q), f64(k), f64(v), 1.0, f64(mh))
    np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
    assert np.isnan(y[0, 0, 1]).all()
    close(y, want, ATOL[mx.float16])
    y = f64(mx.fast.scaled_dot_product_attention(q * 4, k * 4, v, scale=1.0))
    assert np.isfinite(y).all()
    close(y, grouped_sdpa(f64(q * 4), f64(k * 4), f64(v), 1.0), 5e-2)


# Decode: B, Hq, Hk, Lq, Lk, D, Dv: one span (few keys), many spans (hundreds: more than the
# combine's threads), GQA 1 to 8, up to 16 rows per KV head (two row tiles), odd lengths, head
# dims 64 to 256.
DECODE_SHAPES = [
    (1, 32, 8, 1, 4096, 128, 128),
    (1, 4, 1, 1, 70001, 64, 64),
    (1, 32, 8, 1, 40, 128, 128),
    (2, 8, 2, 3, 1000, 64, 64),
    (1, 4, 4, 16, 777, 96, 96),
    (1, 8, 1, 2, 3001, 128, 128),
    (1, 2, 2, 1, 5000, 256, 256),
    (1, 2, 1, 5, 129, 80, 80),
    (1, 3, 3, 1, 300, 128, 64),
    (3, 4, 2, 1, 1, 64, 64),
]


@pytest.mark.parametrize("dtype", GPU_FLOATS, ids=GPU_IDS)
@pytest.mark.parametrize("dims", DECODE_SHAPES, ids=str)
@pytest.mark.parametrize("mask", MASKS)
def test_decode_shapes(dtype, dims, mask, device):
    if device == mx.cpu and dims[4] >= 3000:
        pytest.skip("the CPU has no split-key decode kernel: its one-query blocks are "
                    "test_blocked_shapes' and the shorter decode shapes here")
    q, k, v, m, nm = attention_case(dims, dtype, mask, hidden_rows=1)
    scale = 1 / math.sqrt(dims[5])
    y = mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=m)
    assert y.shape == dims[:2] + (dims[3], dims[6])
    close(f64(y), grouped_sdpa(f64(q), f64(k), f64(v), scale, nm), ATOL[dtype])


@pytest.mark.parametrize("dtype", GPU_FLOATS, ids=GPU_IDS)
def test_decode_keys_from_a_preallocated_cache_and_misaligned_views(dtype, device):
    # mlx-lm's KVCache: a (B, Hk, capacity, D) buffer sliced to the keys written so far.
    b, hq, hk, d, cap = 1, 16, 4, 128, 1280
    kb, vb = uniform((b, hk, cap, d), dtype), uniform((b, hk, cap, d), dtype)
    q = uniform((b, hq, 1, d), dtype)

    def check(q, k, v, scale, mask=None):
        y = mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)
        close(f64(y), grouped_sdpa(f64(q), f64(k), f64(v), scale, mask), ATOL[dtype])

    for n in [1, 255, 1024, 1111]:
        check(q, kb[..., :n, :], vb[..., :n, :], 0.09)
    # A view starting one row in (misaligned for 16-byte loads when D * size is not a
    # multiple of 16 past it) and one with an odd head dim: the element-wise tile loads.
    check(q, kb[:, :, 1:600, :], vb[:, :, 3:602, :], 0.1)
    check(q[..., :77], kb[:, :, :500, :77], vb[:, :, :500, 1:78], 0.1)
    # Heads interleaved ((B, L, H, D) projections viewed as (B, H, L, D)).
    k = mx.swapaxes(uniform((b, 700, hk, d), dtype), 1, 2)
    v = mx.swapaxes(uniform((b, 700, hk, d), dtype), 1, 2)
    check(q, k, v, 0.1, "causal")


def test_decode_nan_and_inf_keys(device):
    dtype = mx.bfloat16
    b, hq, hk, lk, d = 1, 8, 2, 3000, 64
    q = uniform((b, hq, 1, d), dtype)
    k = np.asarray(URNG.uniform(-1, 1, (b, hk, lk, d)), np.float32)
    v = np.asarray(URNG.uniform(-1, 1, (b, hk, lk, d)), np.float32)
    k[0, 0, 2500] = np.nan  # head group 0 sees a NaN score
    v[0, 1, 100, :] = np.inf  # head group 1 sees an infinite value
    kk, vv = mx.array(k).astype(dtype), mx.array(v).astype(dtype)

    def run(m, n=lk):
        y = mx.fast.scaled_dot_product_attention(q, kk[:, :, :n], vv[:, :, :n], scale=0.1, mask=m)
        nm = None if m is None else np.array(m) if m.dtype == mx.bool_ else f64(m)
        return f64(y), grouped_sdpa(f64(q), f64(kk[:, :, :n]), f64(vv[:, :, :n]), 0.1, nm)

    g, want = run(None)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(want))
    assert np.isnan(g[0, :4]).all() and not np.isnan(g[0, 4:]).all()
    # Hidden keys stay hidden: a mask over the NaN key gives its heads finite rows (a hidden
    # infinite value still meets a zero weight: 0 * inf, NaN as in every product).
    keep = np.ones((1, 1, 1, lk), np.bool_)
    keep[..., 2500] = False
    g, want = run(mx.array(keep))
    assert np.isfinite(g[0, :4]).all()
    np.testing.assert_array_equal(np.isnan(g), np.isnan(want))
    close(g, want, ATOL[dtype])
    # An additive -inf row: NaN (0 / 0), one span or many.
    for n in [20, 3000]:
        m = np.zeros((1, hq, 1, n), np.float32)
        m[0, 3] = -np.inf
        g, want = run(mx.array(m).astype(dtype), n)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(want))
        close(g, want, ATOL[dtype])


def test_decode_without_keys_and_inside_compile(device):
    q, k = uniform((2, 4, 1, 64), mx.float16), uniform((2, 2, 0, 64), mx.float16)
    y = mx.fast.scaled_dot_product_attention(q, k, k, scale=1.0)
    np.testing.assert_array_equal(f64(y), np.zeros((2, 4, 1, 64)))
    q, k, v = (uniform(s, mx.bfloat16) for s in ((1, 8, 1, 128), (1, 2, 2000, 128), (1, 2, 2000, 128)))
    f = mx.compile(lambda q, k, v: mx.fast.scaled_dot_product_attention(q, k, v, scale=0.1) * 2)
    g, g2 = f64(f(q, k, v)), f64(f(q, k, v))
    np.testing.assert_array_equal(g, g2)
    close(g, 2 * grouped_sdpa(f64(q), f64(k), f64(v), 0.1), 8e-2)


def test_decode_spans_merged_by_the_last_block_across_launches(device):
    # Split-key launches of different span and unit counts back to back, unevaluated in
    # between (one stream of kernels): each launch's last block per unit merges its spans and
    # must leave its counter at zero for the next, so repeats give the same bits.
    dtype = mx.bfloat16
    cases = [(1, 32, 8, 4096), (2, 8, 2, 1000), (1, 32, 8, 600), (4, 16, 4, 3000)]
    made = []
    for b, hq, hk, lk in cases:
        q = uniform((b, hq, 1, 128), dtype)
        k, v = uniform((b, hk, lk, 128), dtype), uniform((b, hk, lk, 128), dtype)
        made.append((q, k, v))
    ys = [mx.fast.scaled_dot_product_attention(q, k, v, scale=0.09) for _ in range(3)
          for q, k, v in made]
    mx.eval(ys)
    for i, (q, k, v) in enumerate(made):
        want = grouped_sdpa(f64(q), f64(k), f64(v), 0.09)
        first = f64(ys[i])
        close(first, want, ATOL[dtype])
        for rep in (1, 2):
            np.testing.assert_array_equal(f64(ys[rep * len(made) + i]), first)
