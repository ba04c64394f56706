"""Attention's fused backward on the GPU (FastOp::AttentionTrain + AttentionVjp: the flash
forward also returns the row logsumexp; dK/dV and dQ kernels recompute the probabilities on
tensor cores) against the CPU's composition: float16 / bfloat16, head dims 16 to 128, Lq != Lk,
lengths that are not multiples of the tiles, causal and not (rows that see no key), GQA,
inside compile (one node each) and vmap, CUDA graphs on and off, grad of grad and jvp,
reproducibility bit for bit, a short training loop; and the composition path under
KILN_CUDA_ATTENTION=simple.

Skipped (with the reason) where no GPU is available; run them on the GPU machine with
`python -m pytest tests/python/test_gpu_attention_vjp.py`."""

import math

import numpy as np
import pytest

import kiln.core as mx

pytestmark = pytest.mark.skipif(
    not mx.is_available(mx.gpu), reason="no GPU is available on this machine"
)

RNG = np.random.default_rng(8)
HALF = [mx.float16, mx.bfloat16]
# Error over the reference's largest magnitude: P and dS are rounded to the input dtype
# before their products (as flash attention does); the CPU keeps float32.
TOL = {mx.float16: 1.5e-2, mx.bfloat16: 4e-2}
# (B, Hq, Hk, Lq, Lk)
SHAPES = [
    (1, 1, 1, 1, 1),
    (2, 2, 1, 17, 17),
    (1, 4, 1, 100, 300),
    (2, 4, 2, 300, 100),
    (1, 2, 2, 64, 64),
    (1, 8, 2, 65, 129),
]


def rand(shape, dtype, lo=-1.0, hi=1.0):
    return mx.array(RNG.uniform(lo, hi, size=shape).astype(np.float32)).astype(dtype)


def npy(a):
    return np.array(a.astype(mx.float32)).astype(np.float64)


def inputs(b, hq, hk, lq, lk, d, dtype):
    q, k, v = rand((b, hq, lq, d), dtype), rand((b, hk, lk, d), dtype), rand((b, hk, lk, d), dtype)
    ct = rand((b, hq, lq, d), mx.float32)
    return q, k, v, ct


def loss_fn(scale, mask):
    def loss(q, k, v, ct):
        o = mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)
        return (o.astype(mx.float32) * ct).sum()

    return loss


def grads_on(device, loss, q, k, v, ct):
    with mx.stream(device):
        g = mx.grad(loss, argnums=(0, 1, 2))(q, k, v, ct)
        mx.eval(g)
    return g


def reference(loss, q, k, v, ct):
    """The CPU's composition in float32 on the same (rounded) inputs."""
    f = [x.astype(mx.float32) for x in (q, k, v)]
    return [npy(g) for g in grads_on(mx.cpu, loss, *f, ct)]


def check(got, want, dtype):
    for g, w in zip(got, want):
        g = npy(g) if not isinstance(g, np.ndarray) else g
        assert g.shape == w.shape
        assert np.isfinite(g).all()
        err = np.abs(g - w).max() if g.size else 0.0
        assert err <= TOL[dtype] * max(1.0, np.abs(w).max()), err


@pytest.fixture(autouse=True)
def fused_path(monkeypatch):
    monkeypatch.delenv("KILN_CUDA_ATTENTION", raising=False)
    monkeypatch.delenv("KILN_ATTENTION_FUSED_VJP", raising=False)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("d", [16, 64, 80, 128])
@pytest.mark.parametrize("mask", [None, "causal"])
@pytest.mark.parametrize("shape", SHAPES)
def test_grads_match_the_cpu_composition(dtype, d, mask, shape):
    q, k, v, ct = inputs(*shape, d, dtype)
    loss = loss_fn(1 / math.sqrt(d), mask)
    got = grads_on(mx.gpu, loss, q, k, v, ct)
    assert [g.dtype for g in got] == [dtype] * 3
    check(got, reference(loss, q, k, v, ct), dtype)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("mask", [None, "causal"])
def test_fused_equals_simple_path(dtype, mask, monkeypatch):
    q, k, v, ct = inputs(2, 4, 2, 150, 200, 128, dtype)
    loss = loss_fn(0.09, mask)
    fused = [npy(g) for g in grads_on(mx.gpu, loss, q, k, v, ct)]
    monkeypatch.setenv("KILN_CUDA_ATTENTION", "simple")
    simple = grads_on(mx.gpu, loss, q, k, v, ct)
    check(simple, fused, dtype)


def test_value_and_grad_forward_matches_inference():
    q, k, v, ct = inputs(1, 4, 2, 130, 130, 64, mx.bfloat16)
    loss = loss_fn(0.125, "causal")
    with mx.stream(mx.gpu):
        val, _ = mx.value_and_grad(loss)(q, k, v, ct)
        plain = loss(q, k, v, ct)
        mx.eval(val, plain)
    # The training forward is the inference kernel plus the logsumexp: the same output.
    assert float(val) == float(plain)


def test_reproducible_bit_for_bit():
    q, k, v, ct = inputs(2, 8, 2, 333, 333, 64, mx.bfloat16)
    loss = loss_fn(0.125, "causal")
    a = [npy(g) for g in grads_on(mx.gpu, loss, q, k, v, ct)]
    b = [npy(g) for g in grads_on(mx.gpu, loss, q, k, v, ct)]
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_strided_inputs():
    # (B, L, H, D) projections viewed as (B, H, L, D), a reversed key axis.
    b, lq, lk, hq, hk, d = 2, 70, 90, 4, 2, 64
    q = mx.swapaxes(rand((b, lq, hq, d), mx.float16), 1, 2)
    k = mx.swapaxes(rand((b, lk, hk, d), mx.float16), 1, 2)
    v = mx.swapaxes(rand((b, lk, hk, d), mx.float16), 1, 2)[:, :, ::-1]
    ct = rand((b, hq, lq, d), mx.float32)
    loss = loss_fn(0.2, "causal")
    check(grads_on(mx.gpu, loss, q, k, v, ct), reference(loss, q, k, v, ct), mx.float16)


