"""The norms' fused backward on the GPU (`layer_norm_vjp`, `rms_norm_vjp`: kiln-cuda
`fast/norm_vjp.rs`) against the same on mx.cpu and numpy: no rows, one column, several
leading axes, long rows (block per row, and streamed past the registers), many rows (the
partial dweight/dbias sums over many blocks), strided and misaligned views, every GPU float
dtype, with and without weight and bias; fused forward + backward under grad (one node each
inside compile); vmap; the simple path (KILN_CUDA_NORM_VJP=simple) against the default
one; deterministic weight gradients.

Skipped (with the reason) where no GPU is available; run them on the GPU machine with
`python -m pytest tests/python/test_gpu_norm_vjp.py`."""

import os

import numpy as np
import pytest

import kiln.core as mx

pytestmark = pytest.mark.skipif(
    not mx.is_available(mx.gpu), reason="no GPU is available on this machine"
)

RNG = np.random.default_rng(17)
FLOATS = [mx.float32, mx.float16, mx.bfloat16]
TOL = {mx.float32: 1e-4, mx.float16: 1e-2, mx.bfloat16: 6e-2}
SHAPES = [(0, 8), (3, 1), (2, 3, 7), (5, 1000), (2, 8192), (4096, 512), (3, 20000)]
AFFINE = [(False, False), (True, False), (True, True)]


def rand(shape, dtype=mx.float32):
    return mx.array(RNG.standard_normal(shape).astype(np.float32)).astype(dtype)


def npy(a):
    if a.dtype in (mx.float16, mx.bfloat16):
        a = a.astype(mx.float32)
    return np.array(a).astype(np.float64)


def norm(rms, eps=1e-5):
    if rms:
        return lambda x, w, b: mx.fast.rms_norm(x, w, eps) + (0 if b is None else b)
    return lambda x, w, b: mx.fast.layer_norm(x, w, b, eps)


def grads_on(device, rms, x, w, b, ct):
    args = [a for a in (x, w, b) if a is not None]
    f = norm(rms)

    def loss(*a):
        it = iter(a)
        xx = next(it)
        ww = next(it) if w is not None else None
        bb = next(it) if b is not None else None
        return mx.sum((f(xx, ww, bb) * ct).astype(mx.float32))
    with mx.stream(device):
        out = mx.grad(loss, argnums=tuple(range(len(args))))(*args)
        out = list(out) if isinstance(out, (tuple, list)) else [out]  # one argnum: an array
        mx.eval(out)
    return [npy(o) for o in out]


def check(rms, x, w, b, ct, scale=1.0):
    gpu = grads_on(mx.gpu, rms, x, w, b, ct)
    cpu = grads_on(mx.cpu, rms, x, w, b, ct)
    tol = TOL[x.dtype] * scale
    rows = max(1, x.size // max(1, x.shape[-1]))
    for i, (a, c) in enumerate(zip(gpu, cpu)):
        # Weight and bias gradients are sums over rows: their error grows with the count.
        t = tol if i == 0 else tol * max(1.0, np.sqrt(rows))
        np.testing.assert_allclose(a, c, rtol=t, atol=t)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("affine", AFFINE)
@pytest.mark.parametrize("rms", [False, True])
def test_gpu_matches_cpu(dtype, shape, affine, rms):
    d = shape[-1]
    x, ct = rand(shape, dtype), rand(shape, dtype)
    w = rand((d,), dtype) if affine[0] else None
    b = rand((d,), dtype) if affine[1] else None
    check(rms, x, w, b, ct, 4 if d >= 1000 else 1)


@pytest.mark.parametrize("rms", [False, True])
def test_views_and_misaligned(rms):
    base = rand((64, 33))
    w = rand((64,))
    for x in (base.T, base[::-1].T, rand((1, 64 * 33 + 1))[0, 1:].reshape(33, 64)):
        ct = rand(x.shape)
        check(rms, x, w, None, ct)
    # Misaligned bf16 rows (offset by one element): the scalar path.
    x = rand((17, 257), mx.bfloat16)[:, 1:]
    check(rms, x, rand((256,), mx.bfloat16), None, rand((17, 256), mx.bfloat16))


def test_matches_numpy():
    x, ct, w = rand((6, 40)), rand((6, 40)), rand((40,))
    gx, gw = grads_on(mx.gpu, False, x, w, None, ct)
    xn, cn, wn = npy(x), npy(ct), npy(w)
    c = xn - xn.mean(-1, keepdims=True)
    r = 1 / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5)
    xh, gwn = c * r, cn * wn
    dx = r * (gwn - gwn.mean(-1, keepdims=True) - xh * (gwn * xh).mean(-1, keepdims=True))
    np.testing.assert_allclose(gx, dx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gw, (cn * xh).sum(0), rtol=1e-4, atol=1e-4)


