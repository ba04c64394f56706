"""mx.fast's fused GPU kernels (layer_norm, rms_norm, rope, scaled_dot_product_attention)
against the same ops on mx.cpu, against their compositions of basic ops on the GPU and
against numpy: odd and long rows, strided and misaligned inputs, every mask, GQA, head dims
around the tensor-core path's 64 and 128, fully masked rows; gradients on the GPU; inside
mx.compile; and the attention kernels' simple path (KILN_CUDA_ATTENTION=simple).

Skipped (with the reason) where no GPU is available; run them on the GPU machine with
`python -m pytest tests/python/test_gpu_fast.py`."""

import math

import numpy as np
import pytest

import kiln.core as mx

pytestmark = pytest.mark.skipif(
    not mx.is_available(mx.gpu), reason="no GPU is available on this machine"
)

RNG = np.random.default_rng(11)
FLOATS = [mx.float32, mx.float16, mx.bfloat16]
TOL = {mx.float32: 2e-5, mx.float16: 2e-3, mx.bfloat16: 2e-2}
# Attention: the GPU's half-float path rounds the probabilities to the input dtype before
# the P V product (as flash attention does); the CPU keeps them in float32.
ATOL = {mx.float32: 1e-4, mx.float16: 1e-2, mx.bfloat16: 4e-2}


def rand(shape, dtype=mx.float32, lo=-3.0, hi=3.0):
    return mx.array(RNG.uniform(lo, hi, size=shape).astype(np.float32)).astype(dtype)


def npy(a):
    if a.dtype in (mx.float16, mx.bfloat16):
        a = a.astype(mx.float32)
    return np.array(a).astype(np.float64)


def on(device, fn, *args):
    with mx.stream(device):
        y = fn(*args)
        mx.eval(y)
    return y


def both(fn, *args):
    """fn on the GPU and on the CPU, as float64 numpy arrays."""
    return npy(on(mx.gpu, fn, *args)), npy(on(mx.cpu, fn, *args))


def close(a, b, tol):
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol, equal_nan=True)


# ---- compositions of basic ops, and numpy --------------------------------------------------

def comp_layer_norm(x, w, b, eps):
    xf = x.astype(mx.float32)
    mu = mx.mean(xf, axis=-1, keepdims=True)
    y = (xf - mu) * mx.rsqrt(mx.var(xf, axis=-1, keepdims=True) + eps)
    y = y * (1 if w is None else w.astype(mx.float32)) + (0 if b is None else b.astype(mx.float32))
    return y.astype(x.dtype)


def comp_rms_norm(x, w, eps):
    xf = x.astype(mx.float32)
    y = xf * mx.rsqrt(mx.mean(xf * xf, axis=-1, keepdims=True) + eps)
    return (y * (1 if w is None else w.astype(mx.float32))).astype(x.dtype)


def np_sdpa(q, k, v, scale, mask=None):
    g = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    s = scale * q @ np.swapaxes(k, -1, -2)
    lq, lk = q.shape[2], k.shape[2]
    if isinstance(mask, str):
        mask = np.arange(lk)[None, :] <= np.arange(lq)[:, None] + (lk - lq)
    if mask is not None and mask.dtype == np.bool_:
        s = np.where(mask, s, np.finfo(np.float32).min)
    elif mask is not None:
        s = s + mask
    s = s - s.max(-1, keepdims=True)
    p = np.exp(s)
    return (p / p.sum(-1, keepdims=True)) @ v


# ---- norms ----------------------------------------------------------------------------------

# Warp rows (<= 256 vectors), block rows in registers, streamed rows (over 2048 vectors of
# float32, 2048 of halves: 16-byte loads), odd lengths (scalar loads), empty.
NORM_SHAPES = [(5,), (3, 7), (2, 3, 33), (4, 1), (2, 0), (0, 8), (9, 1024), (3, 1000),
               (5, 4096), (2, 8200), (2, 17000), (2, 40000), (2, 70001)]
AFFINE = [(True, True), (True, False), (False, True), (False, False)]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", NORM_SHAPES)
@pytest.mark.parametrize("affine", AFFINE)
def test_layer_norm_matches_cpu(dtype, shape, affine):
    x = rand(shape, dtype)
    d = shape[-1]
    w = rand((d,), dtype) if affine[0] else None
    b = rand((d,), dtype) if affine[1] else None
    g, c = both(lambda x: mx.fast.layer_norm(x, w, b, 1e-5), x)
    close(g, c, TOL[dtype] * 4)
    g2 = npy(on(mx.gpu, comp_layer_norm, x, w, b, 1e-5))
    close(g, g2, TOL[dtype] * 4)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", NORM_SHAPES)
