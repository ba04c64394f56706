"""The fused backward of mx.fast.layer_norm and mx.fast.rms_norm (`layer_norm_vjp`,
`rms_norm_vjp` primitives) on every device: against a numpy float64 reference and the
composition of basic ops, against finite differences, over shapes with no rows, one
column, several leading axes and long rows (on the GPU: a block per row, and streamed past
the registers), many rows (the partial dweight / dbias sums over many blocks), strided and
misaligned views, every float dtype, with and without weight and bias; inside compile (one
node each, shapeless too; the forward under grad fused too) and vmap; deterministic weight
gradients; grad of grad against finite differences in float64. The GPU's simple path
(KILN_CUDA_NORM_VJP=simple) is in test_cuda_fast_paths.py."""

import kiln.core as mx
import numpy as np
import pytest

RNG = np.random.default_rng(5)
TOL = {"float32": 1e-4, "float64": 1e-10, "float16": 2e-2, "bfloat16": 8e-2}
SHAPES = [(0, 6), (3, 1), (2, 3, 7), (5, 1000)]
AFFINE = [(False, False), (True, False), (True, True), (False, True)]

pytestmark = pytest.mark.filterwarnings("ignore:Mean of empty slice",
                                        "ignore:invalid value encountered")


def rand(*shape, dtype="float32"):
    return mx.array(RNG.standard_normal(shape).astype(np.float32)).astype(getattr(mx, dtype))


def npy(a):
    return np.array(a.astype(mx.float32) if a.dtype in (mx.bfloat16, mx.float16) else a).astype(
        np.float64)


def close(a, b, tol):
    a = npy(a) if isinstance(a, mx.array) else a
    b = npy(b) if isinstance(b, mx.array) else b
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def np_norm_vjp(x, w, g, eps, rms):
    """dx, dw, db of either norm in float64."""
    d = x.shape[-1]
    mean = 0.0 if rms else x.mean(-1, keepdims=True)
    c = x - mean
    r = 1.0 / np.sqrt((c * c).mean(-1, keepdims=True) + eps)
    xhat = c * r
    gw = g * (w if w is not None else 1.0)
    dx = r * (gw - xhat * (gw * xhat).mean(-1, keepdims=True)
              - (0.0 if rms else gw.mean(-1, keepdims=True)))
    lead = tuple(range(x.ndim - 1))
    return dx, (g * xhat).sum(lead).reshape(d), g.sum(lead).reshape(d)


def norm_fn(rms, w, b, eps=1e-5):
    if rms:
        return lambda x, w_, b_: mx.fast.rms_norm(x, w_, eps) + (0 if b_ is None else b_)
    return lambda x, w_, b_: mx.fast.layer_norm(x, w_, b_, eps)


def comp_fn(rms, eps=1e-5):
    """The norm written with basic ops (float32 compute for half floats)."""
    def f(x, w, b):
        dt = x.dtype
        xf = x.astype(mx.float32) if dt in (mx.float16, mx.bfloat16) else x
        c = xf if rms else xf - mx.mean(xf, axis=-1, keepdims=True)
        y = c * mx.rsqrt(mx.mean(c * c, axis=-1, keepdims=True) + eps)
        if w is not None:
            y = y * w
        if b is not None:
            y = y + b
        return y.astype(dt)
    return f


def grads(f, x, w, b, ct):
    args = [a for a in (x, w, b) if a is not None]

    def loss(*a):
        it = iter(a)
        xx = next(it)
        ww = next(it) if w is not None else None
        bb = next(it) if b is not None else None
        return mx.sum((f(xx, ww, bb) * ct).astype(mx.float32))
    out = mx.grad(loss, argnums=tuple(range(len(args))))(*args)
    return list(out) if isinstance(out, (tuple, list)) else [out]  # one argnum: an array


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("affine", AFFINE)
@pytest.mark.parametrize("rms", [False, True])
def test_fused_vjp_matches_numpy_and_composition(dtype, shape, affine, rms, device):
    d = shape[-1]
    x, ct = rand(*shape, dtype=dtype), rand(*shape, dtype=dtype)
    w = rand(d, dtype=dtype) if affine[0] else None
    b = rand(d, dtype=dtype) if affine[1] else None
    got = grads(norm_fn(rms, w, b), x, w, b, ct)
    want = np_norm_vjp(npy(x), None if w is None else npy(w), npy(ct), 1e-5, rms)
    tol = TOL[dtype] * (4 if d == 1000 else 1) * (2 if device == mx.gpu else 1)
    assert got[0].dtype == x.dtype and got[0].shape == x.shape
    close(got[0], want[0], tol)
    k = 1
    if w is not None:
        assert got[k].dtype == w.dtype and got[k].shape == (d,)
        close(got[k], want[1], tol * max(1, shape[0]))
        k += 1
    if b is not None:
        close(got[k], want[2], tol * max(1, shape[0]))
    comp = grads(comp_fn(rms), x, w, b, ct)
    for a, c in zip(got, comp):
        close(a, c, tol * max(4, shape[0]))