@pytest.mark.parametrize("graphs", ["1", "0"])
def test_inside_compile_one_node_each(graphs, monkeypatch):
    monkeypatch.setenv("KILN_CUDA_GRAPHS", graphs)
    q, k, v, ct = inputs(2, 4, 2, 100, 100, 64, mx.bfloat16)
    loss = loss_fn(0.125, "causal")
    step = mx.compile(mx.grad(loss, argnums=(0, 1, 2)))
    with mx.stream(mx.gpu):
        eager = [npy(g) for g in mx.grad(loss, argnums=(0, 1, 2))(q, k, v, ct)]
        # A direct run, a capture, replays: the same bits each time.
        runs = [[npy(g) for g in step(q, k, v, ct)] for _ in range(4)]
    for run in runs[1:]:
        for x, y in zip(run, runs[0]):
            np.testing.assert_array_equal(x, y)
    check(runs[0], eager, mx.bfloat16)
    graph = "\n".join(step.explain()["entries"][0]["graph"])
    assert graph.count("scaled_dot_product_attention_vjp") == 1, graph
    cuda = [k["name"] for k in step.explain()["kernels"]["cuda"]["kernels"]]
    assert {"kiln_attn_bwd_kv", "kiln_attn_bwd_q", "kiln_attn_bwd_delta"} <= set(cuda), cuda


def test_vmap_of_grad():
    q, k, v, ct = inputs(3, 4, 2, 40, 50, 64, mx.float16)  # axis 0 is vmapped
    loss = loss_fn(0.125, "causal")

    def per(q, k, v, ct):
        return mx.grad(loss, argnums=(0, 1, 2))(q[None], k[None], v[None], ct[None])

    with mx.stream(mx.gpu):
        got = mx.vmap(per)(q, k, v, ct)
        mx.eval(got)
    want = reference(loss, q, k, v, ct)  # the batch is independent
    check([g[:, 0] for g in got], want, mx.float16)


def test_grad_of_grad_and_jvp_use_the_composition():
    q, k, v, ct = inputs(1, 2, 1, 20, 24, 16, mx.float32)
    qh, kh, vh = (x.astype(mx.bfloat16) for x in (q, k, v))
    loss = loss_fn(0.25, "causal")

    def gsum(q, k, v):
        return sum((g.astype(mx.float32) ** 2).sum() for g in mx.grad(loss, argnums=(0, 1, 2))(q, k, v, ct))

    with mx.stream(mx.gpu):
        gg = mx.grad(gsum, argnums=(0, 1, 2))(qh, kh, vh)
        mx.eval(gg)
    with mx.stream(mx.cpu):
        want = mx.grad(gsum, argnums=(0, 1, 2))(q, k, v)
        mx.eval(want)
    for g, w in zip(gg, want):
        w = npy(w)
        assert np.abs(npy(g) - w).max() <= 0.1 * max(1.0, np.abs(w).max())

    def dq(q):
        return mx.grad(loss)(q, kh, vh, ct)

    t = rand(q.shape, mx.bfloat16)
    with mx.stream(mx.gpu):
        _, (jt,) = mx.jvp(dq, [qh], [t])
        mx.eval(jt)
    with mx.stream(mx.cpu):
        _, (jw,) = mx.jvp(lambda q: mx.grad(loss)(q, k, v, ct), [q], [t.astype(mx.float32)])
    jw = npy(jw)
    assert np.abs(npy(jt) - jw).max() <= 0.1 * max(1.0, np.abs(jw).max())


def test_training_loop_follows_the_cpu():
    """A few SGD steps of one causal attention layer (B 4, T 64, 4 heads of 32) in bfloat16
    on the GPU against float32 on the CPU: the losses stay together."""
    b, t, h, d = 4, 64, 4, 32
    rng = np.random.default_rng(0)
    w0 = [rng.normal(0, 0.2, (h * d, h * d)).astype(np.float32) for _ in range(3)]
    x = rng.normal(0, 1, (b, t, h * d)).astype(np.float32)
    y = rng.normal(0, 1, (b, t, h * d)).astype(np.float32)

    def run(device, dtype):
        ws = [mx.array(w).astype(dtype) for w in w0]
        xs, ys = mx.array(x).astype(dtype), mx.array(y)

        def loss(ws):
            heads = [(xs @ w).reshape(b, t, h, d).transpose(0, 2, 1, 3) for w in ws]
            o = mx.fast.scaled_dot_product_attention(*heads, scale=d ** -0.5, mask="causal")
            o = o.transpose(0, 2, 1, 3).reshape(b, t, h * d).astype(mx.float32)
            return ((o - ys) ** 2).mean()

        losses = []
        with mx.stream(device):
            step = mx.compile(mx.value_and_grad(loss))
            for _ in range(5):
                val, gs = step(ws)
                ws = [w - (0.5 * g).astype(dtype) for w, g in zip(ws, gs)]
                mx.eval(val, ws)
                losses.append(float(val))
        return losses

    gpu, cpu = run(mx.gpu, mx.bfloat16), run(mx.cpu, mx.float32)
    assert gpu[-1] < gpu[0]
    np.testing.assert_allclose(gpu, cpu, rtol=3e-2)
