"""mx.fast: each fused op against numpy and against its composition from basic ops (values,
gradients, jvp), inside compile and vmap, against MLX when installed; user C kernels."""

import math

import kiln.core as mx
import numpy as np
import pytest

try:
    import mlx.core as mlx
except ImportError:  # pragma: no cover
    mlx = None

# numpy's references warn on empty rows (mean of nothing); kiln's results are compared anyway.
pytestmark = pytest.mark.filterwarnings("ignore:Mean of empty slice",
                                        "ignore:invalid value encountered")

RNG = np.random.default_rng(0)
TOL = {"float32": 2e-5, "float64": 1e-10, "float16": 2e-3, "bfloat16": 2e-2}


def rand(*shape, dtype="float32"):
    return mx.array(RNG.standard_normal(shape).astype(np.float32)).astype(getattr(mx, dtype))


def npy(a):
    # bfloat16 through float32 (exact; the GPU has no float64).
    return np.array(a.astype(mx.float32) if a.dtype == mx.bfloat16 else a).astype(np.float64)


def close(a, b, dtype="float32", scale=1.0, device=None):
    """Within the dtype's tolerance times `scale` (twice that on the GPU: its bound against
    the CPU, on top of the CPU's against numpy)."""
    tol = TOL[dtype] * scale * (2 if device == mx.gpu else 1)
    np.testing.assert_allclose(npy(a) if isinstance(a, mx.array) else a,
                               npy(b) if isinstance(b, mx.array) else b, rtol=tol, atol=tol)


# ---- numpy references ---------------------------------------------------------------------

def np_layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    y = (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps)
    return y * (1 if w is None else w) + (0 if b is None else b)


def np_rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * (1 if w is None else w)


def np_rope(x, dims, traditional, base, scale, offset, freqs=None):
    half = dims // 2
    t = x.shape[-2]
    inv = (1.0 / freqs) if freqs is not None else base ** (-np.arange(half) * 2.0 / dims)
    off = np.broadcast_to(np.asarray(offset).reshape(-1), (x.shape[0],))
    out = x.copy()
    for b in range(x.shape[0]):
        theta = ((off[b] + np.arange(t)) * scale)[:, None] * inv[None, :]
        c, s = np.cos(theta), np.sin(theta)
        xb = x[b]
        if traditional:
            x1, x2 = xb[..., 0:dims:2], xb[..., 1:dims:2]
            out[b][..., 0:dims:2] = x1 * c - x2 * s
            out[b][..., 1:dims:2] = x1 * s + x2 * c
        else:
            x1, x2 = xb[..., :half], xb[..., half:dims]
            out[b][..., :half] = x1 * c - x2 * s
            out[b][..., half:dims] = x1 * s + x2 * c
    return out


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
    s = s - s.max(-1, keepdims=True)
    p = np.exp(s)
    return (p / p.sum(-1, keepdims=True)) @ v


# ---- compositions from basic kiln ops (the baseline the fast ops replace) -----------------

def comp_layer_norm(x, w, b, eps):
    mu = mx.mean(x, axis=-1, keepdims=True)
    y = (x - mu) * mx.rsqrt(mx.var(x, axis=-1, keepdims=True) + eps)
    return y * (1 if w is None else w) + (0 if b is None else b)


def comp_rms_norm(x, w, eps):
    return x * mx.rsqrt(mx.mean(x * x, axis=-1, keepdims=True) + eps) * (1 if w is None else w)


def comp_sdpa(q, k, v, scale, mask=None):
    g = q.shape[1] // k.shape[1]
    if g > 1:
        k, v = mx.repeat(k, g, axis=1), mx.repeat(v, g, axis=1)
    s = (q * scale) @ mx.swapaxes(k, -1, -2)
    if isinstance(mask, str):
        lq, lk = q.shape[2], k.shape[2]
        mask = mx.arange(lk)[None, :] <= mx.arange(lq)[:, None] + (lk - lq)
    if mask is not None and mask.dtype == mx.bool_:
        s = mx.where(mask, s, mx.finfo(s.dtype).min)
    elif mask is not None:
        s = s + mask
    return mx.softmax(s, axis=-1, precise=True) @ v


# ---- norms --------------------------------------------------------------------------------

NORM_SHAPES = [(5,), (3, 7), (2, 3, 33), (4, 1), (2, 0)]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("shape", NORM_SHAPES)
@pytest.mark.parametrize("affine", [(True, True), (True, False), (False, True), (False, False)])
def test_layer_norm(dtype, shape, affine, device):
    x = rand(*shape, dtype=dtype)
    w = rand(shape[-1], dtype=dtype) if affine[0] else None
    b = rand(shape[-1], dtype=dtype) if affine[1] else None
    y = mx.fast.layer_norm(x, w, b, 1e-5)
    assert y.dtype == x.dtype and y.shape == x.shape
    ref = np_layer_norm(npy(x), None if w is None else npy(w), None if b is None else npy(b), 1e-5)
    close(y, ref, dtype, 4, device)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("shape", NORM_SHAPES)
