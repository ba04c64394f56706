"""`mx.fast.scaled_dot_product_attention(..., sinks=)`: a per-head sink logit that joins every
row's softmax and carries no value (gpt-oss in mlx-lm). Against a float64 numpy reference on
each device, for every mask kind, grouped-query heads and empty key sets; gradients (sinks
included) against central differences; MLX's own results where MLX is installed; the errors
MLX raises for bad sinks."""

import numpy as np
import pytest

import kiln.core as mx

try:
    import mlx.core as real_mlx
except ImportError:
    real_mlx = None

RNG = np.random.default_rng(21)
TOL = {mx.float32: 2e-5, mx.float16: 1e-2, mx.bfloat16: 4e-2}


def reference(q, k, v, scale, sinks, mask):
    """float64 numpy: scores, mask (hidden keys take no weight), the sink column prepended
    to each row's softmax, dropped before the values."""
    hq, hk = q.shape[1], k.shape[1]
    kk, vv = np.repeat(k, hq // hk, axis=1), np.repeat(v, hq // hk, axis=1)
    s = scale * q @ np.swapaxes(kk, -1, -2)
    lq, lk = q.shape[2], k.shape[2]
    if isinstance(mask, str):
        i, j = np.arange(lq)[:, None], np.arange(lk)[None]
        s = np.where(j <= i + lk - lq, s, -np.inf)
    elif mask is not None and mask.dtype == bool:
        s = np.where(mask, s, -np.inf)
    elif mask is not None:
        s = s + mask
    sk = np.broadcast_to(sinks[None, :, None, None], s.shape[:-1] + (1,))
    full = np.concatenate([sk, s], -1)
    p = np.exp(full - full.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return p[..., 1:] @ vv


def case(dims, mask_kind, seed=0):
    b, hq, hk, lq, lk, d = dims
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal(s) for s in ((b, hq, lq, d), (b, hk, lk, d), (b, hk, lk, d)))
    sinks = rng.standard_normal(hq) * 2
    if mask_kind == "bool":
        mask = rng.random((b, 1, lq, lk)) < 0.7
        mask[:, :, 0] = False  # a row that sees no key: only the sink, so zeros out
    elif mask_kind == "additive":
        mask = rng.standard_normal((1, hq, lq, lk))
    else:
        mask = mask_kind
    return q, k, v, sinks, mask


def kiln_mask(mask, dtype):
    if mask is None or isinstance(mask, str):
        return mask
    return mx.array(mask) if mask.dtype == bool else mx.array(mask).astype(dtype)


def rounded(x, dtype):
    return np.array(mx.array(x).astype(dtype).astype(mx.float32)).astype(np.float64)


SHAPES = [  # B, Hq, Hk, Lq, Lk, D
    (1, 4, 4, 6, 9, 8),
    (2, 8, 2, 5, 17, 16),  # GQA 4
    (1, 2, 1, 1, 40, 32),  # one query (decode)
    (1, 2, 2, 7, 3, 8),  # more queries than keys: causal rows with no key
]


@pytest.mark.parametrize("dtype", [mx.float32, mx.float16, mx.bfloat16], ids=str)
@pytest.mark.parametrize("dims", SHAPES, ids=str)
@pytest.mark.parametrize("mask", [None, "causal", "bool", "additive"])
def test_sinks_match_numpy(dtype, dims, mask, device):
    q, k, v, sinks, m = case(dims, mask)
    q, k, v, sinks = (rounded(x, dtype) for x in (q, k, v, sinks))
    scale = dims[-1] ** -0.5
    args = [mx.array(x).astype(dtype) for x in (q, k, v)]
    y = mx.fast.scaled_dot_product_attention(
        *args, scale=scale, mask=kiln_mask(m, dtype), sinks=mx.array(sinks).astype(dtype))
    assert y.dtype == dtype and y.shape == q.shape[:3] + (v.shape[-1],)
    if isinstance(m, np.ndarray) and m.dtype != bool:
        m = rounded(m, dtype)
    want = reference(q, k, v, scale, sinks, m)
    np.testing.assert_allclose(np.array(y.astype(mx.float32)), want, rtol=TOL[dtype], atol=TOL[dtype])


def test_sinks_with_no_keys_give_zeros(device):
    q = mx.ones((1, 2, 3, 4))
    kv = mx.zeros((1, 2, 0, 4))
    y = mx.fast.scaled_dot_product_attention(q, kv, kv, scale=1.0, sinks=mx.array([0.5, -1.0]))
    assert y.shape == (1, 2, 3, 4) and not np.array(y).any()


def test_sinks_gradients_match_central_differences():
    q, k, v, sinks, m = case((1, 4, 2, 3, 5, 4), "causal", seed=3)
    weights = RNG.standard_normal((1, 4, 3, 4))

    def loss(q, k, v, s):
        y = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.7, mask="causal", sinks=s)
        return (y * mx.array(weights)).sum()

    xs = [mx.array(x) for x in (q, k, v, sinks)]
    grads = mx.grad(loss, argnums=(0, 1, 2, 3))(*xs)
    eps = 1e-3
    for n, (x, g) in enumerate(zip((q, k, v, sinks), grads)):
        num = np.zeros(x.size)
        for i in range(x.size):
            hi, lo = x.copy().ravel(), x.copy().ravel()
            hi[i] += eps
            lo[i] -= eps
            args_hi = [mx.array(a) for a in (q, k, v, sinks)]
            args_lo = [mx.array(a) for a in (q, k, v, sinks)]
            args_hi[n], args_lo[n] = mx.array(hi.reshape(x.shape)), mx.array(lo.reshape(x.shape))
            num[i] = (loss(*args_hi).item() - loss(*args_lo).item()) / (2 * eps)
        np.testing.assert_allclose(np.array(g).ravel(), num, rtol=2e-2, atol=2e-3)


