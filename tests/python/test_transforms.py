"""grad, value_and_grad, vjp and jvp: against closed forms and finite differences."""

from collections import namedtuple

import numpy as np
import pytest

import kiln.core as mx

rng = np.random.default_rng(0)


def f64(shape, lo=-1.0, hi=1.0):
    return mx.array(rng.uniform(lo, hi, size=shape), dtype=mx.float64)


def finite_difference(fun, x, eps=1e-6):
    """Central differences of scalar ``fun`` at float64 ``x``."""
    base = np.array(x, dtype=np.float64)
    out = np.zeros_like(base)
    for idx in np.ndindex(base.shape):
        up, down = base.copy(), base.copy()
        up[idx] += eps
        down[idx] -= eps
        out[idx] = (fun(mx.array(up, dtype=mx.float64)).item()
                    - fun(mx.array(down, dtype=mx.float64)).item()) / (2 * eps)
    return out


FUNCTIONS = [
    ("poly", lambda x: (x * x * x - 2 * x).sum()),
    ("exp_log", lambda x: mx.log(mx.exp(x) + 1).sum()),
    ("tanh_sin", lambda x: (mx.tanh(x) * mx.sin(x)).mean()),
    ("sigmoid_erf", lambda x: (mx.sigmoid(x) + mx.erf(x) ** 2).sum()),
    ("max_min", lambda x: x.max(axis=1).sum() - x.min()),
    ("matmul", lambda x: (x @ x.T).sum()),
    ("views", lambda x: (x.T.reshape(-1) * mx.arange(6)).sum()),
    ("where", lambda x: mx.where(x > 0, x * x, -x).sum()),
    ("divide_power", lambda x: (x / (x * x + 1) + mx.abs(x) ** 1.5).sum()),
    ("concat", lambda x: mx.concatenate([x, 2 * x], axis=0).prod()),
]


@pytest.mark.parametrize("name,fun", FUNCTIONS, ids=[n for n, _ in FUNCTIONS])
def test_grad_matches_finite_differences(name, fun):
    x = f64((2, 3))
    g = mx.grad(fun)(x)
    assert g.dtype == mx.float64 and g.shape == (2, 3)
    np.testing.assert_allclose(np.array(g), finite_difference(fun, x), rtol=1e-5, atol=1e-6)


def test_softmax_cross_entropy_closed_form():
    logits, labels = f64((4, 5)), np.eye(5)[[0, 3, 1, 4]]

    def loss(z):
        logp = z - mx.log(mx.exp(z).sum(axis=1, keepdims=True))
        return -(logp * mx.array(labels)).sum()

    z = np.array(logits)
    softmax = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(np.array(mx.grad(loss)(logits)), softmax - labels, rtol=1e-10)


def test_value_and_grad_with_trees_and_aux():
    Params = namedtuple("Params", ["w", "b"])
    p = {"layer": Params(w=f64((3, 2)), b=f64((2,))), "scale": 2.0}
    x = f64((4, 3))

    def loss(params, x):
        y = x @ params["layer"].w + params["layer"].b
        return (params["scale"] * y * y).sum(), y

    (value, y), grads = mx.value_and_grad(loss)(p, x)
    assert isinstance(grads["layer"], Params) and grads["scale"] == 2.0
    yy = np.array(x) @ np.array(p["layer"].w) + np.array(p["layer"].b)
    np.testing.assert_allclose(value.item(), (2 * yy * yy).sum())
    np.testing.assert_allclose(np.array(grads["layer"].w), np.array(x).T @ (4 * yy))
    np.testing.assert_allclose(np.array(grads["layer"].b), (4 * yy).sum(axis=0))
    np.testing.assert_allclose(np.array(y), yy)


def test_argnums_and_argnames():
    f = lambda x, y=None: (x * y).sum()  # noqa: E731
    x, y = mx.array([1.0, 2.0]), mx.array([3.0, 4.0])
    assert mx.grad(f)(x, y).tolist() == [3.0, 4.0]
    gx, gy = mx.grad(f, argnums=(0, 1))(x, y)
    assert gx.tolist() == [3.0, 4.0] and gy.tolist() == [1.0, 2.0]
    assert mx.grad(f, argnums=[1])(x, y).tolist() == [1.0, 2.0]
    none, named = mx.grad(f, argnames=["y"])(x, y=y)
    assert none is None and named["y"].tolist() == [1.0, 2.0]
    gx, named = mx.grad(f, argnums=0, argnames="y")(x, y=y)
    assert gx.tolist() == [3.0, 4.0] and named["y"].tolist() == [1.0, 2.0]


def test_higher_order():
    x = f64((5,))
    d2 = mx.grad(lambda v: mx.grad(lambda u: mx.sin(u).sum())(v).sum())(x)
    np.testing.assert_allclose(np.array(d2), -np.sin(np.array(x)), rtol=1e-12)
    # Hessian-vector product: jvp of grad.
    v = f64((5,))
    _, (hvp,) = mx.jvp(mx.grad(lambda u: (u ** 3).sum()), [x], [v])
    np.testing.assert_allclose(np.array(hvp), 6 * np.array(x) * np.array(v), rtol=1e-12)