@pytest.mark.parametrize("weighted", [True, False])
def test_rms_norm(dtype, shape, weighted, device):
    x = rand(*shape, dtype=dtype)
    w = rand(shape[-1], dtype=dtype) if weighted else None
    y = mx.fast.rms_norm(x, w, 1e-5)
    assert y.dtype == x.dtype and y.shape == x.shape
    close(y, np_rms_norm(npy(x), None if w is None else npy(w), 1e-5), dtype, 4, device)


def test_norms_on_views_and_promotion(device):
    x = rand(6, 8)
    for view in [x.T, x[::-1, ::2], mx.broadcast_to(x[:1], (3, 8))]:
        close(mx.fast.rms_norm(view, None, 1e-6), np_rms_norm(npy(view), None, 1e-6))
        close(mx.fast.layer_norm(view, None, None, 1e-6),
              np_layer_norm(npy(view), None, None, 1e-6))
    # float32 x with a float16 weight promotes, as MLX.
    assert mx.fast.rms_norm(x, mx.ones(8, dtype=mx.float16), 1e-5).dtype == mx.float32
    nan = mx.array([[1.0, float("nan"), 2.0], [1.0, 2.0, 3.0]])
    out = np.array(mx.fast.layer_norm(nan, None, None, 1e-5))
    assert np.isnan(out[0]).all() and np.isfinite(out[1]).all()


# The GPU kernels' row classes: warp rows (<= 256 vectors), block rows in registers,
# streamed rows (past 2048 vectors: 16-byte loads), odd lengths (scalar loads), empty.
LONG_NORM_SHAPES = [(0, 8), (9, 1024), (3, 1000), (5, 4096), (2, 8200), (2, 17000), (2, 40000),
                    (2, 70001)]  # fmt: skip
GPU_FLOATS = ["float32", "float16", "bfloat16"]


def comp_f32_layer_norm(x, w, b, eps):
    """The composition in float32 (the fused kernels' precision), rounded once."""
    xf = x.astype(mx.float32)
    mu = mx.mean(xf, axis=-1, keepdims=True)
    y = (xf - mu) * mx.rsqrt(mx.var(xf, axis=-1, keepdims=True) + eps)
    y = y * (1 if w is None else w.astype(mx.float32)) + (0 if b is None else b.astype(mx.float32))
    return y.astype(x.dtype)


def comp_f32_rms_norm(x, w, eps):
    xf = x.astype(mx.float32)
    y = xf * mx.rsqrt(mx.mean(xf * xf, axis=-1, keepdims=True) + eps)
    return (y * (1 if w is None else w.astype(mx.float32))).astype(x.dtype)


def uniform(*shape, dtype="float32", lo=-3.0, hi=3.0):
    return mx.array(RNG.uniform(lo, hi, size=shape).astype(np.float32)).astype(getattr(mx, dtype))


@pytest.mark.parametrize("dtype", GPU_FLOATS)
@pytest.mark.parametrize("shape", LONG_NORM_SHAPES, ids=str)
@pytest.mark.parametrize("affine", [(True, True), (True, False), (False, True), (False, False)])
def test_layer_norm_rows(dtype, shape, affine, device):
    x = uniform(*shape, dtype=dtype)
    d = shape[-1]
    w = uniform(d, dtype=dtype) if affine[0] else None
    b = uniform(d, dtype=dtype) if affine[1] else None
    y = mx.fast.layer_norm(x, w, b, 1e-5)
    ref = np_layer_norm(npy(x), None if w is None else npy(w), None if b is None else npy(b), 1e-5)
    close(y, ref, dtype, 4, device)
    close(y, comp_f32_layer_norm(x, w, b, 1e-5), dtype, 4, device)


@pytest.mark.parametrize("dtype", GPU_FLOATS)
@pytest.mark.parametrize("shape", LONG_NORM_SHAPES, ids=str)
@pytest.mark.parametrize("weighted", [True, False])
def test_rms_norm_rows(dtype, shape, weighted, device):
    x = uniform(*shape, dtype=dtype)
    w = uniform(shape[-1], dtype=dtype) if weighted else None
    y = mx.fast.rms_norm(x, w, 1e-6)
    close(y, np_rms_norm(npy(x), None if w is None else npy(w), 1e-6), dtype, 4, device)
    close(y, comp_f32_rms_norm(x, w, 1e-6), dtype, 4, device)


