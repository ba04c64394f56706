"""The GPU's alternative kernels for mx.fast and the choices between them: attention's simple
kernel (KILN_CUDA_ATTENTION=simple) against numpy on the flash kernel's shapes and against
the flash and split-key decode kernels, long float32 attention running fused (not a
composition materialising the scores), attention's fused backward against its simple path
and inside compile (one node each, with and without CUDA graphs, its CUDA kernels listed),
and the norms' simple backward (KILN_CUDA_NORM_VJP=simple) against the default one.

What the default kernels compute is tested with the CPU tests, parametrised by device:
test_fast.py, test_fast_attention.py, test_fast_norm_vjp.py, test_attention_fused_vjp.py.

Skipped (with the reason) where no GPU is available."""

import math
import os

import numpy as np
import pytest

import kiln.core as mx
import test_fast_attention as fa
from conftest import GPU_ONLY
from test_attention_fused_vjp import check_half, half_grads, half_inputs, loss_fn, np_sdpa_vjp

pytestmark = GPU_ONLY

RNG = np.random.default_rng(8)


def npy(a):
    return np.array(a.astype(mx.float32)).astype(np.float64)


def on_gpu(fn):
    with mx.stream(mx.gpu):
        y = fn()
        mx.eval(y)
    return y


@pytest.fixture
def simple(monkeypatch):
    monkeypatch.setenv("KILN_CUDA_ATTENTION", "simple")


@pytest.fixture
def default(monkeypatch):
    monkeypatch.delenv("KILN_CUDA_ATTENTION", raising=False)
    monkeypatch.delenv("KILN_ATTENTION_FUSED_VJP", raising=False)
    monkeypatch.delenv("KILN_HOPPER_ATTN", raising=False)


# ---- attention's forward -----------------------------------------------------------------

@pytest.mark.parametrize("dtype", fa.GPU_FLOATS, ids=fa.GPU_IDS)
@pytest.mark.parametrize("dims", fa.ATTN_SHAPES, ids=str)
@pytest.mark.parametrize("mask", fa.MASKS)
def test_simple_kernel_on_the_flash_shapes(dtype, dims, mask, simple):
    with mx.stream(mx.gpu):
        fa.test_kernel_shapes(dtype, dims, mask, mx.gpu)


@pytest.mark.parametrize("dtype", fa.GPU_FLOATS, ids=fa.GPU_IDS)
def test_simple_kernel_strided_inputs_and_broadcast_masks(dtype, simple):
    with mx.stream(mx.gpu):
        fa.test_strided_inputs_and_broadcast_masks(dtype, mx.gpu)


def test_simple_kernel_edges(simple):
    with mx.stream(mx.gpu):
        fa.test_edges_of_the_kernels(mx.gpu)


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("mask", fa.MASKS)
def test_flash_kernel_equals_simple_kernel(dtype, mask, default, monkeypatch):
    q, k, v, m, _ = fa.attention_case((2, 4, 2, 150, 200, 128, 128), dtype, mask, hidden_rows=3)
    fn = lambda: mx.fast.scaled_dot_product_attention(q, k, v, scale=0.1, mask=m)  # noqa: E731
    fast = npy(on_gpu(fn))
    monkeypatch.setenv("KILN_CUDA_ATTENTION", "simple")
    fa.close(fast, npy(on_gpu(fn)), fa.ATOL[dtype])


# Several key tiles of 128 (the Hopper kernel's) and query blocks of 128, partial ones, GQA.
HOPPER_SHAPES = [  # B, Hq, Hk, Lq, Lk, D, Dv
    (1, 4, 2, 300, 700, 64, 64),
    (2, 4, 1, 257, 260, 128, 128),
    (1, 2, 2, 128, 1024, 128, 128),
    (1, 1, 1, 17, 129, 64, 64),
    (1, 2, 1, 150, 300, 96, 96),  # padded to 128 columns
    (1, 2, 2, 130, 200, 256, 256),  # 64-key tiles
    (4, 16, 8, 1100, 300, 64, 64),  # 576 query blocks: a persistent block walks several
]


HOPPER_FORMS = ["cp", "ws", "pingpong", "persistent"]


