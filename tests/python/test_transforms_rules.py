"""Transform rules of the heavier primitives (conv, linalg, sort, scans, masked scatter,
as_strided, gather/scatter): vjp and jvp against central finite differences in float64 and
against each other, vmap against a loop, custom vmap rules and checkpoint's memory."""

import numpy as np
import pytest

import kiln.core as mx

rng = np.random.default_rng(7)


def f64(*shape):
    return mx.array(rng.uniform(-1, 1, size=shape), dtype=mx.float64)


def spd(n):
    a = rng.uniform(-0.5, 0.5, size=(n, n)) + n * np.eye(n)
    return mx.array(a, dtype=mx.float64)


def weights(out):
    return mx.array(np.linspace(0.5, 1.5, out.size).reshape(out.shape), dtype=mx.float64)


def finite_difference(fun, args, k, eps=1e-6):
    base = np.array(args[k], dtype=np.float64)
    out = np.zeros_like(base)
    for idx in np.ndindex(base.shape):
        vals = []
        for d in (eps, -eps):
            moved = base.copy()
            moved[idx] += d
            new = list(args)
            new[k] = mx.array(moved, dtype=mx.float64)
            vals.append(fun(*new).item())
        out[idx] = (vals[0] - vals[1]) / (2 * eps)
    return out


def check(fun, *args):
    """Gradient against finite differences, and <vjp(u), v> == <u, jvp(v)>."""
    out = fun(*args)
    w = weights(out)
    scalar = lambda *a: (fun(*a) * w).sum()  # noqa: E731
    grads = mx.grad(scalar, argnums=tuple(range(len(args))))(*args)
    grads = grads if len(args) > 1 else (grads,)
    for k, g in enumerate(grads):
        np.testing.assert_allclose(np.array(g), finite_difference(scalar, args, k),
                                   rtol=1e-5, atol=1e-6)
    u = mx.array(rng.uniform(-1, 1, size=out.shape), dtype=mx.float64)
    vs = [mx.array(rng.uniform(-1, 1, size=a.shape), dtype=mx.float64) for a in args]
    _, cots = mx.vjp(fun, list(args), [u])
    _, (tan,) = mx.jvp(fun, list(args), vs)
    lhs = sum((np.array(c) * np.array(v)).sum() for c, v in zip(cots, vs))
    rhs = (np.array(u) * np.array(tan)).sum()
    assert abs(lhs - rhs) <= 1e-9 * (1 + abs(lhs))


MASK = mx.array(np.array([[1, 0, 1, 1], [0, 0, 1, 0], [1, 1, 0, 0]], dtype=bool))


def masked(x, v):
    y = x * 1
    y[MASK] = v
    return y


RULES = [
    ("conv1d", lambda x, w: mx.conv1d(x, w, stride=2, padding=1, dilation=2, groups=2),
     [(2, 9, 4), (6, 3, 2)]),
    ("conv2d", lambda x, w: mx.conv2d(x, w, stride=(2, 1), padding=(1, 0)), [(1, 5, 4, 2), (3, 2, 2, 2)]),
    ("conv_general", lambda x, w: mx.conv_general(
        x, w, stride=[1, 2], padding=([1, 0], [0, 2]), kernel_dilation=[1, 2],
        input_dilation=[2, 1], flip=True), [(1, 3, 5, 2), (2, 2, 2, 2)]),
    ("conv_transpose2d", lambda x, w: mx.conv_transpose2d(x, w, stride=2, padding=1),
     [(1, 3, 3, 2), (2, 3, 3, 2)]),
    ("sort", lambda x: mx.sort(x, axis=0), [(4, 3)]),
    ("partition", lambda x: mx.partition(x, 1, axis=1), [(3, 4)]),
    ("topk", lambda x: mx.topk(x, 2), [(3, 5)]),
    ("cumprod", lambda x: mx.cumprod(x, axis=1, reverse=True, inclusive=False), [(3, 5)]),
    ("cummax", lambda x: mx.cummax(x, axis=1), [(3, 5)]),
    ("cummin", lambda x: mx.cummin(x, axis=0, reverse=True), [(4, 3)]),
    ("logcumsumexp", lambda x: mx.logcumsumexp(x, axis=1, inclusive=True), [(3, 5)]),
    ("masked_scatter", masked, [(3, 4), (6,)]),
    ("as_strided", lambda x: mx.as_strided(x, (3, 3), (2, 1), 1), [(3, 4)]),
    ("take_along_axis", lambda x: mx.take_along_axis(x, mx.array([[2, 0, 0]]), axis=1), [(3, 4)]),
    ("scatter_add", lambda x, v: x.at[mx.array([1, 1, 0])].add(v) * x, [(3, 4), (3, 4)]),
    ("scatter_max", lambda x, v: x.at[mx.array([0, 2, 0])].maximum(v), [(3, 4), (3, 4)]),
    ("scatter_min", lambda x, v: x.at[mx.array([1, 1])].minimum(v * 2), [(3, 4), (2, 4)]),
]