@pytest.mark.parametrize("dtype", GPU_FLOATS)
def test_norms_on_strided_and_misaligned_inputs(dtype, device):
    base = uniform(64, 40, dtype=dtype)
    w, b = uniform(64, dtype=dtype), uniform(64, dtype=dtype)
    flat = uniform(1 + 5 * 64, dtype=dtype)
    views = [
        base.T,  # transposed: copied to rows first
        base[::-1, ::2].T,  # negative and 2-steps
        flat[1:].reshape(5, 64),  # row-major at an odd offset: scalar loads
        mx.broadcast_to(base[:1, :8], (3, 8)),  # zero strides
    ]
    for x in views:
        d = x.shape[-1]
        close(mx.fast.layer_norm(x, w[:d], b[:d], 1e-5),
              np_layer_norm(npy(x), npy(w[:d]), npy(b[:d]), 1e-5), dtype, 4, device)
        close(mx.fast.rms_norm(x, w[::-1][:d], 1e-5),
              np_rms_norm(npy(x), npy(w[::-1][:d]), 1e-5), dtype, 4, device)


def test_norms_propagate_nan_and_inf(device):
    x = np.asarray(RNG.uniform(-3, 3, (4, 300)), np.float32)
    x[[0, 3], 7] = np.nan
    x = np.concatenate([x, np.full((1, 300), np.inf, np.float32)])
    with np.errstate(invalid="ignore"):
        for got, want in [
            (mx.fast.layer_norm(mx.array(x), None, None, 1e-5), np_layer_norm(x.astype(np.float64), None, None, 1e-5)),
            (mx.fast.rms_norm(mx.array(x), None, 1e-5), np_rms_norm(x.astype(np.float64), None, 1e-5)),
        ]:
            got = np.array(got)
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("call,exc,msg", [
    (lambda: mx.fast.layer_norm(mx.ones((2, 4), dtype=mx.int32), None, None, 1e-5),
     ValueError, "unsupported type"),
    (lambda: mx.fast.rms_norm(mx.ones((2, 4)), mx.ones((3,)), 1e-5), ValueError, "same size"),
    (lambda: mx.fast.layer_norm(mx.ones((2, 4)), mx.ones((1, 4)), None, 1e-5),
     ValueError, "1 dimension"),
    (lambda: mx.fast.rms_norm(mx.array(1.0), None, 1e-5), ValueError, "at least 1 dimension"),
])
def test_norm_errors(call, exc, msg):
    with pytest.raises(exc, match=msg):
        call()


@pytest.mark.parametrize("fast,comp", [
    (lambda x, w, b: mx.fast.layer_norm(x, w, b, 1e-5), lambda x, w, b: comp_layer_norm(x, w, b, 1e-5)),
    (lambda x, w, b: mx.fast.rms_norm(x, w, 1e-5) + b, lambda x, w, b: comp_rms_norm(x, w, 1e-5) + b),
])
def test_norm_gradients(fast, comp):
    x, w, b = rand(3, 4, 9, dtype="float64"), rand(9, dtype="float64"), rand(9, dtype="float64")
    ct = rand(3, 4, 9, dtype="float64")
    loss = lambda f: (lambda x, w, b: mx.sum(f(x, w, b) * ct))  # noqa: E731
    gf = mx.grad(loss(fast), argnums=(0, 1, 2))(x, w, b)
    gc = mx.grad(loss(comp), argnums=(0, 1, 2))(x, w, b)
    for a, c in zip(gf, gc):
        close(a, c, "float64", 1e3)
    # jvp against the composition's, and a central finite difference.
    tx, tw, tb = rand(3, 4, 9, dtype="float64"), rand(9, dtype="float64"), rand(9, dtype="float64")
    _, jf = mx.jvp(fast, [x, w, b], [tx, tw, tb])
    _, jc = mx.jvp(comp, [x, w, b], [tx, tw, tb])
    close(jf[0], jc[0], "float64", 1e3)
    h = 1e-6
    fd = (npy(fast(x + h * tx, w + h * tw, b + h * tb)) - npy(fast(x - h * tx, w - h * tw, b - h * tb))) / (2 * h)
    np.testing.assert_allclose(npy(jf[0]), fd, rtol=1e-5, atol=1e-6)


def test_norm_gradient_half(device):
    x, w = rand(4, 16, dtype="float16"), rand(16, dtype="float16")
    g = mx.grad(lambda x, w: mx.sum(mx.fast.rms_norm(x, w, 1e-5)), argnums=(0, 1))(x, w)
    assert g[0].dtype == mx.float16 and g[1].dtype == mx.float16
    ref = mx.grad(lambda x, w: mx.sum(comp_rms_norm(x, w, 1e-5)), argnums=(0, 1))(
        x.astype(mx.float32), w.astype(mx.float32))
    close(g[0], ref[0], "float16", 10, device)
    close(g[1], ref[1], "float16", 10, device)