@pytest.mark.parametrize("form", HOPPER_FORMS)
@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("dims", HOPPER_SHAPES, ids=str)
@pytest.mark.parametrize("mask", fa.MASKS)
def test_hopper_kernel_equals_numpy_and_the_mma_kernel(form, dtype, dims, mask, default,
                                                       monkeypatch):
    # KILN_HOPPER_ATTN picks the wgmma kernel's form on sm_90 (off: the mma.sync flash
    # kernel); other GPUs take the mma.sync flash kernel (or the simple one) either way.
    q, k, v, m, nm = fa.attention_case(dims, dtype, mask, hidden_rows=3)
    scale = 1 / math.sqrt(dims[5])
    fn = lambda: mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=m)  # noqa: E731
    monkeypatch.setenv("KILN_HOPPER_ATTN", form)
    fast = npy(on_gpu(fn))
    fa.close(fast, fa.grouped_sdpa(npy(q), npy(k), npy(v), scale, nm), fa.ATOL[dtype])
    monkeypatch.setenv("KILN_HOPPER_ATTN", "off")
    fa.close(fast, npy(on_gpu(fn)), fa.ATOL[dtype])


@pytest.mark.parametrize("form", HOPPER_FORMS)
@pytest.mark.parametrize("d", [64, 96, 128, 256])
def test_hopper_kernel_keeps_nan_and_inf_in_their_rows(form, d, default, monkeypatch):
    # A NaN query row gives a NaN row; an infinite key poisons the rows that see it; keys a
    # causal mask hides stay hidden whatever they hold.
    monkeypatch.setenv("KILN_HOPPER_ATTN", form)
    b, h, lq, lk = 1, 2, 200, 300
    rng = np.random.default_rng(3)
    qn, kn, vn = (rng.standard_normal((b, h, n, d)).astype(np.float32) for n in (lq, lk, lk))
    qn[0, 0, 5] = np.nan
    kn[0, 1, 299] = np.inf  # only the last query (lower-right causal) sees key 299
    q, k, v = (mx.array(x).astype(mx.bfloat16) for x in (qn, kn, vn))
    y = npy(on_gpu(lambda: mx.fast.scaled_dot_product_attention(
        q, k, v, scale=0.125, mask="causal")))
    assert np.isnan(y[0, 0, 5]).all()
    assert np.isfinite(np.delete(y[0, 0], 5, axis=0)).all()
    assert np.isfinite(y[0, 1, :-1]).all() and not np.isfinite(y[0, 1, -1]).all()


# The backward's tiles: 128 keys a kv block, 64-query steps; 128 queries a q block, 64-key
# steps. Partial and full tiles, GQA, Lk > Lq (causal shift) and Lq > Lk (rows that see no
# key under the causal mask), several steps through the two-stage ring.
HOPPER_TRAIN_SHAPES = [  # B, Hq, Hk, Lq, Lk, D
    (1, 4, 4, 200, 200, 128),
    (2, 4, 2, 300, 520, 64),
    (1, 2, 1, 520, 300, 128),
    (1, 2, 2, 1024, 1024, 64),
    (1, 1, 1, 640, 640, 128),
    (2, 8, 4, 1100, 1100, 64),  # 144 query blocks: more than an H100 or H200 has SMs
]


@pytest.mark.parametrize("form", HOPPER_FORMS)
@pytest.mark.parametrize("mask", [None, "causal"])
@pytest.mark.parametrize("ramp", [3.0, 11.0, -6.0])
def test_hopper_kernel_follows_scores_that_climb_or_fall_along_the_keys(form, mask, ramp,
                                                                        default, monkeypatch):
    # Scores growing (or shrinking) along the keys by `ramp` (base 2) a 128-key tile: the
    # running max moves every tile, by a little or by a lot, or never; rows see 1 to 1000
    # keys under the causal mask.
    b, h, lq, lk, d = 1, 2, 300, 1000, 128
    rng = np.random.default_rng(9)
    kn = rng.standard_normal((b, h, lk, d)).astype(np.float32) * 0.1
    kn[..., 0] = np.arange(lk) * (ramp / 128.0) / np.log2(np.e)  # natural-log units
    qn = rng.standard_normal((b, h, lq, d)).astype(np.float32) * 0.1
    qn[..., 0] = 1.0
    vn = rng.standard_normal((b, h, lk, d)).astype(np.float32)
    q, k, v = (mx.array(x).astype(mx.bfloat16) for x in (qn, kn, vn))
    fn = lambda: mx.fast.scaled_dot_product_attention(q, k, v, scale=1.0, mask=mask)  # noqa: E731
    monkeypatch.setenv("KILN_HOPPER_ATTN", form)
    got = npy(on_gpu(fn))
    nm = None if mask is None else "causal"
    want = fa.grouped_sdpa(npy(q), npy(k), npy(v), 1.0, nm)
    fa.close(got, want, fa.ATOL[mx.bfloat16])