@pytest.mark.parametrize("weighted", [True, False])
def test_rms_norm_matches_cpu(dtype, shape, weighted):
    x = rand(shape, dtype)
    w = rand((shape[-1],), dtype) if weighted else None
    g, c = both(lambda x: mx.fast.rms_norm(x, w, 1e-6), x)
    close(g, c, TOL[dtype] * 4)
    close(g, npy(on(mx.gpu, comp_rms_norm, x, w, 1e-6)), TOL[dtype] * 4)


@pytest.mark.parametrize("dtype", FLOATS)
def test_norms_on_strided_and_misaligned_inputs(dtype):
    base = rand((64, 40), dtype)
    w, b = rand((64,), dtype), rand((64,), dtype)
    flat = rand((1 + 5 * 64,), dtype)
    views = [
        base.T,                              # transposed: copied to rows first
        base[::-1, ::2].T,                   # negative and 2-steps
        flat[1:].reshape(5, 64),             # row-major at an odd offset: scalar loads
        mx.broadcast_to(base[:1, :8], (3, 8)),  # zero strides
    ]
    for x in views:
        d = x.shape[-1]
        for fn in (lambda x: mx.fast.layer_norm(x, w[:d], b[:d], 1e-5),
                   lambda x: mx.fast.rms_norm(x, w[::-1][:d], 1e-5)):
            g, c = both(fn, x)
            close(g, c, TOL[dtype] * 4)


def test_norms_propagate_nan_and_inf():
    x = rand((4, 300))
    x = mx.where(mx.array(np.arange(300) == 7)[None, :] & mx.array([True, False, False, True])[:, None],
                 mx.array(float("nan")), x)
    x = mx.concatenate([x, mx.full((1, 300), float("inf"))])
    for fn in (lambda x: mx.fast.layer_norm(x, None, None, 1e-5),
               lambda x: mx.fast.rms_norm(x, None, 1e-5)):
        g, c = both(fn, x)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(c))
        close(g, c, 1e-4)


# ---- rope -----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("traditional", [False, True])
@pytest.mark.parametrize("shape,dims", [((2, 3, 5, 8), 8), ((1, 7, 16), 8), ((2, 4, 6), 2),
                                        ((3, 2, 9, 20), 12), ((1, 2, 300, 128), 64)])
@pytest.mark.parametrize("offset", [0, 37, "array", "vector"])
def test_rope_matches_cpu(dtype, traditional, shape, dims, offset):
    x = rand(shape, dtype)
    off = {"array": mx.array(5), "vector": mx.arange(shape[0]) * 3}.get(offset, offset)
    fn = lambda x: mx.fast.rope(x, dims, traditional=traditional, base=10000.0, scale=0.5,  # noqa: E731
                                offset=off)
    g, c = both(fn, x)
    close(g, c, TOL[dtype] * 2)


@pytest.mark.parametrize("dtype", FLOATS)
def test_rope_freqs_views_and_gradient(dtype):
    x = rand((2, 6, 3, 16), dtype)
    freqs = mx.array(RNG.uniform(1, 100, 6).astype(np.float32))
    view = mx.swapaxes(x, 1, 2)[:, :, ::-1]  # (2, 3, 6, 16), strided
    fn = lambda x: mx.fast.rope(x, 12, traditional=True, base=None, scale=1.0,  # noqa: E731
                                offset=mx.array([2, 9]), freqs=freqs)
    g, c = both(fn, view)
    close(g, c, TOL[dtype] * 2)
    ct = rand(view.shape, dtype)
    g, c = both(lambda x: mx.grad(lambda x: mx.sum(fn(x).astype(mx.float32) * ct))(x), view)
    close(g, c, TOL[dtype] * 4)


# ---- attention ------------------------------------------------------------------------------

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


def attn_inputs(dims, dtype, mask):
    b, hq, hk, lq, lk, d, dv = dims
    q, k, v = rand((b, hq, lq, d), dtype), rand((b, hk, lk, d), dtype), rand((b, hk, lk, dv), dtype)
    if mask == "bool":
        m = RNG.random((b, 1, lq, lk)) < 0.6
        m[:, :, : min(3, lq)] = False  # fully masked rows: every key averaged, as the CPU
        m = mx.array(m)
    elif mask == "additive":
        m = rand((1, hq, lq, lk), dtype)
    else:
        m = mask
    return q, k, v, m


