"""Attention's training primitives (AttentionTrain: o and the row logsumexp; AttentionVjp:
the fused backward) on the CPU, through the testing switch KILN_ATTENTION_FUSED_VJP=1 that
records them wherever attention is differentiated (the GPU records them on its own for half
floats): gradients against the composition's (the switch off), causal rows that see no key,
GQA, Lq != Lk, inside compile (one node each, shapeless too), vmap, grad of grad and jvp.

Then half-float gradients on every device (the GPU's fused backward: flash forward with the
row logsumexp, dK/dV and dQ kernels on tensor cores) against a float64 numpy backward: head
dims 16 to 128, lengths off the tiles, causal rows that see no key, GQA, strided inputs,
vmap, grad of grad and jvp, bit-for-bit reproducibility and a short training loop. The GPU's
own paths (the simple kernels, CUDA graphs) are in test_cuda_fast_paths.py."""

import math

import numpy as np
import pytest

import kiln.core as mx

RNG = np.random.default_rng(5)
# float64 too is checked at float32 precision: the loss sums in float32.
TOL = {mx.float32: 1e-5, mx.float64: 1e-6, mx.float16: 1e-2, mx.bfloat16: 5e-2}


def rand(shape, dtype=mx.float32):
    return mx.array(RNG.uniform(-1, 1, size=shape)).astype(dtype)


def npy(a):
    return np.array(a.astype(mx.float64) if a.dtype != mx.float64 else a)


def loss_fn(scale, mask):
    def loss(q, k, v, ct):
        o = mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)
        return (o.astype(mx.float32) * ct).sum()

    return loss


def grads(loss, *args, fused, monkeypatch, argnums=(0, 1, 2)):
    if fused:
        monkeypatch.setenv("KILN_ATTENTION_FUSED_VJP", "1")
    else:
        monkeypatch.delenv("KILN_ATTENTION_FUSED_VJP", raising=False)
    with mx.stream(mx.cpu):
        g = mx.grad(loss, argnums=argnums)(*args)
        mx.eval(g)
    monkeypatch.delenv("KILN_ATTENTION_FUSED_VJP", raising=False)
    return [npy(x) for x in g]


def close(a, b, tol):
    for x, y in zip(a, b):
        assert x.shape == y.shape
        scale = max(1.0, np.abs(y).max()) if y.size else 1.0
        np.testing.assert_allclose(x, y, rtol=tol, atol=tol * scale)


# (B, Hq, Hk, Lq, Lk, D)
SHAPES = [
    (1, 1, 1, 1, 1, 8),
    (2, 2, 1, 17, 17, 16),
    (1, 4, 2, 9, 30, 8),
    (2, 4, 4, 30, 9, 16),  # causal: rows 0..20 see no key
    (1, 2, 1, 5, 0, 8),  # no keys
    (1, 2, 1, 0, 5, 8),  # no queries
]


@pytest.mark.parametrize("dtype", [mx.float32, mx.float64, mx.float16, mx.bfloat16])
@pytest.mark.parametrize("mask", [None, "causal"])
@pytest.mark.parametrize("shape", SHAPES)
def test_fused_grads_match_the_composition(dtype, mask, shape, monkeypatch):
    b, hq, hk, lq, lk, d = shape
    q, k, v = rand((b, hq, lq, d), dtype), rand((b, hk, lk, d), dtype), rand((b, hk, lk, d), dtype)
    ct = rand((b, hq, lq, d))
    loss = loss_fn(d ** -0.5, mask)
    fused = grads(loss, q, k, v, ct, fused=True, monkeypatch=monkeypatch)
    plain = grads(loss, q, k, v, ct, fused=False, monkeypatch=monkeypatch)
    close(fused, plain, TOL[dtype])