@pytest.mark.parametrize("form", HOPPER_FORMS)
@pytest.mark.parametrize("mask", [None, "causal"])
@pytest.mark.parametrize("dims", HOPPER_TRAIN_SHAPES, ids=str)
def test_hopper_training_forward_and_backward(form, mask, dims, default, monkeypatch):
    # The training forward (output and logsumexp) from the wgmma kernel feeds the fused
    # backward: gradients equal float64 numpy's and the mma.sync kernels'.
    b, hq, hk, lq, lk, d = dims
    q = fa.uniform((b, hq, lq, d), mx.bfloat16, -1, 1)
    k, v = (fa.uniform((b, hk, lk, d), mx.bfloat16, -1, 1) for _ in range(2))
    g = fa.uniform((b, hq, lq, d), mx.bfloat16, -1, 1)

    def grads():
        f = lambda q, k, v: mx.fast.scaled_dot_product_attention(  # noqa: E731
            q, k, v, scale=0.1, mask=mask)
        return on_gpu(lambda: mx.vjp(f, [q, k, v], [g])[1])

    monkeypatch.setenv("KILN_HOPPER_ATTN", form)
    hopper = [npy(x) for x in grads()]
    want = np_sdpa_vjp(*(npy(x).astype(np.float64) for x in (q, k, v, g)), 0.1, mask)
    check_half(hopper, want, mx.bfloat16)
    monkeypatch.setenv("KILN_HOPPER_ATTN", "off")
    for a, b in zip(hopper, [npy(x) for x in grads()]):
        fa.close(a, b, fa.ATOL[mx.bfloat16])


@pytest.mark.parametrize("dtype", fa.GPU_FLOATS, ids=fa.GPU_IDS)
@pytest.mark.parametrize("dims", fa.DECODE_SHAPES, ids=str)
@pytest.mark.parametrize("mask", fa.MASKS)
def test_decode_kernel_equals_simple_kernel(dtype, dims, mask, default, monkeypatch):
    q, k, v, m, _ = fa.attention_case(dims, dtype, mask, hidden_rows=1)
    scale = 1 / math.sqrt(dims[5])
    fn = lambda: mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=m)  # noqa: E731
    split = npy(on_gpu(fn))
    monkeypatch.setenv("KILN_CUDA_ATTENTION", "simple")
    fa.close(split, npy(on_gpu(fn)), fa.ATOL[dtype])


def test_long_float32_attention_runs_fused(default):
    # Scores of 256 MiB: the simple kernel, not a composition materialising them.
    q, k, v = (fa.uniform((1, 4, 4096, 32), mx.float32, -1, 1) for _ in range(3))
    mx.eval(q, k, v)
    fn = lambda: mx.fast.scaled_dot_product_attention(q, k, v, scale=0.3, mask="causal")  # noqa: E731
    mx.reset_peak_memory()
    g = on_gpu(fn)
    assert mx.get_peak_memory() < 64 << 20
    with mx.stream(mx.cpu):
        c = fn()
        mx.eval(c)
    fa.close(npy(g), npy(c), fa.ATOL[mx.float32])


# ---- attention's backward ----------------------------------------------------------------

@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("mask", [None, "causal"])
def test_fused_backward_equals_simple_path(dtype, mask, default, monkeypatch):
    q, k, v, ct = half_inputs(RNG, 2, 4, 2, 150, 200, 128, dtype)
    loss = loss_fn(0.09, mask)
    with mx.stream(mx.gpu):
        fused = [npy(g) for g in half_grads(loss, q, k, v, ct)]
        monkeypatch.setenv("KILN_CUDA_ATTENTION", "simple")
        simple = half_grads(loss, q, k, v, ct)
    check_half(simple, fused, dtype)
    check_half(fused, np_sdpa_vjp(npy(q), npy(k), npy(v), npy(ct), 0.09, mask), dtype)