def test_norm_vmap():
    x, w, b = rand(3, 5, 8), rand(8), rand(8)
    f = lambda x: mx.fast.layer_norm(x, w, b, 1e-5)  # noqa: E731
    out = mx.vmap(f, in_axes=1, out_axes=0)(x)
    close(out, np.stack([np_layer_norm(npy(x)[:, i], npy(w), npy(b), 1e-5) for i in range(5)]))
    # Batched weights run the composition.
    ws = rand(4, 8)
    out = mx.vmap(lambda w: mx.fast.rms_norm(x, w, 1e-5))(ws)
    close(out, np.stack([np_rms_norm(npy(x), npy(ws)[i], 1e-5) for i in range(4)]))


# ---- rope ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("traditional", [False, True])
@pytest.mark.parametrize("shape,dims", [((2, 3, 5, 8), 8), ((1, 7, 16), 8), ((2, 4, 6), 2)])
@pytest.mark.parametrize("offset", [0, 3, "array", "vector"])
def test_rope(dtype, traditional, shape, dims, offset, device):
    x = rand(*shape, dtype=dtype)
    off = {"array": mx.array(5), "vector": mx.arange(shape[0]) * 2}.get(offset, offset)
    y = mx.fast.rope(x, dims, traditional=traditional, base=10000.0, scale=0.5, offset=off)
    assert y.dtype == x.dtype and y.shape == x.shape
    ref = np_rope(npy(x), dims, traditional, 10000.0, 0.5, np.array(off))
    close(y, ref, dtype, 10, device)


def test_rope_int_offsets_across_steps(device):
    # A decode loop's offsets: the same int for several calls (kiln shares one scalar array
    # per recent value), more distinct values than it keeps, negative and large ones, on a
    # device where the scalar moves to the GPU once per array.
    x = rand(1, 4, 1, 16)
    for off in [7, 7, 8, 8, 3, 9, 10, 11, 12, 13, 14, 15, 16, 7, -2, 2**20, 7]:
        y = mx.fast.rope(x, 16, traditional=False, base=10000.0, scale=1.0, offset=off)
        close(y, np_rope(npy(x), 16, False, 10000.0, 1.0, np.array(off)), "float32", 10, device)


def test_rope_freqs_and_errors(device):
    x = rand(2, 3, 6, 8)
    freqs = mx.array(RNG.uniform(1, 100, 4).astype(np.float32))
    y = mx.fast.rope(x, 8, traditional=False, base=None, scale=1.0, offset=2, freqs=freqs)
    close(y, np_rope(npy(x), 8, False, None, 1.0, 2, npy(freqs)), "float32", 10)
    r = lambda *a, **k: mx.fast.rope(*a, **{"traditional": False, "base": 10000.0, "scale": 1.0, "offset": 0, **k})  # noqa: E731
    for call, msg in [
        (lambda: r(mx.ones((2, 4)), 4), "at least 3 dimensions"),
        (lambda: r(mx.ones((1, 2, 4)), 3), "even"),
        (lambda: r(mx.ones((1, 2, 4)), 4, freqs=mx.ones(2)), "Only one"),
        (lambda: r(mx.ones((1, 2, 4)), 4, base=None), "Neither"),
        (lambda: r(mx.ones((1, 2, 4)), 4, base=None, freqs=mx.ones(3)), "freqs must be"),
        (lambda: r(mx.ones((3, 2, 4)), 4, offset=mx.array([1, 2])), "offset must be a scalar"),
        (lambda: r(mx.ones((3, 2, 4)), 4, offset=mx.array(1.5)), "offset must be an integer"),
        (lambda: r(mx.ones((3, 2, 4), dtype=mx.int32), 4), "floating"),
    ]:
        with pytest.raises(ValueError, match=msg):
            call()


@pytest.mark.parametrize("dtype", GPU_FLOATS)
@pytest.mark.parametrize("traditional", [False, True])
@pytest.mark.parametrize("shape,dims", [((3, 2, 9, 20), 12), ((1, 2, 300, 128), 64)], ids=str)
@pytest.mark.parametrize("offset", [0, 37, "array", "vector"])
def test_rope_long_rows_and_partial_dims(dtype, traditional, shape, dims, offset, device):
    x = uniform(*shape, dtype=dtype)
    off = {"array": mx.array(5), "vector": mx.arange(shape[0]) * 3}.get(offset, offset)
    y = mx.fast.rope(x, dims, traditional=traditional, base=10000.0, scale=0.5, offset=off)
    close(y, np_rope(npy(x), dims, traditional, 10000.0, 0.5, np.array(off)), dtype, 10, device)