# The older primitives too, so every rule meets the dot-product identity.
RULES += [
    ("unary", lambda x: mx.exp(x) + mx.sin(x) * mx.tanh(x) + mx.erf(x) + mx.sqrt(x + 2), [(2, 3)]),
    ("unary_more", lambda x: mx.arctan(x) + mx.log1p(x + 1) + mx.sigmoid(x) * mx.cosh(x), [(2, 3)]),
    ("binary", lambda x, y: x * y + x / (y + 3) + mx.maximum(x, y) + (x + 2) ** y, [(2, 3), (3,)]),
    ("binary_more", lambda x, y: mx.logaddexp(x, y) + mx.arctan2(x, y + 3) - mx.minimum(x, y), [(2, 3), (2, 3)]),
    ("where", lambda x, y: mx.where(x > y, x * 2, y), [(2, 3), (2, 3)]),
    ("reductions", lambda x: mx.concatenate([x.sum(0), x.prod(0), x.max(0), x.min(0)]), [(3, 4)]),
    ("movement", lambda x: mx.broadcast_to(x.T.reshape(1, -1), (3, 12))[:, ::-2], [(3, 4)]),
    ("slice_update", lambda x, v: x.at[1:, ::2].add(v), [(3, 4), (2, 2)]),
    ("pad", lambda x: mx.pad(x, ((1, 0), (2, 1))), [(3, 4)]),
    ("matmul", lambda a, b: a @ b, [(2, 3, 4), (2, 4, 2)]),
    ("softmax", lambda x: mx.softmax(x, axis=-1), [(3, 4)]),
    ("astype", lambda x: x.astype(mx.float32).astype(mx.float64) * 0 + x, [(3,)]),
    ("einsum", lambda a, b: mx.einsum("ij,jk->ik", a, b), [(2, 3), (3, 2)]),
]


@pytest.mark.parametrize("name,fun,shapes", RULES, ids=[r[0] for r in RULES])
def test_rule_matches_finite_differences(name, fun, shapes):
    check(fun, *[f64(*s) for s in shapes])


LINALG = [
    ("inv", lambda a: mx.linalg.inv(a)),
    ("tri_inv", lambda a: mx.linalg.tri_inv(a, upper=True)),
    ("cholesky", lambda a: mx.linalg.cholesky(a)),
    ("cholesky_inv", lambda a: mx.linalg.cholesky_inv(mx.linalg.cholesky(a))),
    ("eigvalsh", lambda a: mx.linalg.eigvalsh(a, UPLO="U")),
    ("eigh", lambda a: mx.linalg.eigh(a)[1] ** 2),
    ("det", lambda a: mx.linalg.det(a)),
    ("slogdet", lambda a: mx.linalg.slogdet(a)[1]),
    ("solve", lambda a: mx.linalg.solve(a, mx.cos(a[:, :2]))),
    ("solve_triangular", lambda a: mx.linalg.solve_triangular(a, mx.sin(a), upper=False)),
    ("qr", lambda a: mx.linalg.qr(a)[0] ** 2 + mx.linalg.qr(a)[1] ** 2),
    ("svd", lambda a: mx.linalg.svd(a, compute_uv=False)),
    ("svd_vectors", lambda a: mx.linalg.svd(a)[0] ** 2 + mx.linalg.svd(a)[2] ** 2),
    ("pinv", lambda a: mx.linalg.pinv(a)),
    ("norm_nuc", lambda a: mx.linalg.norm(a, "nuc")),
]