def test_vjp_jvp_dot_product():
    x, u, v = f64((3, 4)), f64((3, 4)), f64((3, 4))
    fun = lambda a: mx.tanh(a) * a.sum(axis=0)  # noqa: E731
    (out,), (vjp,) = mx.vjp(fun, [x], [u])
    _, (jvp,) = mx.jvp(fun, [x], [v])
    lhs = (np.array(vjp) * np.array(v)).sum()
    rhs = (np.array(u) * np.array(jvp)).sum()
    assert abs(lhs - rhs) < 1e-12
    assert out.shape == (3, 4)


def test_integer_inputs_get_their_rules_gradient():
    # As MLX: the rule's value, cast to the input's dtype (not zero).
    g = mx.grad(lambda x, i: (x * i).sum(), argnums=(0, 1))(mx.array([1.0, 2.0]), mx.array([3, 4]))
    assert g[0].tolist() == [3.0, 4.0] and g[1].dtype == mx.int32 and g[1].tolist() == [1, 2]


def test_eval_inside_and_laziness():
    def loss(x):
        y = mx.exp(x)
        mx.eval(y)  # allowed: the graph the gradient needs is kept
        return (y * x).sum()

    x = f64((3,))
    g = mx.grad(loss)(x)
    np.testing.assert_allclose(np.array(g), np.exp(np.array(x)) * (1 + np.array(x)), rtol=1e-12)


def test_errors():
    x = mx.array([1.0, 2.0])
    with pytest.raises(ValueError, match=r"\[value_and_grad\].*scalar"):
        mx.grad(lambda v: v * 2)(x)
    with pytest.raises(ValueError, match=r"argument index 3"):
        mx.grad(lambda a, b: (a * b).sum(), argnums=3)(x, x)
    with pytest.raises(ValueError, match=r"keyword argument 'z'"):
        mx.grad(lambda a, z=None: a.sum(), argnames="z")(x)
    with pytest.raises(ZeroDivisionError):
        mx.grad(lambda v: v.sum() / 0 if (1 / 0) else v)(x)  # the user's own exception
    with pytest.raises(ValueError, match=r"\[vjp\]"):
        mx.vjp(lambda a: a * 2, [x], [mx.ones((3,))])


def loop(fun, args, in_axes, out_axis=0):
    n = next(a.shape[ax] for a, ax in zip(args, in_axes) if ax is not None)
    outs = []
    for i in range(n):
        sliced = [np.take(np.array(a), i, axis=ax) if ax is not None else np.array(a)
                  for a, ax in zip(args, in_axes)]
        outs.append(np.array(fun(*[mx.array(s) for s in sliced])))
    return np.stack(outs, axis=out_axis)


VMAP_CASES = [
    ("elementwise", lambda a, b: mx.tanh(a) * b + 1),
    ("reduce", lambda a, b: (a * b).sum(axis=0) + a.max()),
    ("matmul", lambda a, b: a @ b.T),
    ("views", lambda a, b: a.T.reshape(-1)[::2] + b.reshape(-1)[0]),
    ("where", lambda a, b: mx.where(a > b, a, b).mean(axis=-1)),
    ("argmax", lambda a, b: mx.argmax(a + b, axis=1)),
    ("concat", lambda a, b: mx.concatenate([a, b], axis=1)),
]


@pytest.mark.parametrize("name,fun", VMAP_CASES, ids=[n for n, _ in VMAP_CASES])
@pytest.mark.parametrize("axes", [(0, None), (1, None), (2, 0)])
def test_vmap_matches_loop(name, fun, axes):
    a = mx.array(rng.standard_normal((4, 4, 4)).astype(np.float32))
    b = mx.array(rng.standard_normal((4, 4) if axes[1] is None else (4, 4, 4)).astype(np.float32))
    got = mx.vmap(fun, in_axes=axes)(a, b)
    np.testing.assert_allclose(np.array(got), loop(fun, [a, b], axes), rtol=1e-5, atol=1e-6)


def test_vmap_trees_and_out_axes():
    x = mx.arange(6.0).reshape(2, 3)
    out = mx.vmap(lambda a: {"s": a.sum(), "d": a * 2}, in_axes=1, out_axes={"s": 0, "d": 1})(x)
    assert out["s"].tolist() == [3.0, 5.0, 7.0] and out["d"].shape == (2, 3)
    tree = {"w": mx.ones((3, 2)), "b": mx.zeros((3,))}
    y = mx.vmap(lambda p, v: p["w"] * v + p["b"], in_axes=({"w": 1, "b": None}, 0))(tree, x)
    assert y.shape == (2, 3)
    const = mx.vmap(lambda a, b: b, in_axes=(0, None))(x, mx.array([7.0]))
    assert const.tolist() == [[7.0], [7.0]]