@pytest.fixture(params=["fast", "simple"])
def path(request, monkeypatch):
    if request.param == "simple":
        monkeypatch.setenv("KILN_CUDA_ATTENTION", "simple")
    else:
        monkeypatch.delenv("KILN_CUDA_ATTENTION", raising=False)
    return request.param


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dims", ATTN_SHAPES)
@pytest.mark.parametrize("mask", MASKS)
def test_attention_matches_cpu_and_numpy(dtype, dims, mask, path):
    q, k, v, m = attn_inputs(dims, dtype, mask)
    scale = 1 / math.sqrt(dims[5])
    fn = lambda q, k, v: mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=m)  # noqa: E731
    g, c = both(fn, q, k, v)
    assert g.shape == dims[:2] + (dims[3], dims[6])
    close(g, c, ATOL[dtype])
    nm = m if isinstance(m, str) or m is None else npy(m) if m.dtype != mx.bool_ else np.array(m)
    close(g, np_sdpa(npy(q), npy(k), npy(v), scale, nm), ATOL[dtype])


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16])
@pytest.mark.parametrize("mask", MASKS)
def test_attention_fast_path_equals_simple_path(dtype, mask, monkeypatch):
    q, k, v, m = attn_inputs((2, 4, 2, 150, 200, 128, 128), dtype, mask)
    fn = lambda: mx.fast.scaled_dot_product_attention(q, k, v, scale=0.1, mask=m)  # noqa: E731
    fast = npy(on(mx.gpu, fn))
    monkeypatch.setenv("KILN_CUDA_ATTENTION", "simple")
    simple = npy(on(mx.gpu, fn))
    close(fast, simple, ATOL[dtype])


@pytest.mark.parametrize("dtype", FLOATS)
def test_attention_strided_inputs_and_broadcast_masks(dtype, path):
    # The usual layout: (B, L, H, D) projections viewed as (B, H, L, D).
    b, lq, lk, hq, hk, d = 2, 70, 90, 4, 2, 64
    q = mx.swapaxes(rand((b, lq, hq, d), dtype), 1, 2)
    k = mx.swapaxes(rand((b, lk, hk, d), dtype), 1, 2)
    v = mx.swapaxes(rand((b, lk, hk, d), dtype), 1, 2)[:, :, ::-1]
    masks = [
        mx.array(RNG.random((lq, lk)) < 0.5),            # 2-d, broadcast over B and H
        mx.array(RNG.random((b, 1, 1, lk)) < 0.5),       # key padding
        mx.swapaxes(rand((b, hq, lk, lq), dtype), -1, -2),   # transposed additive mask
    ]
    for m in masks:
        fn = lambda q, k, v: mx.fast.scaled_dot_product_attention(q, k, v, scale=0.2, mask=m)  # noqa: E731
        g, c = both(fn, q, k, v)
        close(g, c, ATOL[dtype])


def test_long_float32_attention_runs_fused(monkeypatch):
    # Scores of 256 MiB: the simple kernel, not a composition materialising them.
    monkeypatch.delenv("KILN_CUDA_ATTENTION", raising=False)
    q, k, v = (rand((1, 4, 4096, 32), mx.float32, -1, 1) for _ in range(3))
    mx.eval(q, k, v)
    fn = lambda q, k, v: mx.fast.scaled_dot_product_attention(q, k, v, scale=0.3, mask="causal")  # noqa: E731
    mx.reset_peak_memory()
    g = on(mx.gpu, fn, q, k, v)
    assert mx.get_peak_memory() < 64 << 20
    c = on(mx.cpu, fn, q, k, v)
    close(npy(g), npy(c), ATOL[mx.float32])


def test_attention_edges(path):
    # No keys: zeros. Additive -inf rows: NaN as the CPU. Large scores stay finite.
    q, k, v = rand((1, 2, 5, 64), mx.bfloat16), rand((1, 2, 0, 64), mx.bfloat16), rand((1, 2, 0, 64), mx.bfloat16)
    g, c = both(lambda: mx.fast.scaled_dot_product_attention(q, k, v, scale=1.0))
    np.testing.assert_array_equal(g, c)
    q, k, v = rand((1, 1, 4, 64), mx.float16), rand((1, 1, 9, 64), mx.float16), rand((1, 1, 9, 64), mx.float16)
    m = np.zeros((4, 9), np.float32)
    m[1] = -np.inf
    m = mx.array(m).astype(mx.float16)
    g, c = both(lambda: mx.fast.scaled_dot_product_attention(q, k, v, scale=1.0, mask=m))
    np.testing.assert_array_equal(np.isnan(g), np.isnan(c))
    close(g, c, ATOL[mx.float16])
    g, c = both(lambda: mx.fast.scaled_dot_product_attention(q * 4, k * 4, v, scale=1.0))
    assert np.isfinite(g).all()
    close(g, c, 5e-2)


