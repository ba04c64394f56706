"""Attention's training primitives (AttentionTrain: o and the row logsumexp; AttentionVjp:
the fused backward) on the CPU, through the testing switch KILN_ATTENTION_FUSED_VJP=1 that
records them wherever attention is differentiated (the GPU records them on its own for half
floats): gradients against the composition's (the switch off), causal rows that see no key,
GQA, Lq != Lk, inside compile (one node each, shapeless too), vmap, grad of grad and jvp.
The GPU kernels' own tests are in test_gpu_attention_vjp.py."""

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