@pytest.mark.parametrize("dtype", GPU_FLOATS)
def test_rope_freqs_views_and_gradient(dtype, device):
    x = uniform(2, 6, 3, 16, dtype=dtype)
    freqs = mx.array(RNG.uniform(1, 100, 6).astype(np.float32))
    view = mx.swapaxes(x, 1, 2)[:, :, ::-1]  # (2, 3, 6, 16), strided
    off = np.array([2, 9])
    fn = lambda x: mx.fast.rope(x, 12, traditional=True, base=None, scale=1.0,  # noqa: E731
                                offset=mx.array(off), freqs=freqs)
    close(fn(view), np_rope(npy(view), 12, True, None, 1.0, off, npy(freqs)), dtype, 10, device)
    # A rotation: the gradient of <rope(x), ct> is ct rotated back (scale -1 negates every
    # angle).
    ct = uniform(*view.shape, dtype=dtype)
    g = mx.grad(lambda x: mx.sum(fn(x).astype(mx.float32) * ct))(view)
    close(g, np_rope(npy(ct), 12, True, None, -1.0, off, npy(freqs)), dtype, 10, device)


@pytest.mark.parametrize("traditional", [False, True])
def test_rope_gradients_and_vmap(traditional):
    x, ct = rand(2, 3, 5, 8, dtype="float64"), rand(2, 3, 5, 8, dtype="float64")
    off = mx.array([1, 4])
    f = lambda x: mx.fast.rope(x, 6, traditional=traditional, base=100.0, scale=1.0, offset=off)  # noqa: E731
    g = mx.grad(lambda x: mx.sum(f(x) * ct))(x)
    # A rotation: the gradient is the inverse rotation of the cotangent (rotating it back
    # gives the cotangent), and <f(x), ct> = <x, g> since f is linear.
    close(f(g), ct, "float64", 10)
    assert np.allclose(np.sum(npy(f(x)) * npy(ct)), np.sum(npy(x) * npy(g)))
    _, t = mx.jvp(f, [x], [ct])
    close(t[0], f(ct), "float64")
    # vmap over a new axis 1 of an input batched elsewhere keeps per-example offsets.
    xs = rand(2, 4, 3, 5, 8)
    out = mx.vmap(lambda x: mx.fast.rope(x, 8, traditional=traditional, base=10.0, scale=1.0,
                                         offset=off), in_axes=1, out_axes=1)(xs)
    close(out, np.stack([np_rope(npy(xs)[:, i], 8, traditional, 10.0, 1.0, np.array([1, 4]))
                         for i in range(4)], axis=1), "float32", 10)


# ---- attention ----------------------------------------------------------------------------

ATTN = [  # B, Hq, Hk, Lq, Lk, D, Dv
    (1, 2, 2, 3, 5, 8, 8),
    (2, 4, 2, 7, 7, 16, 16),
    (1, 6, 1, 1, 130, 8, 4),
    (2, 3, 3, 67, 131, 5, 7),
    (1, 2, 1, 9, 4, 4, 4),
]


@pytest.mark.parametrize("dims", ATTN)
@pytest.mark.parametrize("mask", [None, "causal", "bool", "additive", "bool_bcast"])
def test_attention(dims, mask, device):
    b, hq, hk, lq, lk, d, dv = dims
    q, k, v = rand(b, hq, lq, d), rand(b, hk, lk, d), rand(b, hk, lk, dv)
    m = {"bool": mx.array(RNG.random((b, hq, lq, lk)) < 0.7),
         "additive": rand(b, 1, lq, lk),
         "bool_bcast": mx.array(RNG.random((lq, lk)) < 0.5)}.get(mask, mask)
    scale = 1 / math.sqrt(d)
    y = mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=m)
    assert y.shape == (b, hq, lq, dv)
    nm = npy(m) if isinstance(m, mx.array) and m.dtype != mx.bool_ else (np.array(m) if isinstance(m, mx.array) else m)
    close(y, np_sdpa(npy(q), npy(k), npy(v), scale, nm), "float32", 10, device)
    close(y, comp_sdpa(q, k, v, scale, m), "float32", 10, device)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_attention_dtypes(dtype, device):
    q, k, v = rand(1, 4, 9, 8, dtype=dtype), rand(1, 2, 11, 8, dtype=dtype), rand(1, 2, 11, 8, dtype=dtype)
    y = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.3, mask="causal")
    assert y.dtype == getattr(mx, dtype)
    close(y, np_sdpa(npy(q), npy(k), npy(v), 0.3, "causal"), dtype, 10, device)