def test_value_matches_and_mask_arrays_keep_the_composition(monkeypatch):
    q, k, v, ct = rand((1, 2, 6, 8)), rand((1, 2, 7, 8)), rand((1, 2, 7, 8)), rand((1, 2, 6, 8))
    monkeypatch.setenv("KILN_ATTENTION_FUSED_VJP", "1")
    loss = loss_fn(0.3, "causal")
    val, _ = mx.value_and_grad(loss)(q, k, v, ct)
    np.testing.assert_allclose(float(val), float(loss(q, k, v, ct)), rtol=1e-6)
    # A boolean mask: the fused primitives take none; the composition's gradient.
    m = mx.array(RNG.random((6, 7)) < 0.7)
    lm = loss_fn(0.3, m)
    fused = [npy(g) for g in mx.grad(lm, argnums=(0, 1, 2))(q, k, v, ct)]
    monkeypatch.delenv("KILN_ATTENTION_FUSED_VJP")
    plain = [npy(g) for g in mx.grad(lm, argnums=(0, 1, 2))(q, k, v, ct)]
    close(fused, plain, 1e-6)


@pytest.mark.parametrize("shapeless", [False, True])
def test_compile_keeps_single_nodes(shapeless, monkeypatch):
    monkeypatch.setenv("KILN_ATTENTION_FUSED_VJP", "1")
    loss = loss_fn(0.25, "causal")
    step = mx.compile(mx.grad(loss, argnums=(0, 1, 2)), shapeless=shapeless)
    for lq in (10, 13):
        q, k, v = rand((2, 4, lq, 8)), rand((2, 2, 12, 8)), rand((2, 2, 12, 8))
        ct = rand((2, 4, lq, 8))
        got = [npy(g) for g in step(q, k, v, ct)]
        want = grads(loss, q, k, v, ct, fused=False, monkeypatch=monkeypatch)
        monkeypatch.setenv("KILN_ATTENTION_FUSED_VJP", "1")
        close(got, want, 1e-5)
    graph = "\n".join(step.explain()["entries"][-1]["graph"])
    assert graph.count("scaled_dot_product_attention_vjp") == 1, graph


def test_vmap_of_grad(monkeypatch):
    q, k, v, ct = rand((3, 4, 10, 8)), rand((3, 2, 11, 8)), rand((3, 2, 11, 8)), rand((3, 4, 10, 8))
    loss = loss_fn(0.3, "causal")

    def per(q, k, v, ct):
        return mx.grad(loss, argnums=(0, 1, 2))(q[None], k[None], v[None], ct[None])

    monkeypatch.setenv("KILN_ATTENTION_FUSED_VJP", "1")
    got = [npy(g[:, 0]) for g in mx.vmap(per)(q, k, v, ct)]
    # Mapped over k only (q, v, ct shared): the batch axis folds into B all the same.
    got_k = [npy(g[:, 0]) for g in mx.vmap(per, in_axes=(None, 0, None, None))(q[0], k, v[0], ct[0])]
    want = grads(loss, q, k, v, ct, fused=False, monkeypatch=monkeypatch)
    close(got, want, 1e-5)
    for i in range(3):
        w = grads(loss, q[:1], k[i : i + 1], v[:1], ct[:1], fused=False, monkeypatch=monkeypatch)
        close([g[i] for g in got_k], [x[0] for x in w], 1e-5)