@pytest.mark.parametrize("graphs", ["1", "0"])
def test_backward_inside_compile_one_node_each(graphs, default, monkeypatch):
    monkeypatch.setenv("KILN_CUDA_GRAPHS", graphs)
    q, k, v, ct = half_inputs(RNG, 2, 4, 2, 100, 100, 64, mx.bfloat16)
    loss = loss_fn(0.125, "causal")
    step = mx.compile(mx.grad(loss, argnums=(0, 1, 2)))
    with mx.stream(mx.gpu):
        eager = [npy(g) for g in mx.grad(loss, argnums=(0, 1, 2))(q, k, v, ct)]
        # A direct run, a capture, replays: the same bits each time.
        runs = [[npy(g) for g in step(q, k, v, ct)] for _ in range(4)]
    for run in runs[1:]:
        for x, y in zip(run, runs[0]):
            np.testing.assert_array_equal(x, y)
    check_half(runs[0], eager, mx.bfloat16)
    graph = "\n".join(step.explain()["entries"][0]["graph"])
    assert graph.count("scaled_dot_product_attention_vjp") == 1, graph
    # (the process's NVRTC builds; on sm_90 the kv and q kernels are the wgmma ones)
    cuda = {k["name"] for k in step.explain()["kernels"]["cuda"]["kernels"]}
    for name in ("kiln_attn_bwd_kv", "kiln_attn_bwd_q", "kiln_attn_bwd_delta"):
        assert name in cuda or name + "_hopper" in cuda, cuda


# ---- the norms' backward -----------------------------------------------------------------

def norm(rms, eps=1e-5):
    if rms:
        return lambda x, w, b: mx.fast.rms_norm(x, w, eps) + (0 if b is None else b)
    return lambda x, w, b: mx.fast.layer_norm(x, w, b, eps)


def norm_grads(rms, x, w, b, ct):
    args = [a for a in (x, w, b) if a is not None]
    f = norm(rms)

    def loss(*a):
        it = iter(a)
        xx = next(it)
        ww = next(it) if w is not None else None
        bb = next(it) if b is not None else None
        return mx.sum((f(xx, ww, bb) * ct).astype(mx.float32))

    with mx.stream(mx.gpu):
        out = mx.grad(loss, argnums=tuple(range(len(args))))(*args)
        out = list(out) if isinstance(out, (tuple, list)) else [out]
        mx.eval(out)
    return [npy(o) for o in out]


NORM_TOL = {mx.float32: 1e-4, mx.float16: 1e-2, mx.bfloat16: 6e-2}


def test_norm_backward_simple_path_agrees(monkeypatch):
    var = "KILN_CUDA_NORM_VJP"
    cases = [(False, (5, 1000), mx.float32), (True, (4096, 512), mx.bfloat16),
             (False, (2, 8192), mx.bfloat16), (True, (3, 7), mx.float16)]
    for rms, shape, dtype in cases:
        x, ct, w = (mx.array(RNG.standard_normal(s).astype(np.float32)).astype(dtype)
                    for s in (shape, shape, shape[-1:]))
        b = None if rms else mx.array(RNG.standard_normal(shape[-1:]).astype(np.float32)).astype(dtype)
        default = norm_grads(rms, x, w, b, ct)
        y0 = npy(on_gpu(lambda: norm(rms)(x, w, b)))
        monkeypatch.setenv(var, "simple")
        try:
            other = norm_grads(rms, x, w, b, ct)
            y1 = npy(on_gpu(lambda: norm(rms)(x, w, b)))
        finally:
            monkeypatch.delenv(var)
        tol = NORM_TOL[dtype] * 4
        np.testing.assert_allclose(y0, y1, rtol=tol, atol=tol)
        rows = x.size // shape[-1]
        for i, (a, c) in enumerate(zip(default, other)):
            t = tol if i == 0 else tol * np.sqrt(rows)
            np.testing.assert_allclose(a, c, rtol=t, atol=t)
    assert os.environ.get(var) is None