def test_attention_edges_and_errors(device):
    S = mx.fast.scaled_dot_product_attention
    q, k, v = mx.ones((1, 4, 3, 8)), mx.ones((1, 2, 5, 8)), mx.ones((1, 2, 5, 6))
    assert S(q, k, v, scale=1.0).dtype == mx.float32
    assert S(q.astype(mx.int32), k, v, scale=1.0).dtype == mx.float32
    assert np.array(S(q, mx.ones((1, 2, 0, 8)), mx.ones((1, 2, 0, 6)), scale=1.0)).sum() == 0
    assert S(mx.ones((1, 4, 0, 8)), k, v, scale=1.0).shape == (1, 4, 0, 6)
    # Every key hidden: the row averages all values (MLX).
    vv = rand(1, 2, 5, 6)
    y = S(q, k, vv, scale=1.0, mask=mx.zeros((3, 5), dtype=mx.bool_))
    close(y[0, 0, 0], np.array(vv[0, 0]).mean(0))
    for call, msg in [
        (lambda: S(q, mx.ones((1, 3, 5, 8)), mx.ones((1, 3, 5, 8)), scale=1.0), "multiple"),
        (lambda: S(q[0], k[0], v[0], scale=1.0), "rank 4"),
        (lambda: S(q, k, v, scale=1.0, mask="foo"), "invalid mask"),
        (lambda: S(q, k, v, scale=1.0, mask=mx.ones((3, 6))), "broadcast"),
        (lambda: S(q, k, v, scale=1.0, mask=mx.ones((1, 1, 1, 1, 3, 5))), "at most rank 4"),
        (lambda: S(q.astype(mx.float16), k.astype(mx.float16), v.astype(mx.float16), scale=1.0,
                   mask=mx.ones((3, 5))), "promote"),
        (lambda: S(q, k[..., :7], v, scale=1.0), "last dimension"),
    ]:
        with pytest.raises(ValueError, match=msg):
            call()


@pytest.mark.parametrize("mask", [None, "causal", "bool", "additive"])
def test_attention_gradients(mask):
    b, hq, hk, lq, lk, d = 1, 4, 2, 5, 6, 3
    q, k, v = (rand(b, hq, lq, d, dtype="float64"), rand(b, hk, lk, d, dtype="float64"),
               rand(b, hk, lk, d, dtype="float64"))
    m = {"bool": mx.array(RNG.random((lq, lk)) < 0.7),
         "additive": rand(lq, lk, dtype="float64")}.get(mask, mask)
    ct = rand(b, hq, lq, d, dtype="float64")
    fast = lambda q, k, v: mx.fast.scaled_dot_product_attention(q, k, v, scale=0.7, mask=m)  # noqa: E731
    comp = lambda q, k, v: comp_sdpa(q, k, v, 0.7, m)  # noqa: E731
    gf = mx.grad(lambda *a: mx.sum(fast(*a) * ct), argnums=(0, 1, 2))(q, k, v)
    gc = mx.grad(lambda *a: mx.sum(comp(*a) * ct), argnums=(0, 1, 2))(q, k, v)
    for a, c in zip(gf, gc):
        close(a, c, "float64", 1e3)
    t = [rand(*x.shape, dtype="float64") for x in (q, k, v)]
    _, jf = mx.jvp(fast, [q, k, v], t)
    _, jc = mx.jvp(comp, [q, k, v], t)
    close(jf[0], jc[0], "float64", 1e3)


def test_attention_vmap(device):
    q, k, v = rand(3, 1, 4, 5, 8), rand(1, 2, 6, 8), rand(1, 2, 6, 8)
    f = lambda q: mx.fast.scaled_dot_product_attention(q, k, v, scale=0.5, mask="causal")  # noqa: E731
    out = mx.vmap(f)(q)
    close(out, np.stack([np_sdpa(npy(q)[i], npy(k), npy(v), 0.5, "causal") for i in range(3)]),
          "float32", 10)
    ms = mx.array(RNG.random((3, 5, 6)) < 0.6)
    g = lambda m: mx.fast.scaled_dot_product_attention(q[0], k, v, scale=0.5, mask=m)  # noqa: E731
    out = mx.vmap(g)(ms)
    close(out, np.stack([np_sdpa(npy(q)[0], npy(k), npy(v), 0.5, np.array(ms[i]))
                         for i in range(3)]), "float32", 10)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gradients_of_norms_and_attention(dtype, device):
    from test_attention_fused_vjp import np_sdpa_vjp
    from test_fast_norm_vjp import np_norm_vjp

    x, w, b = uniform(6, 96, dtype=dtype), uniform(96, dtype=dtype), uniform(96, dtype=dtype)
    ct = uniform(6, 96)
    for rms in (False, True):
        fn = (lambda x, w, b: mx.fast.rms_norm(x, w, 1e-5) + b) if rms else \
            (lambda x, w, b: mx.fast.layer_norm(x, w, b, 1e-5))
        loss = lambda x, w, b: mx.sum(fn(x, w, b).astype(mx.float32) * ct)  # noqa: E731
        got = mx.grad(loss, argnums=(0, 1, 2))(x, w, b)
        want = np_norm_vjp(npy(x), npy(w), npy(ct), 1e-5, rms)
        for g, r, scale in zip(got, want, (5, 20, 20)):  # dw, db: sums over 6 rows
            close(g, r, dtype, scale, device)
    q, k, v = (uniform(*s, dtype=dtype, lo=-1, hi=1) for s in ((1, 4, 40, 64), (1, 2, 50, 64),
                                                              (1, 2, 50, 64)))
    cq = uniform(1, 4, 40, 64)
    for mask in (None, "causal"):
        loss = lambda q, k, v: mx.sum(mx.fast.scaled_dot_product_attention(  # noqa: E731
            q, k, v, scale=0.125, mask=mask).astype(mx.float32) * cq)
        got = mx.grad(loss, argnums=(0, 1, 2))(q, k, v)
        want = np_sdpa_vjp(npy(q), npy(k), npy(v), npy(cq), 0.125, mask)
        atol = {"float32": 1e-4, "bfloat16": 4e-2}[dtype] * 5 * (2 if device == mx.gpu else 1)
        for g, r in zip(got, want):
            np.testing.assert_allclose(npy(g), r, rtol=atol, atol=atol)