def test_sinks_under_compile_and_vmap():
    q, k, v, sinks, _ = case((2, 4, 2, 3, 6, 8), None, seed=5)
    args = [mx.array(x).astype(mx.float32) for x in (q, k, v, sinks)]

    def f(q, k, v, s):
        return mx.fast.scaled_dot_product_attention(q, k, v, scale=0.3, sinks=s)

    want = reference(q, k, v, 0.3, sinks, None)
    np.testing.assert_allclose(np.array(mx.compile(f)(*args)), want, rtol=1e-4, atol=1e-5)
    # vmap over a leading axis of two stacked copies (each example rank 4, as sdpa needs).
    stacked = [mx.stack([a, 2 * a]) for a in args[:3]]
    batched = np.array(mx.vmap(f, in_axes=(0, 0, 0, None))(*stacked, args[3]))
    np.testing.assert_allclose(batched[0], want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(batched[1], reference(2 * q, 2 * k, 2 * v, 0.3, sinks, None),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("bad, message", [
    (np.zeros(3, np.float32), "invalid shape for sinks"),
    (np.zeros((1, 4, 1, 1), np.float32), "invalid shape for sinks"),
])
def test_bad_sinks_raise_like_mlx(bad, message):
    q = mx.ones((1, 4, 2, 8))
    with pytest.raises(ValueError, match=message):
        mx.fast.scaled_dot_product_attention(q, q, q, scale=1.0, sinks=mx.array(bad))


def test_sinks_must_promote_to_the_output_type():
    q = mx.ones((1, 2, 2, 8), mx.bfloat16)
    with pytest.raises(ValueError, match="must promote to output type"):
        mx.fast.scaled_dot_product_attention(q, q, q, scale=1.0,
                                             sinks=mx.ones((2,), mx.float16))
    y = mx.fast.scaled_dot_product_attention(q.astype(mx.float32), q, q, scale=1.0,
                                             sinks=mx.ones((2,), mx.int32))
    assert y.dtype == mx.float32


@pytest.mark.skipif(real_mlx is None, reason="MLX is not installed")
@pytest.mark.parametrize("mask", [None, "causal", "bool", "additive"])
def test_sinks_match_mlx(mask):
    q, k, v, sinks, m = case((2, 8, 2, 5, 11, 16), mask, seed=9)
    q, k, v, sinks = (x.astype(np.float32) for x in (q, k, v, sinks))
    if isinstance(m, np.ndarray) and m.dtype != bool:
        m = m.astype(np.float32)
    ours = mx.fast.scaled_dot_product_attention(
        *(mx.array(x) for x in (q, k, v)), scale=0.25,
        mask=m if m is None or isinstance(m, str) else mx.array(m), sinks=mx.array(sinks))
    theirs = real_mlx.fast.scaled_dot_product_attention(
        *(real_mlx.array(x) for x in (q, k, v)), scale=0.25,
        mask=m if m is None or isinstance(m, str) else real_mlx.array(m),
        sinks=real_mlx.array(sinks))
    np.testing.assert_allclose(np.array(ours), np.array(theirs), rtol=1e-5, atol=1e-5)
