"""mx.fast.scaled_dot_product_attention's tiled CPU kernel: shapes that cross its query
blocks (64), key blocks (256) and register tiles (6/32 scores, 4/64 and 8 value columns),
masks across blocks, GQA, half types and strided views, against numpy."""

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
def test_blocked_shapes(dims, mask):
    b, hq, hk, lq, lk, d, dv = dims
    q, k, v = rand(b, hq, lq, d), rand(b, hk, lk, d), rand(b, hk, lk, dv)
    m = {"bool": RNG.random((b, 1, lq, lk)) < 0.6,
         "additive": rand(1, hq, lq, lk)}.get(mask, mask)
    check(q, k, v, m)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
@pytest.mark.parametrize("mask", [None, "causal"])
def test_half_and_double(dtype, mask):
    check(rand(1, 4, 100, 64), rand(1, 2, 300, 64), rand(1, 2, 300, 64), mask, dtype)


def test_neg_inf_additive_mask_across_blocks():
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


def test_causal_fully_hidden_rows_and_large_scores():
    # Lq > Lk: the first queries see no key (they average every value, as MLX); large
    # scores must not overflow the running maximum.
    q, k, v = rand(1, 2, 330, 16) * 30, rand(1, 2, 270, 16), rand(1, 2, 270, 16)
    check(q, k, v, "causal", scale=1.0)


def test_nan_propagates():
    q, k, v = rand(1, 1, 70, 8), rand(1, 1, 300, 8), rand(1, 1, 300, 8)
    k[0, 0, 280, 3] = np.nan  # second key block
    y = np.array(mx.fast.scaled_dot_product_attention(
        mx.array(q), mx.array(k), mx.array(v), scale=1.0))
    assert np.isnan(y).all()


def test_strided_views():
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
def test_head_dim_zero(dtype, mask):
    # Every score is 0: each query averages the values it sees (as MLX).
    check(rand(1, 2, 3, 0), rand(1, 2, 5, 0), rand(1, 2, 5, 4), mask, dtype, scale=1.0)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_no_keys_and_empty_values(dtype):
    # No keys: zeros (as MLX); value dim 0: an empty result.
    dt = getattr(mx, dtype)
    q, k, v = (mx.array(rand(*s)).astype(dt) for s in ((1, 2, 5, 8), (1, 2, 0, 8), (1, 2, 0, 4)))
    y = mx.fast.scaled_dot_product_attention(q, k, v, scale=1.0)
    assert y.shape == (1, 2, 5, 4) and not np.array(y.astype(mx.float32)).any()
    k, v = (mx.array(rand(*s)).astype(dt) for s in ((1, 2, 7, 8), (1, 2, 7, 0)))
    y = mx.fast.scaled_dot_product_attention(q, k, v, scale=1.0, mask="causal")
    assert y.shape == (1, 2, 5, 0) and y.dtype == dt