@pytest.mark.parametrize("rms", [False, True])
def test_fused_vjp_matches_finite_differences(rms):
    x, w, b = rand(3, 4, 9, dtype="float64"), rand(9, dtype="float64"), rand(9, dtype="float64")
    ct = rand(3, 4, 9, dtype="float64")
    f = norm_fn(rms, w, b)
    gx, gw, gb = grads(f, x, w, b, ct)
    h = 1e-6
    loss = lambda x, w, b: float(mx.sum(f(x, w, b) * ct))  # noqa: E731
    for i, (g, arg) in enumerate(zip((gx, gw, gb), (x, w, b))):
        t = rand(*arg.shape, dtype="float64")
        shift = [mx.zeros_like(a) for a in (x, w, b)]
        shift[i] = h * t
        fd = (loss(*[a + s for a, s in zip((x, w, b), shift)])
              - loss(*[a - s for a, s in zip((x, w, b), shift)])) / (2 * h)
        assert abs(float(mx.sum(g * t)) - fd) < 1e-6 * (1 + abs(fd))


@pytest.mark.parametrize("rms", [False, True])
def test_views_and_nan(rms, device):
    base = rand(7, 5)
    ct = rand(5, 7)
    w = rand(7)
    for x in (base.T, base[::-1, ::-1].T, mx.broadcast_to(rand(1, 7), (5, 7))):
        got = grads(norm_fn(rms, w, None), x, w, None, ct)
        want = np_norm_vjp(npy(x), npy(w), npy(ct), 1e-5, rms)
        close(got[0], want[0], 1e-4)
        close(got[1], want[1], 1e-4)
    x = mx.array(np.array([[1.0, np.nan, 2.0], [1.0, 2.0, 3.0]], np.float32))
    gx = grads(norm_fn(rms, None, None), x, None, None, mx.ones((2, 3)))[0]
    assert np.isnan(np.array(gx)[0]).all() and np.isfinite(np.array(gx)[1]).all()


def graph_ops(c):
    return [line.split(" = ")[1].split("(")[0] for e in c.explain()["entries"]
            for line in e["graph"] if " = " in line]


@pytest.mark.parametrize("rms", [False, True])
def test_inside_compile_one_node_each(rms, device):
    x, w, b, ct = rand(4, 16), rand(16), rand(16), rand(4, 16)
    f = norm_fn(rms, w, b)

    def loss(x, w, b):
        return mx.sum(f(x, w, b) * ct)
    g = mx.grad(loss, argnums=(0, 1, 2))
    c = mx.compile(g)
    for a, e in zip(c(x, w, b), g(x, w, b)):
        close(a, e, 1e-5)
    ops = graph_ops(c)
    name = "rms_norm_vjp" if rms else "layer_norm_vjp"
    assert ops.count(name) == 1, ops
    g4 = mx.grad(lambda x, w, b, ct: mx.sum(f(x, w, b) * ct), argnums=(0, 1, 2))
    shapeless = mx.compile(g4, shapeless=True)
    for n in (3, 5):
        xs, cs = rand(n, 16), rand(n, 16)
        for a, e in zip(shapeless(xs, w, b, cs), g4(xs, w, b, cs)):
            close(a, e, 1e-5)