def test_weight_gradients_are_deterministic():
    x, ct, w, b = rand((4096, 512)), rand((4096, 512)), rand((512,)), rand((512,))
    first = grads_on(mx.gpu, False, x, w, b, ct)
    for _ in range(2):
        again = grads_on(mx.gpu, False, x, w, b, ct)
        for a, c in zip(first, again):
            assert np.array_equal(a, c)


@pytest.mark.parametrize("rms", [False, True])
def test_inside_compile_one_node_each(rms):
    x, w, b, ct = rand((64, 256)), rand((256,)), rand((256,)), rand((64, 256))
    f = norm(rms)
    g = mx.grad(lambda x, w, b: mx.sum(f(x, w, b) * ct), argnums=(0, 1, 2))
    c = mx.compile(g)
    for a, e in zip(c(x, w, b), g(x, w, b)):
        np.testing.assert_allclose(npy(a), npy(e), rtol=1e-5, atol=1e-5)
    ops = [line.split(" = ")[1].split("(")[0] for e in c.explain()["entries"]
           for line in e["graph"] if " = " in line]
    name = "rms_norm_vjp" if rms else "layer_norm_vjp"
    assert ops.count(name) == 1, ops
    # The forward under grad is the fused one too (value_and_grad keeps it).
    vg = mx.compile(mx.value_and_grad(lambda x, w, b: mx.sum(f(x, w, b) * ct), argnums=(0,)))
    vg(x, w, b)
    ops = [line.split(" = ")[1].split("(")[0] for e in vg.explain()["entries"]
           for line in e["graph"] if " = " in line]
    assert ops.count("rms_norm" if rms else "layer_norm") == 1, ops


@pytest.mark.parametrize("rms", [False, True])
def test_vmap_matches_cpu(rms):
    xs, cts, w = rand((3, 4, 128)), rand((3, 4, 128)), rand((128,))

    def per_example(x, ct):
        return mx.grad(lambda x, w: mx.sum(norm(rms)(x, w, None) * ct), argnums=(0, 1))(x, w)
    out = {}
    for dev in (mx.gpu, mx.cpu):
        with mx.stream(dev):
            out[dev] = [npy(o) for o in mx.vmap(per_example)(xs, cts)]
    for a, c in zip(out[mx.gpu], out[mx.cpu]):
        np.testing.assert_allclose(a, c, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("var,value", [("KILN_CUDA_NORM_VJP", "simple")])
def test_alternative_paths_agree(monkeypatch, var, value):
    cases = [(False, (5, 1000), mx.float32), (True, (4096, 512), mx.bfloat16),
             (False, (2, 8192), mx.bfloat16), (True, (3, 7), mx.float16)]
    for rms, shape, dtype in cases:
        x, ct, w = rand(shape, dtype), rand(shape, dtype), rand(shape[-1:], dtype)
        b = None if rms else rand(shape[-1:], dtype)
        default = grads_on(mx.gpu, rms, x, w, b, ct)
        with mx.stream(mx.gpu):
            y0 = npy(norm(rms)(x, w, b))
        monkeypatch.setenv(var, value)
        try:
            other = grads_on(mx.gpu, rms, x, w, b, ct)
            with mx.stream(mx.gpu):
                y1 = npy(norm(rms)(x, w, b))
        finally:
            monkeypatch.delenv(var)
        tol = TOL[dtype] * 4
        np.testing.assert_allclose(y0, y1, rtol=tol, atol=tol)
        rows = x.size // shape[-1]
        for i, (a, c) in enumerate(zip(default, other)):
            t = tol if i == 0 else tol * np.sqrt(rows)
            np.testing.assert_allclose(a, c, rtol=t, atol=t)
    assert os.environ.get(var) is None