def test_grad_of_grad_and_jvp(monkeypatch):
    q, k, v, ct = rand((1, 2, 5, 4)), rand((1, 1, 6, 4)), rand((1, 1, 6, 4)), rand((1, 2, 5, 4))
    loss = loss_fn(0.5, "causal")

    def gsum(q, k, v):
        return sum((g ** 2).sum() for g in mx.grad(loss, argnums=(0, 1, 2))(q, k, v, ct))

    def dq(q):
        return mx.grad(loss)(q, k, v, ct)

    t = rand(q.shape)
    out = {}
    for fused in (True, False):
        if fused:
            monkeypatch.setenv("KILN_ATTENTION_FUSED_VJP", "1")
        else:
            monkeypatch.delenv("KILN_ATTENTION_FUSED_VJP")
        gg = [npy(g) for g in mx.grad(gsum, argnums=(0, 1, 2))(q, k, v)]
        _, (jt,) = mx.jvp(dq, [q], [t])
        out[fused] = gg + [npy(jt)]
    close(out[True], out[False], 1e-5)
    # Grad of grad against finite differences of the first gradient.
    eps = 1e-3
    e = np.zeros(q.shape, np.float32)
    e[0, 1, 4, 2] = eps
    qp, qm = q + mx.array(e), q - mx.array(e)
    fd = (float(gsum(qp, k, v)) - float(gsum(qm, k, v))) / (2 * eps)
    np.testing.assert_allclose(out[True][0][0, 1, 4, 2], fd, rtol=2e-2, atol=2e-3)


def test_forward_jvp_through_the_training_forward(monkeypatch):
    # jvp of a function that also takes a grad: the tangent of o through AttentionTrain.
    q, k, v, ct = rand((1, 2, 5, 4)), rand((1, 1, 6, 4)), rand((1, 1, 6, 4)), rand((1, 2, 5, 4))

    def f(q):
        def inner(q):
            return (mx.fast.scaled_dot_product_attention(q, k, v, scale=0.5, mask="causal") * ct).sum()

        val, g = mx.value_and_grad(inner)(q)
        return val + (g * g).sum()

    t = rand(q.shape)
    res = {}
    for fused in (True, False):
        if fused:
            monkeypatch.setenv("KILN_ATTENTION_FUSED_VJP", "1")
        else:
            monkeypatch.delenv("KILN_ATTENTION_FUSED_VJP")
        _, (jt,) = mx.jvp(f, [q], [t])
        res[fused] = float(jt)
    np.testing.assert_allclose(res[True], res[False], rtol=1e-5)


# ---- half-float gradients on every device, against float64 numpy ---------------------------