@pytest.mark.parametrize("rms", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_vmap_of_the_vjp(rms, weighted, device):
    xs, cts = rand(3, 4, 8), rand(3, 4, 8)
    w = rand(8) if weighted else None

    def per_example(x, ct):
        return grads(norm_fn(rms, w, None), x, w, None, ct)
    got = mx.vmap(per_example)(xs, cts)
    for i in range(3):
        want = np_norm_vjp(npy(xs[i]), None if w is None else npy(w), npy(cts[i]), 1e-5, rms)
        close(got[0][i], want[0], 1e-4)
        if weighted:
            close(got[1][i], want[1], 1e-4)
    # The cotangent unbatched, x mapped along axis 1.
    ct = rand(3, 8)
    got = mx.vmap(lambda x: per_example(x, ct)[0], in_axes=1)(xs)
    for i in range(4):
        want = np_norm_vjp(npy(xs[:, i]), None if w is None else npy(w), npy(ct), 1e-5, rms)
        close(got[i], want[0], 1e-4)


# The GPU kernels' row classes: long rows past the registers, many rows (dweight and dbias
# summed over many blocks).
LONG_SHAPES = [(2, 8192), (4096, 512), (3, 20000)]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("shape", LONG_SHAPES, ids=str)
@pytest.mark.parametrize("affine", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("rms", [False, True])
def test_fused_vjp_rows(dtype, shape, affine, rms, device):
    if device == mx.cpu and shape[0] == 4096 and dtype != "float32":
        pytest.skip("the CPU splits rows alike in every dtype: the float32 case covers it")
    d = shape[-1]
    x, ct = rand(*shape, dtype=dtype), rand(*shape, dtype=dtype)
    w = rand(d, dtype=dtype) if affine[0] else None
    b = rand(d, dtype=dtype) if affine[1] else None
    got = grads(norm_fn(rms, w, b), x, w, b, ct)
    want = np_norm_vjp(npy(x), None if w is None else npy(w), npy(ct), 1e-5, rms)
    tol = TOL[dtype] * 4 * (2 if device == mx.gpu else 1)
    rows = x.size // d
    close(got[0], want[0], tol)
    # Weight and bias gradients are sums over rows: their error grows with the count.
    for g, r in zip(got[1:], [want[1]] * (w is not None) + [want[2]] * (b is not None)):
        close(g, r, tol * np.sqrt(rows))


@pytest.mark.parametrize("rms", [False, True])
def test_views_and_misaligned_rows(rms, device):
    base = rand(64, 33)
    w = rand(64)
    for x in (base.T, base[::-1].T, rand(1, 64 * 33 + 1)[0, 1:].reshape(33, 64)):
        ct = rand(*x.shape)
        got = grads(norm_fn(rms, w, None), x, w, None, ct)
        want = np_norm_vjp(npy(x), npy(w), npy(ct), 1e-5, rms)
        close(got[0], want[0], 1e-4)
        close(got[1], want[1], 1e-4 * np.sqrt(33))
    # Misaligned bfloat16 rows (a view one element in): the GPU's scalar path.
    x = rand(17, 257, dtype="bfloat16")[:, 1:]
    w, ct = rand(256, dtype="bfloat16"), rand(17, 256, dtype="bfloat16")
    got = grads(norm_fn(rms, w, None), x, w, None, ct)
    want = np_norm_vjp(npy(x), npy(w), npy(ct), 1e-5, rms)
    tol = TOL["bfloat16"] * (2 if device == mx.gpu else 1)
    close(got[0], want[0], tol)
    close(got[1], want[1], tol * np.sqrt(17))


def test_weight_gradients_are_deterministic(device):
    x, ct, w, b = rand(4096, 512), rand(4096, 512), rand(512), rand(512)
    first = [npy(g) for g in grads(norm_fn(False, w, b), x, w, b, ct)]
    for _ in range(2):
        again = [npy(g) for g in grads(norm_fn(False, w, b), x, w, b, ct)]
        for a, c in zip(first, again):
            np.testing.assert_array_equal(a, c)


@pytest.mark.parametrize("rms", [False, True])
def test_compiled_grad_keeps_the_fused_forward_and_backward(rms, device):
    x, w, b, ct = rand(64, 256), rand(256), rand(256), rand(64, 256)
    f = norm_fn(rms, w, b)
    g = mx.grad(lambda x, w, b: mx.sum(f(x, w, b) * ct), argnums=(0, 1, 2))
    c = mx.compile(g)
    for a, e in zip(c(x, w, b), g(x, w, b)):
        close(a, e, 1e-5)
    assert graph_ops(c).count("rms_norm_vjp" if rms else "layer_norm_vjp") == 1
    # The forward under grad is the fused one too (value_and_grad keeps it).
    vg = mx.compile(mx.value_and_grad(lambda x, w, b: mx.sum(f(x, w, b) * ct), argnums=(0,)))
    vg(x, w, b)
    assert graph_ops(vg).count("rms_norm" if rms else "layer_norm") == 1, graph_ops(vg)


@pytest.mark.parametrize("rms", [False, True])
def test_grad_of_grad_matches_finite_differences(rms):
    x, w, b = rand(2, 5, dtype="float64"), rand(5, dtype="float64"), rand(5, dtype="float64")
    ct, v = rand(2, 5, dtype="float64"), rand(2, 5, dtype="float64")
    f = norm_fn(rms, w, b)

    def inner(x, w, b):
        gx, gw = mx.grad(lambda x, w: mx.sum(f(x, w, b) * ct), argnums=(0, 1))(x, w)
        return mx.sum(gx * v) + mx.sum(gw * gw)
    gg = mx.grad(inner, argnums=(0, 1))(x, w, b)
    h = 1e-6
    for i, arg in enumerate((x, w)):
        t = rand(*arg.shape, dtype="float64")
        args_p = [x + h * t, w] if i == 0 else [x, w + h * t]
        args_m = [x - h * t, w] if i == 0 else [x, w - h * t]
        fd = (float(inner(*args_p, b)) - float(inner(*args_m, b))) / (2 * h)
        assert abs(float(mx.sum(gg[i] * t)) - fd) < 1e-5 * (1 + abs(fd))
    # jvp through the fused backward, against finite differences of the gradient.
    g = lambda x: mx.grad(lambda x: mx.sum(f(x, w, b) * ct))(x)  # noqa: E731
    t = rand(2, 5, dtype="float64")
    _, (jt,) = mx.jvp(g, [x], [t])
    fd = (npy(g(x + h * t)) - npy(g(x - h * t))) / (2 * h)
    np.testing.assert_allclose(npy(jt), fd, rtol=1e-5, atol=1e-6)