def test_fast_ops_inside_compile_in_bfloat16(device):
    x, w, b = uniform(4, 256, dtype="bfloat16"), uniform(256, dtype="bfloat16"), uniform(256, dtype="bfloat16")
    q, k, v = (uniform(*s, dtype="bfloat16") for s in ((1, 4, 33, 64), (1, 2, 47, 64), (1, 2, 47, 64)))

    def f(x, q):
        h = mx.fast.layer_norm(x, w, b, 1e-5) * 2 + 1
        h = mx.fast.rms_norm(h, w, 1e-5)
        r = mx.fast.rope(q, 64, traditional=False, base=1e4, scale=1.0, offset=3)
        a = mx.fast.scaled_dot_product_attention(r, k, v, scale=0.125, mask="causal")
        return mx.exp(h.astype(mx.float32)), a * 3

    for a, c in zip(f(x, q), mx.compile(f)(x, q)):
        np.testing.assert_allclose(npy(a), npy(c), rtol=5e-2, atol=5e-2)


# ---- compile ------------------------------------------------------------------------------

def test_fast_ops_inside_compile(device):
    x, w, b = rand(4, 16), rand(16), rand(16)
    q, k, v = rand(1, 2, 5, 8), rand(1, 1, 7, 8), rand(1, 1, 7, 8)

    def f(x, q):
        h = mx.fast.layer_norm(x, w, b, 1e-5) * 2 + 1
        h = mx.fast.rms_norm(h, w, 1e-5)
        a = mx.fast.scaled_dot_product_attention(
            mx.fast.rope(q, 8, traditional=False, base=1e4, scale=1.0, offset=3), k, v,
            scale=0.3, mask="causal")
        return mx.exp(h), a * 3

    eager = f(x, q)
    comp = mx.compile(f)(x, q)
    for a, c in zip(eager, comp):
        close(a, c)
    g = mx.compile(mx.grad(lambda x: mx.sum(f(x, q)[0])))(x)
    close(g, mx.grad(lambda x: mx.sum(f(x, q)[0]))(x), "float32", 10)
    shapeless = mx.compile(lambda x: mx.fast.rms_norm(x, w, 1e-5) + 1, shapeless=True)
    for n in (3, 5):
        xs = rand(n, 16)
        close(shapeless(xs), np_rms_norm(npy(xs), npy(w), 1e-5) + 1)


# ---- MLX ----------------------------------------------------------------------------------

@pytest.mark.skipif(mlx is None, reason="mlx is not installed")
def test_against_mlx():
    def both(a):
        return mx.array(a), mlx.array(a)

    x, xm = both(RNG.standard_normal((3, 5, 32)).astype(np.float32))
    w, wm = both(RNG.standard_normal(32).astype(np.float32))
    close(mx.fast.layer_norm(x, w, w, 1e-5), np.array(mlx.fast.layer_norm(xm, wm, wm, 1e-5)), scale=4)
    close(mx.fast.rms_norm(x, w, 1e-5), np.array(mlx.fast.rms_norm(xm, wm, 1e-5)), scale=4)
    for trad in (False, True):
        for off in (2, "vec"):
            o, om = (mx.array([1, 2, 3]), mlx.array([1, 2, 3])) if off == "vec" else (off, off)
            a = mx.fast.rope(x, 16, traditional=trad, base=1e4, scale=0.7, offset=o)
            b = mlx.fast.rope(xm, 16, traditional=trad, base=1e4, scale=0.7, offset=om)
            close(a, np.array(b), scale=20)
    q, qm = both(RNG.standard_normal((2, 4, 9, 16)).astype(np.float32))
    k, km = both(RNG.standard_normal((2, 2, 12, 16)).astype(np.float32))
    for mask in (None, "causal"):
        a = mx.fast.scaled_dot_product_attention(q, k, k, scale=0.25, mask=mask)
        b = mlx.fast.scaled_dot_product_attention(qm, km, km, scale=0.25, mask=mask)
        close(a, np.array(b), scale=10)