def np_sdpa_vjp(q, k, v, ct, scale, mask=None):
    """dq, dk, dv of sum(sdpa(q, k, v) * ct) in float64, with kiln's semantics: a hidden
    score is the float minimum (a row that sees no key averages every value) and passes no
    gradient back."""
    g = q.shape[1] // k.shape[1]
    kk, vv = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    s = scale * q @ np.swapaxes(kk, -1, -2)
    lq, lk = q.shape[2], k.shape[2]
    seen = None
    if mask == "causal":
        seen = np.arange(lk)[None, :] <= np.arange(lq)[:, None] + (lk - lq)
        s = np.where(seen, s, np.finfo(np.float64).min)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dv = np.swapaxes(p, -1, -2) @ ct
    dp = ct @ np.swapaxes(vv, -1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    if seen is not None:
        ds = np.where(seen, ds, 0.0)
    dq = scale * ds @ kk
    dk = scale * np.swapaxes(ds, -1, -2) @ q
    b, hk = k.shape[:2]
    return (dq, dk.reshape(b, hk, g, lk, -1).sum(2), dv.reshape(b, hk, g, lk, -1).sum(2))


def f64(a):
    return np.array(a.astype(mx.float32)).astype(np.float64)


HALF = [mx.float16, mx.bfloat16]
# Error over the reference's largest magnitude: the GPU rounds P and dS to the input dtype
# before their products (as flash attention does).
HALF_TOL = {mx.float16: 1.5e-2, mx.bfloat16: 4e-2}
# (B, Hq, Hk, Lq, Lk)
HALF_SHAPES = [
    (1, 1, 1, 1, 1),
    (2, 2, 1, 17, 17),
    (1, 4, 1, 100, 300),
    (2, 4, 2, 300, 100),  # causal: rows 0..199 see no key
    (1, 2, 2, 64, 64),
    (1, 8, 2, 65, 129),
]


def uniform(rng, shape, dtype):
    return mx.array(rng.uniform(-1, 1, size=shape).astype(np.float32)).astype(dtype)


def half_inputs(rng, b, hq, hk, lq, lk, d, dtype):
    q, k, v = (uniform(rng, s, dtype) for s in ((b, hq, lq, d), (b, hk, lk, d), (b, hk, lk, d)))
    return q, k, v, uniform(rng, (b, hq, lq, d), mx.float32)


def check_half(got, want, dtype):
    for g, w in zip(got, want):
        g = f64(g) if not isinstance(g, np.ndarray) else g
        assert g.shape == w.shape
        assert np.isfinite(g).all()
        err = np.abs(g - w).max() if g.size else 0.0
        assert err <= HALF_TOL[dtype] * max(1.0, np.abs(w).max()), err


def half_grads(loss, q, k, v, ct):
    g = mx.grad(loss, argnums=(0, 1, 2))(q, k, v, ct)
    mx.eval(g)
    return g


@pytest.fixture
def default_paths(monkeypatch):
    monkeypatch.delenv("KILN_CUDA_ATTENTION", raising=False)
    monkeypatch.delenv("KILN_ATTENTION_FUSED_VJP", raising=False)


@pytest.mark.parametrize("dtype", HALF, ids=["float16", "bfloat16"])
@pytest.mark.parametrize("d", [16, 64, 80, 128])
@pytest.mark.parametrize("mask", [None, "causal"])
@pytest.mark.parametrize("shape", HALF_SHAPES, ids=str)
def test_half_grads_match_float64(dtype, d, mask, shape, rng, device, default_paths):
    q, k, v, ct = half_inputs(rng, *shape, d, dtype)
    scale = 1 / math.sqrt(d)
    got = half_grads(loss_fn(scale, mask), q, k, v, ct)
    assert [g.dtype for g in got] == [dtype] * 3
    check_half(got, np_sdpa_vjp(f64(q), f64(k), f64(v), f64(ct), scale, mask), dtype)


def test_value_and_grad_forward_matches_inference(rng, device, default_paths):
    q, k, v, ct = half_inputs(rng, 1, 4, 2, 130, 130, 64, mx.bfloat16)
    loss = loss_fn(0.125, "causal")
    val, _ = mx.value_and_grad(loss)(q, k, v, ct)
    plain = loss(q, k, v, ct)
    # The training forward is the inference kernel plus the logsumexp: the same output.
    assert float(val) == float(plain)


def test_half_grads_reproducible_bit_for_bit(rng, device, default_paths):
    q, k, v, ct = half_inputs(rng, 2, 8, 2, 333, 333, 64, mx.bfloat16)
    loss = loss_fn(0.125, "causal")
    a = [f64(g) for g in half_grads(loss, q, k, v, ct)]
    b = [f64(g) for g in half_grads(loss, q, k, v, ct)]
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_half_grads_of_strided_inputs(rng, device, default_paths):
    # (B, L, H, D) projections viewed as (B, H, L, D), a reversed key axis.
    b, lq, lk, hq, hk, d = 2, 70, 90, 4, 2, 64
    q = mx.swapaxes(uniform(rng, (b, lq, hq, d), mx.float16), 1, 2)
    k = mx.swapaxes(uniform(rng, (b, lk, hk, d), mx.float16), 1, 2)
    v = mx.swapaxes(uniform(rng, (b, lk, hk, d), mx.float16), 1, 2)[:, :, ::-1]
    ct = uniform(rng, (b, hq, lq, d), mx.float32)
    got = half_grads(loss_fn(0.2, "causal"), q, k, v, ct)
    check_half(got, np_sdpa_vjp(f64(q), f64(k), f64(v), f64(ct), 0.2, "causal"), mx.float16)


def test_half_vmap_of_grad(rng, device, default_paths):
    q, k, v, ct = half_inputs(rng, 3, 4, 2, 40, 50, 64, mx.float16)  # axis 0 is vmapped
    loss = loss_fn(0.125, "causal")

    def per(q, k, v, ct):
        return mx.grad(loss, argnums=(0, 1, 2))(q[None], k[None], v[None], ct[None])

    got = mx.vmap(per)(q, k, v, ct)
    want = np_sdpa_vjp(f64(q), f64(k), f64(v), f64(ct), 0.125, "causal")  # independent rows
    check_half([g[:, 0] for g in got], want, mx.float16)


def test_half_grad_of_grad_and_jvp(rng, device, default_paths):
    """Second order goes through the composition; against it in float64 on the CPU."""
    q, k, v, ct = half_inputs(rng, 1, 2, 1, 20, 24, 16, mx.float32)
    qh, kh, vh = (x.astype(mx.bfloat16) for x in (q, k, v))
    loss = loss_fn(0.25, "causal")

    def gsum(q, k, v, ct):
        return sum((g.astype(mx.float32) ** 2).sum() for g in mx.grad(loss, argnums=(0, 1, 2))(q, k, v, ct))

    def dq(q, k, v, ct):
        return mx.grad(loss)(q, k, v, ct)

    t = uniform(rng, q.shape, mx.bfloat16)
    gg = mx.grad(gsum, argnums=(0, 1, 2))(qh, kh, vh, ct)
    _, (jt,) = mx.jvp(lambda q: dq(q, kh, vh, ct), [qh], [t])
    mx.eval(gg, jt)
    with mx.stream(mx.cpu):
        q64, k64, v64, c64, t64 = (x.astype(mx.float64) for x in (qh, kh, vh, ct, t))
        want = mx.grad(gsum, argnums=(0, 1, 2))(q64, k64, v64, c64)
        _, (jw,) = mx.jvp(lambda q: dq(q, k64, v64, c64), [q64], [t64])
        want, jw = [np.array(w) for w in want], np.array(jw)
    for g, w in zip(gg, want):
        assert np.abs(f64(g) - w).max() <= 0.1 * max(1.0, np.abs(w).max())
    assert np.abs(f64(jt) - jw).max() <= 0.1 * max(1.0, np.abs(jw).max())


def test_half_training_loop_follows_float64(device, default_paths):
    """A few SGD steps of one causal attention layer (B 4, T 64, 4 heads of 32) in bfloat16
    against float64 on the CPU: the losses stay together."""
    b, t, h, d = 4, 64, 4, 32
    rng = np.random.default_rng(0)
    w0 = [rng.normal(0, 0.2, (h * d, h * d)).astype(np.float32) for _ in range(3)]
    x = rng.normal(0, 1, (b, t, h * d)).astype(np.float32)
    y = rng.normal(0, 1, (b, t, h * d)).astype(np.float32)

    def run(dtype):
        ws = [mx.array(w).astype(dtype) for w in w0]
        xs, ys = mx.array(x).astype(dtype), mx.array(y)
        acc = mx.float64 if dtype == mx.float64 else mx.float32

        def loss(ws):
            heads = [(xs @ w).reshape(b, t, h, d).transpose(0, 2, 1, 3) for w in ws]
            o = mx.fast.scaled_dot_product_attention(*heads, scale=d ** -0.5, mask="causal")
            o = o.transpose(0, 2, 1, 3).reshape(b, t, h * d).astype(acc)
            return ((o - ys.astype(acc)) ** 2).mean()

        step = mx.compile(mx.value_and_grad(loss))
        losses = []
        for _ in range(5):
            val, gs = step(ws)
            ws = [w - (0.5 * g).astype(dtype) for w, g in zip(ws, gs)]
            mx.eval(val, ws)
            losses.append(float(val))
        return losses

    half = run(mx.bfloat16)
    with mx.stream(mx.cpu):
        want = run(mx.float64)
    assert half[-1] < half[0]
    np.testing.assert_allclose(half, want, rtol=3e-2)