@pytest.mark.parametrize("name,fun", LINALG, ids=[n for n, _ in LINALG])
def test_linalg_rules(name, fun):
    check(fun, spd(3))


def test_linalg_without_gradients_raise():
    a = spd(3)
    with pytest.raises(ValueError, match=r"linalg::lu"):
        mx.grad(lambda m: mx.linalg.lu(m)[1].sum())(a)
    with pytest.raises(ValueError, match=r"linalg::qr.*rows"):
        mx.grad(lambda m: mx.linalg.qr(m)[0].sum())(f64(2, 3))


def test_cumprod_with_zeros_is_exact():
    x = mx.array([[0.5, 0.0, 2.0, 0.0, 3.0], [1.0, 2.0, 0.0, 4.0, 5.0]], dtype=mx.float64)
    check(lambda v: mx.cumprod(v, axis=1), x)
    g = mx.grad(lambda v: mx.cumprod(v, axis=1).sum())(x)
    assert np.isfinite(np.array(g)).all()


def test_grad_through_a_small_cnn():
    x, w1, w2 = f64(2, 6, 6, 1), f64(3, 3, 3, 1), f64(2, 2, 2, 3)

    def loss(w1, w2):
        h = mx.tanh(mx.conv2d(x, w1, padding=1))
        return (mx.conv2d(h, w2, stride=2) ** 2).mean()

    g1, g2 = mx.grad(loss, argnums=(0, 1))(w1, w2)
    np.testing.assert_allclose(np.array(g1), finite_difference(loss, [w1, w2], 0), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(np.array(g2), finite_difference(loss, [w1, w2], 1), rtol=1e-5, atol=1e-7)


def loop(fun, args, in_axes):
    n = next(a.shape[ax] for a, ax in zip(args, in_axes) if ax is not None)
    outs = []
    for i in range(n):
        sliced = [mx.array(np.take(np.array(a), i, axis=ax)) if ax is not None else a
                  for a, ax in zip(args, in_axes)]
        outs.append(np.array(fun(*sliced)))
    return np.stack(outs)


def ints(*values):
    return mx.array(np.array(values, dtype=np.int32))


VMAPS = [
    ("take", lambda x, i: mx.take(x, i, axis=0), [(3, 4, 5), ints([0, 3], [2, 2], [1, 0])], (0, 0)),
    ("take_shared_x", lambda x, i: mx.take(x, i, axis=1), [(4, 5), ints([0, 3], [2, 2], [1, 0])], (None, 0)),
    ("getitem", lambda x, i: x[i, 1:], [(3, 4, 4), ints([0, 3], [2, 2], [1, 0])], (0, 0)),
    ("at_add", lambda x, i: x.at[i].add(1.0), [(3, 4, 2), ints([0, 0], [2, 3], [1, 1])], (0, 0)),
    ("at_max_shared_idx", lambda x, i: x.at[i].maximum(0.0), [(3, 4, 2), ints(0, 2)], (0, None)),
    ("setitem", lambda x, v: x.at[ints(1, 3)].add(v), [(3, 4), (3, 2)], (0, 0)),
    ("put_along_axis", lambda x, i: mx.put_along_axis(x, i, mx.array(9.0), axis=0),
     [(3, 4, 2), ints([[1]], [[0]], [[3]])], (0, 0)),
    ("searchsorted", lambda s, v: mx.searchsorted(s, v, side="right"),
     [mx.array([[0.0, 1, 1, 3], [-1, 2, 2, 9], [1, 1, 1, 1]]), (3, 5)], (0, 0)),
    ("searchsorted_shared", lambda s, v: mx.searchsorted(s, v),
     [mx.array([0.0, 1, 1, 3]), (3, 5)], (None, 0)),
    ("masked_scatter", masked, [(2, 3, 4), (2, 6)], (0, 0)),
    ("as_strided", lambda x: mx.as_strided(x, (3, 3), (2, 1), 1), [(3, 4, 2)], (2,)),
    ("sort", lambda x: mx.sort(x, axis=0), [(3, 4, 2)], (1,)),
    ("partition", lambda x: mx.partition(x, 1), [(3, 4)], (0,)),
    ("cumprod", lambda x: mx.cumprod(x, axis=0, reverse=True), [(3, 4, 2)], (1,)),
    ("conv_batched_weight", lambda x, w: mx.conv1d(x, w, padding=1, groups=2),
     [(3, 2, 6, 4), (3, 4, 3, 2)], (0, 0)),
    ("conv_weight_only", lambda x, w: mx.conv1d(x, w, stride=2), [(2, 6, 4), (3, 4, 3, 4)], (None, 0)),
    ("linalg_solve", lambda a, b: mx.linalg.solve(a, b), [(3, 3, 3), (3, 3)], (0, None)),
    ("qr", lambda a: mx.linalg.qr(a)[1], [(3, 4, 3)], (0,)),
    ("view", lambda x: mx.view(x, mx.uint16).astype(mx.float32), [(3, 2, 2)], (0,)),
    ("random", lambda k: mx.random.uniform(shape=(3,), key=k), [mx.random.split(mx.random.key(1), 4)], (0,)),
    ("arange_and_concat", lambda x: mx.concatenate([x, mx.arange(2.0)]), [(3, 2)], (0,)),
    ("argreduce", lambda x: mx.argmin(x, axis=0), [(3, 4, 2)], (1,)),
]


@pytest.mark.parametrize("name,fun,args,axes", VMAPS, ids=[v[0] for v in VMAPS])
def test_vmap_matches_loop(name, fun, args, axes):
    args = [a if isinstance(a, mx.array) else mx.array(rng.standard_normal(a).astype(np.float32))
            for a in args]
    if name == "masked_scatter":
        args[0] = args[0][:, :3, :4]  # per entry (3, 4): the mask's shape
    if name == "linalg_solve":
        args[0] = args[0] + 3 * mx.eye(3)
    got = mx.vmap(fun, in_axes=axes)(*args)
    np.testing.assert_allclose(np.array(got), loop(fun, args, axes), rtol=1e-5, atol=1e-5)


def test_vmap_of_grad_through_conv_and_gather():
    # Per-example gradients of a conv + gather loss, against a loop.
    x, w = f64(4, 1, 6, 2), f64(3, 3, 2)
    idx = mx.array([0, 2, 3])

    def loss(w, xi):
        y = mx.conv1d(xi, w, padding=1)
        return (mx.take(y, idx, axis=1) ** 2).sum()

    per = mx.vmap(mx.grad(loss), in_axes=(None, 0))(w, x)
    want = np.stack([np.array(mx.grad(loss)(w, x[i])) for i in range(4)])
    np.testing.assert_allclose(np.array(per), want, rtol=1e-10)


def test_higher_order_through_the_new_rules():
    # Hessian-vector products (jvp of grad) through conv and softmax cross-entropy,
    # against finite differences of the gradient.
    x, labels = f64(2, 5, 2), mx.array([[0, 2, 1], [1, 1, 0]])
    w = f64(3, 3, 2)

    def loss(w):
        logits = mx.conv1d(x, w)
        return -mx.take_along_axis(logits - mx.logsumexp(logits, axis=-1, keepdims=True),
                                   labels[..., None], axis=-1).sum()

    v = f64(3, 3, 2)
    _, (hvp,) = mx.jvp(mx.grad(loss), [w], [v])
    eps = 1e-6
    fd = (np.array(mx.grad(loss)(w + eps * v)) - np.array(mx.grad(loss)(w - eps * v))) / (2 * eps)
    np.testing.assert_allclose(np.array(hvp), fd, rtol=1e-5, atol=1e-7)
    # grad of grad through sort and cumprod; vjp of jvp through eigh.
    d2 = mx.grad(lambda a: mx.grad(lambda b: (mx.cumprod(mx.sort(b)) ** 2).sum())(a).sum())
    a = f64(5)
    fd2 = finite_difference(lambda b: mx.grad(lambda c: (mx.cumprod(mx.sort(c)) ** 2).sum())(b).sum(), [a], 0)
    np.testing.assert_allclose(np.array(d2(a)), fd2, rtol=1e-5, atol=1e-6)
    m = spd(3)
    jv = lambda b: mx.jvp(lambda c: mx.linalg.eigvalsh(c), [b], [mx.eye(3, dtype=mx.float64)])[1][0]  # noqa: E731
    (g,) = mx.vjp(jv, [m], [mx.ones(3, dtype=mx.float64)])[1]
    np.testing.assert_allclose(np.array(g), finite_difference(lambda b: jv(b).sum(), [m], 0), atol=1e-6)


def test_custom_vmap_rule():
    calls = []

    @mx.custom_function
    def f(x, y):
        return mx.sin(x) * y

    @f.vmap
    def f_vmap(inputs, axes):
        calls.append(axes)
        x, y = inputs
        ax, ay = axes
        if ax is not None and ay is not None and ax != ay:
            y = mx.moveaxis(y, ay, ax)
        return mx.sin(x) * y + 100, ax if ax is not None else ay

    x, y = f64(3, 2), f64(2, 3)
    out = mx.vmap(f, in_axes=(0, 1))(x, y)
    assert calls == [(0, 1)]
    np.testing.assert_allclose(np.array(out), np.sin(np.array(x)) * np.array(y).T + 100)
    # Outside vmap the function itself runs.
    np.testing.assert_allclose(np.array(f(x[0], y[:, 0])), np.sin(np.array(x[0])) * np.array(y[:, 0]))

    @f.vmap
    def bad(inputs, axes):
        return mx.sin(inputs[0]), 5

    with pytest.raises(ValueError, match=r"custom_function"):
        mx.vmap(f)(x, x)


def test_checkpoint_lowers_peak_memory_and_recomputes():
    calls = []

    def block(x):
        calls.append(1)
        for _ in range(6):
            x = mx.sin(x) * 1.5 + mx.cos(x)
        return x

    def loss(x, wrap):
        for _ in range(4):
            x = wrap(block)(x)
        return x.sum()

    x = mx.array(rng.standard_normal((64, 64)))
    unit = x.nbytes
    peaks, grads = {}, {}
    for name, wrap in [("plain", lambda f: f), ("checkpoint", mx.checkpoint)]:
        calls.clear()
        mx.eval(x)
        mx.reset_peak_memory()
        base = mx.get_active_memory()
        g = mx.grad(lambda v: loss(v, wrap))(x)
        mx.eval(g)
        peaks[name] = (mx.get_peak_memory() - base) / unit
        grads[name] = np.array(g)
        # The forward once per block, plus one recomputation per block for checkpoint.
        assert len(calls) == (4 if name == "plain" else 8)
    np.testing.assert_allclose(grads["checkpoint"], grads["plain"], rtol=1e-12)
    assert peaks["checkpoint"] < 0.7 * peaks["plain"], peaks