# ---- custom C kernels ---------------------------------------------------------------------

def test_c_kernel_elementwise_and_template():
    kernel = mx.fast.c_kernel(
        name="myexp", input_names=["inp"], output_names=["out"],
        source="for (int64_t i = 0; i < inp_size; i++) out[i] = (T)(SCALE * exp((double)inp[i]));")
    for dtype in (mx.float32, mx.float64):
        a = rand(4, 5).astype(dtype)
        (out,) = kernel(inputs=[a], template=[("T", dtype), ("SCALE", 2)],
                        output_shapes=[a.shape], output_dtypes=[dtype])
        assert out.dtype == dtype
        np.testing.assert_allclose(np.array(out), 2 * np.exp(np.array(a)), rtol=1e-6)


def test_c_kernel_reduction_strides_and_init():
    src = """
    for (int64_t r = 0; r < x_shape[0]; r++)
      for (int64_t c = 0; c < x_shape[1]; c++) {
        s[r] += x[r * x_strides[0] + c * x_strides[1]];
        if (x[r * x_strides[0] + c * x_strides[1]] > m[r]) m[r] = x[r * x_strides[0] + c * x_strides[1]];
      }
    """
    kernel = mx.fast.c_kernel("rowsum", ["x"], ["s", "m"], src, ensure_row_contiguous=False)
    a = rand(6, 7)
    for view in (a, a.T, a[::-1, ::2]):
        s, m = kernel(inputs=[view], output_shapes=[(view.shape[0],)] * 2,
                      output_dtypes=[mx.float32] * 2, init_value=-1000)
        np.testing.assert_allclose(np.array(s), np.array(view).sum(1) - 1000, rtol=1e-5)
        np.testing.assert_allclose(np.array(m), np.array(view).max(1))
    # Inside a graph: lazy like any op, and composable.
    (y,) = mx.fast.c_kernel("copy", ["x"], ["y"], "memcpy(y, x, x_size * sizeof(int32_t));")(
        inputs=[mx.arange(5, dtype=mx.int32) * 2], output_shapes=[(5,)], output_dtypes=[mx.int32])
    assert (y + 1).tolist() == [1, 3, 5, 7, 9]


def test_c_kernel_errors():
    kernel = mx.fast.c_kernel("bad", ["x"], ["y"], "y[0] = x[0];\n  this is not C;")
    with pytest.raises(RuntimeError, match=r"bad:2"):
        kernel(inputs=[mx.ones(3)], output_shapes=[(3,)], output_dtypes=[mx.float32])
    good = mx.fast.c_kernel("ok", ["x"], ["y"], "y[0] = x[0];")
    with pytest.raises(ValueError, match="inputs"):
        good(inputs=[], output_shapes=[(3,)], output_dtypes=[mx.float32])
    with pytest.raises(ValueError, match="identifier"):
        mx.fast.c_kernel("k", ["x-y"], ["y"], "")(inputs=[mx.ones(1)], output_shapes=[(1,)],
                                                   output_dtypes=[mx.float32])
    cuda = mx.fast.cuda_kernel("k", ["x"], ["y"], "y[0] = x[0];")  # stores the source
    if not mx.is_available(mx.gpu):
        with pytest.raises(RuntimeError, match="GPU is not available"):
            cuda(inputs=[mx.ones(1)], output_shapes=[(1,)], output_dtypes=[mx.float32],
                 grid=(1, 1, 1), threadgroup=(1, 1, 1))
    with pytest.raises(RuntimeError, match="Metal"):
        mx.fast.metal_kernel("k", ["x"], ["y"], "y[0] = x[0];")


# ---- cross_entropy ------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_cross_entropy(dtype):
    logits = rand(2, 3, 7, dtype=dtype)
    targets = mx.array(RNG.integers(0, 7, (2, 3)))
    loss = mx.fast.cross_entropy(logits, targets)
    assert loss.dtype == mx.float32 and loss.shape == (2, 3)
    x = npy(logits)
    m = x.max(-1)
    ref = m + np.log(np.exp(x - m[..., None]).sum(-1)) - np.take_along_axis(
        x, np.array(targets)[..., None], -1)[..., 0]
    tol = "float16" if dtype == "float16" else "float32"  # the loss is float32
    close(loss, ref, tol, 4)
    g = mx.grad(lambda z: mx.sum(mx.fast.cross_entropy(z, targets)))(logits.astype(mx.float32))
    p = np.exp(x - m[..., None])
    p /= p.sum(-1, keepdims=True)
    np.put_along_axis(p, np.array(targets)[..., None], np.take_along_axis(
        p, np.array(targets)[..., None], -1) - 1, -1)
    close(g, p, tol, 4)
    with pytest.raises(ValueError):
        mx.fast.cross_entropy(logits, mx.array([0, 1]))