# ---- gradients, compile, staying on the GPU --------------------------------------------------

@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16])
def test_gradients_on_the_gpu_match_cpu(dtype):
    x, w, b = rand((6, 96), dtype), rand((96,), dtype), rand((96,), dtype)
    ct = rand((6, 96), mx.float32)
    for fn in (lambda x, w, b: mx.fast.layer_norm(x, w, b, 1e-5),
               lambda x, w, b: mx.fast.rms_norm(x, w, 1e-5) + b):
        loss = lambda x, w, b: mx.sum(fn(x, w, b).astype(mx.float32) * ct)  # noqa: E731
        grads = lambda x, w, b: mx.grad(loss, argnums=(0, 1, 2))(x, w, b)  # noqa: E731
        for g, c in zip(on(mx.gpu, grads, x, w, b), on(mx.cpu, grads, x, w, b)):
            close(npy(g), npy(c), TOL[dtype] * 5)
    q, k, v = rand((1, 4, 40, 64), dtype, -1, 1), rand((1, 2, 50, 64), dtype, -1, 1), rand((1, 2, 50, 64), dtype, -1, 1)
    cq = rand((1, 4, 40, 64), mx.float32)
    for mask in MASKS[:2]:
        loss = lambda q, k, v: mx.sum(mx.fast.scaled_dot_product_attention(  # noqa: E731
            q, k, v, scale=0.125, mask=mask).astype(mx.float32) * cq)
        grads = lambda q, k, v: mx.grad(loss, argnums=(0, 1, 2))(q, k, v)  # noqa: E731
        for g, c in zip(on(mx.gpu, grads, q, k, v), on(mx.cpu, grads, q, k, v)):
            close(npy(g), npy(c), ATOL[dtype] * 5)


def test_fast_ops_inside_compile_on_the_gpu():
    x, w, b = rand((4, 256), mx.bfloat16), rand((256,), mx.bfloat16), rand((256,), mx.bfloat16)
    q, k, v = rand((1, 4, 33, 64), mx.bfloat16), rand((1, 2, 47, 64), mx.bfloat16), rand((1, 2, 47, 64), mx.bfloat16)

    def f(x, q):
        h = mx.fast.layer_norm(x, w, b, 1e-5) * 2 + 1
        h = mx.fast.rms_norm(h, w, 1e-5)
        r = mx.fast.rope(q, 64, traditional=False, base=1e4, scale=1.0, offset=3)
        a = mx.fast.scaled_dot_product_attention(r, k, v, scale=0.125, mask="causal")
        return mx.exp(h.astype(mx.float32)), a * 3

    with mx.stream(mx.gpu):
        eager = f(x, q)
        compiled = mx.compile(f)(x, q)
        mx.eval(eager, compiled)
    for a, c in zip(eager, compiled):
        close(npy(a), npy(c), 5e-2)


def test_forward_and_gradients_stay_on_the_gpu(capfd, monkeypatch):
    monkeypatch.setenv("KILN_LOG", "gpu")
    x, w = rand((4, 128), mx.bfloat16), rand((128,), mx.bfloat16)
    q, k, v = rand((1, 4, 20, 64), mx.bfloat16), rand((1, 2, 30, 64), mx.bfloat16), rand((1, 2, 30, 64), mx.bfloat16)

    def loss(x, q, k, v):
        h = mx.fast.layer_norm(mx.fast.rms_norm(x, w, 1e-5), w, w, 1e-5)
        r = mx.fast.rope(q, 32, traditional=True, base=1e4, scale=1.0, offset=mx.array([5]))
        a = mx.fast.scaled_dot_product_attention(r, k, v, scale=0.1, mask="causal")
        return mx.sum(h.astype(mx.float32)) + mx.sum(a.astype(mx.float32))

    with mx.stream(mx.gpu):
        mx.eval(mx.value_and_grad(loss, argnums=(0, 1, 2, 3))(x, q, k, v))
    err = capfd.readouterr().err
    assert "runs on the CPU" not in err, err