def test_vmap_composes_with_grad():
    x, w = f64((5, 3)), f64((3,))
    per_example = mx.vmap(mx.grad(lambda xi, w: ((xi * w).sum()) ** 2, argnums=1), in_axes=(0, None))
    g = np.array(per_example(x, w))
    xs, ws = np.array(x), np.array(w)
    np.testing.assert_allclose(g, 2 * (xs @ ws)[:, None] * xs, rtol=1e-12)
    # grad of vmap
    gw = mx.grad(lambda w: mx.vmap(lambda xi: (xi * w).sum(), in_axes=(0,))(x).sum())(w)
    np.testing.assert_allclose(np.array(gw), xs.sum(axis=0), rtol=1e-12)


def test_vmap_errors():
    x = mx.ones((2, 3))
    with pytest.raises(ValueError, match=r"\[vmap\]"):
        mx.vmap(lambda a: a, in_axes=2)(x)
    with pytest.raises(ValueError, match=r"\[vmap\]"):
        mx.vmap(lambda a, b: a, in_axes=(0,))(x, x)
    with pytest.raises(ValueError, match=r"\[vmap\]"):
        mx.vmap(lambda a, b: a + b)(x, mx.ones((3, 3)))
    with pytest.raises(ValueError, match=r"placeholder"):
        mx.vmap(lambda a: a.sum().item())(x)


INDEXING_GRADS = [
    ("slice", lambda x: (x[::-2, 1::2] ** 2).sum()),
    ("int_array", lambda x: (x[mx.array([2, 0, 2])] * x[0]).sum()),
    ("take", lambda x: mx.take(x, mx.array([1, 1, 3]), axis=1).prod()),
    ("at_add", lambda x: x.at[mx.array([0, 0])].add(x[1] ** 2).sum()),
    ("pad_concat", lambda x: (mx.pad(x, 1) * mx.concatenate([x, x], axis=0)[:5, :3].sum()).sum()),
]


@pytest.mark.parametrize("name,fun", INDEXING_GRADS, ids=[n for n, _ in INDEXING_GRADS])
def test_grad_through_indexing(name, fun):
    x = f64((3, 4))
    g = mx.grad(fun)(x)
    np.testing.assert_allclose(np.array(g), finite_difference(fun, x), rtol=1e-5, atol=1e-6)


def test_vmap_linalg_and_conv():
    a = mx.array(rng.standard_normal((3, 4, 4)).astype(np.float32)) + 4 * mx.eye(4)
    inv = mx.vmap(mx.linalg.inv)(a)
    np.testing.assert_allclose(np.array(inv), np.linalg.inv(np.array(a)), rtol=1e-4, atol=1e-5)
    x = mx.array(rng.standard_normal((5, 2, 8, 3)).astype(np.float32))
    w = mx.array(rng.standard_normal((4, 3, 3)).astype(np.float32))
    got = mx.vmap(lambda xi: mx.conv1d(xi, w), in_axes=0)(x)
    want = np.stack([np.array(mx.conv1d(x[i], w)) for i in range(5)])
    np.testing.assert_allclose(np.array(got), want, rtol=1e-5, atol=1e-5)


def test_checkpoint_recomputes_forward():
    calls = []

    def block(x, w):
        calls.append(1)
        return mx.tanh(x @ w) * 2

    x, w = f64((3, 4)), f64((4, 4))
    loss = lambda w: block(x, w).sum()  # noqa: E731
    loss_ck = lambda w: mx.checkpoint(block)(x, w).sum()  # noqa: E731
    g = mx.grad(loss)(w)
    calls.clear()
    g_ck = mx.grad(loss_ck)(w)
    np.testing.assert_allclose(np.array(g_ck), np.array(g), rtol=1e-12)
    assert len(calls) == 2  # the forward pass, then its recomputation for the gradient
    assert mx.checkpoint(block)(x, w).shape == (3, 4)


def test_custom_function_vjp_and_jvp():
    @mx.custom_function
    def f(x, y):
        return mx.sin(x) * y

    @f.vjp
    def f_vjp(primals, cotangent, output):
        x, y = primals
        return 2 * cotangent * mx.cos(x) * y, cotangent * mx.sin(x)  # doubled on purpose

    x, y = f64((4,)), f64((4,))
    gx, gy = mx.grad(lambda a, b: f(a, b).sum(), argnums=(0, 1))(x, y)
    np.testing.assert_allclose(np.array(gx), 2 * np.cos(np.array(x)) * np.array(y), rtol=1e-12)
    np.testing.assert_allclose(np.array(gy), np.sin(np.array(x)), rtol=1e-12)
    np.testing.assert_allclose(np.array(f(x, y)), np.sin(np.array(x)) * np.array(y), rtol=1e-12)

    @f.jvp
    def f_jvp(primals, tangents):
        return mx.zeros_like(primals[0]) + 5

    _, (t,) = mx.jvp(f, [x, y], [mx.ones_like(x), mx.ones_like(y)])
    assert t.tolist() == [5.0] * 4
    # vmap maps the function itself.
    out = mx.vmap(f)(x.reshape(2, 2), y.reshape(2, 2))
    np.testing.assert_allclose(np.array(out).reshape(-1), np.sin(np.array(x)) * np.array(y), rtol=1e-12)
