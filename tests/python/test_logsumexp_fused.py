"""logsumexp over one axis (or all, flattened) as the fused LogSumExp primitive, one kernel
per row on the CPU and the GPU: values against numpy in float64 for every float dtype, axis
and keepdims, views, the GPU kernels' row-length classes (a warp per row, a block per row,
long rows split across blocks), special rows (NaN, +-inf, all -inf), gradients (central
differences and the composition's), vmap, compile, the recorded graph, and MLX itself where
it is installed."""

import io

import kiln.core as mx
import numpy as np
import pytest
from conftest import FLOATS, assert_matches, dt, looser, make, name_of, to_np
from mlx_parity import assert_same_as_mlx

# Against float64 numpy: half floats accumulate in float32 and round once.
TOL = {"float16": 1e-3, "bfloat16": 8e-3, "float32": 2e-6, "float64": 1e-12}
# The GPU's bounds (its sum order and expf differ from the CPU's).
GPU_TOL = {"float32": 1e-5, "float16": 1e-3, "bfloat16": 8e-3}


def reference(x, axis=None, keepdims=False):
    """float64 logsumexp: the max where it is infinite or NaN (numpy's max propagates NaN)."""
    x = np.asarray(x, dtype=np.float64)
    axes = tuple(range(x.ndim)) if axis is None else (axis % x.ndim,)
    with np.errstate(all="ignore"):
        m = np.max(x, axis=axes, keepdims=True)
        out = m + np.log(np.sum(np.exp(x - m), axis=axes, keepdims=True))
        out = np.where(np.isfinite(m), out, m)
    return out if keepdims else np.squeeze(out, axis=axes)


def composed(x, axis=None, keepdims=False):
    """The composition the primitive replaces (kiln's before it, as MLX's off the last axis)."""
    m = mx.stop_gradient(mx.max(x, axis=axis, keepdims=True))
    out = mx.log(mx.sum(mx.exp(x - m), axis=axis, keepdims=True)) + m
    out = mx.where(mx.abs(m) == float("inf"), m, out)
    if keepdims:
        return out
    return mx.squeeze(out, axis=axis) if axis is not None else mx.reshape(out, ())


def tol_for(name, device):
    return looser(device, TOL[name], GPU_TOL.get(name))


def check(out, x, name, device, axis=None, keepdims=False):
    assert name_of(out.dtype) == name
    t = tol_for(name, device)
    assert_matches(out, reference(x, axis, keepdims), name, rtol=t, atol=t)


CASES = [((1,), -1), ((1,), None), ((1,), 0), ((3, 5), -1), ((3, 5), 0), ((3, 5), 1),
         ((3, 5), None), ((2, 3, 7), 1), ((2, 40000), -1), ((2, 40000), 0), ((2, 40000), None)]  # fmt: skip


@pytest.mark.parametrize("name", FLOATS)
@pytest.mark.parametrize("shape,axis", CASES, ids=str)
@pytest.mark.parametrize("keepdims", [False, True])
def test_values(name, shape, axis, keepdims, rng, device):
    a, x = make(name, shape, rng)
    check(mx.logsumexp(a, axis=axis, keepdims=keepdims), x, name, device, axis, keepdims)
    check(a.logsumexp(axis, keepdims), x, name, device, axis, keepdims)


@pytest.mark.parametrize("name", FLOATS)
def test_views(name, rng, device):
    """Transposed, negative-step, strided and broadcast inputs (rows gathered or copied)."""
    a, x = make(name, (40, 66), rng)
    for view, xv in [(a.T, x.T), (a[::-1, ::2], x[::-1, ::2]), (a[3:30:3, 1:], x[3:30:3, 1:]),
                     (mx.broadcast_to(a[:1], (5, 66)), np.broadcast_to(x[:1], (5, 66)))]:
        for axis in (-1, 0, None):
            for keepdims in (False, True):
                check(mx.logsumexp(view, axis=axis, keepdims=keepdims), xv, name, device, axis,
                      keepdims)


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16"])
def test_gpu_row_classes(name, rng, device):
    """Row lengths of each GPU kernel: a warp per row up to 1024 (exact multiples of 32 and
    ragged), a block per row past it, and long rows split across blocks when there are few
    (16384 and longer, up to 64 rows), with the chunk edges and a ragged last chunk."""
    for rows, length in [(7, 1), (7, 31), (5, 32), (3, 33), (9, 256), (3, 1000), (2, 1024),
                         (2, 1025), (3, 5000), (2, 16383), (2, 16384), (3, 16385), (1, 128256),
                         (65, 16384), (64, 20000)]:  # fmt: skip
        a, x = make(name, (rows, length), rng)
        check(mx.logsumexp(a, axis=-1, keepdims=True), x, name, device, -1, True)
    # The decode step's two forms over a (1, vocab) row of logits.
    a, x = make(name, (1, 128256), rng, high=30)
    t = tol_for(name, device)
    assert_matches(mx.logsumexp(a, keepdims=True), reference(x, None, True), name, rtol=t, atol=t)
    got = a - mx.logsumexp(a, axis=-1, keepdims=True)
    want = x.astype(np.float64) - reference(x, -1, True)
    # (two roundings at |values| near 50: the logsumexp's and the difference's)
    ulps = {"float32": 1e-5, "float16": 0.04, "bfloat16": 0.5}[name]
    assert_matches(got, want, name, rtol=t, atol=ulps)


@pytest.mark.parametrize("name", FLOATS)
@pytest.mark.parametrize("length", [3, 40, 1500, 40000])
def test_special_rows(name, length, device):
    """NaN anywhere gives NaN, an infinite max gives that max (all -inf: -inf), -inf adds
    nothing; in every kernel class (the specials at the start, middle and end of the row)."""
    inf, nan = np.inf, np.nan
    specials = [[nan], [inf], [-inf] * length, [inf, -inf], [nan, inf], [nan, -inf],
                [inf, inf], [-inf, 0.0], [1e4, -1e4]]  # fmt: skip
    rows = []
    for s in specials:
        for where in (0, length // 2, length - len(s)):
            r = np.linspace(-3, 3, length)
            if s == [-inf] * length:
                r[:] = -inf
            else:
                r[where:where + len(s)] = s
            rows.append(r)
    x = np.stack(rows)
    a = mx.array(x, dtype=dt(name))
    xn = to_np(a).astype(np.float64)
    for axis, keepdims in [(-1, False), (-1, True)]:
        check(mx.logsumexp(a, axis=axis, keepdims=keepdims), xn, name, device, axis, keepdims)
    # The same rows transposed: the reduced axis is the first.
    check(mx.logsumexp(a.T, axis=0), xn.T, name, device, 0)
    got = to_np(mx.logsumexp(a, axis=-1)).astype(np.float64)
    want = to_np(composed(a, axis=-1)).astype(np.float64)
    special = ~np.isfinite(want)
    np.testing.assert_array_equal(got[special], want[special])


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16"])
def test_half_floats_accumulate_in_float32(name, device):
    """Many equal terms: a half-float sum would stall; the float32 sum rounds once."""
    a = mx.zeros((2, 40000), dtype=dt(name))
    out = to_np(mx.logsumexp(a, axis=-1)).astype(np.float64)
    np.testing.assert_allclose(out, np.log(40000.0), rtol=TOL[name])


def test_integers_and_errors():
    assert mx.logsumexp(mx.array([1, 2, 3]), axis=0).dtype == mx.float32
    assert mx.logsumexp(mx.array([True, False])).dtype == mx.float32
    assert mx.logsumexp(mx.array(3.0)).item() == 3.0
    assert mx.logsumexp(mx.array(3.0), keepdims=True).shape == ()
    with pytest.raises(ValueError, match="Received empty array"):
        mx.logsumexp(mx.zeros((2, 0)), axis=1)
    with pytest.raises(IndexError):
        mx.logsumexp(mx.zeros((2, 3)), axis=2)
    # Several axes and complex64 keep the composition.
    x = np.random.default_rng(0).standard_normal((3, 4, 5)).astype(np.float32)
    want = reference(x.transpose(1, 0, 2).reshape(4, -1), -1)
    assert_matches(mx.logsumexp(mx.array(x), axis=(0, 2)), want)
    z = mx.array(np.array([1 + 1j, 2 - 1j], dtype=np.complex64))
    assert mx.logsumexp(z).dtype == mx.complex64


def dot_graph(*outputs):
    buf = io.StringIO()
    mx.export_to_dot(buf, *outputs)
    return buf.getvalue()


def test_records_one_primitive():
    x = mx.array(np.ones((4, 9), dtype=np.float32))
    for kw in [dict(axis=-1), dict(axis=0, keepdims=True), dict()]:
        g = dot_graph(mx.logsumexp(x, **kw))
        assert g.count('"LogSumExp"') == 1, g
        for op in ("Exp", "Log", "Max", "Sum", "Select"):
            assert f'"{op}"' not in g, (op, g)
    g = dot_graph(mx.logsumexp(x.reshape(2, 2, 9), axis=(0, 2)))
    assert '"LogSumExp"' not in g and '"Exp"' in g


# ---------------------------------------------------------------------------------------
# Transforms
# ---------------------------------------------------------------------------------------


def f64(x):
    return mx.array(x, dtype=mx.float64)


def central_differences(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[i] += eps
        down[i] -= eps
        g[i] = (f(f64(up)).item() - f(f64(down)).item()) / (2 * eps)
    return g


@pytest.mark.parametrize("axis,keepdims", [(-1, False), (0, True), (1, False), (None, False),
                                           (None, True)])  # fmt: skip
def test_grad_matches_central_differences(axis, keepdims):
    x = np.random.default_rng(1).standard_normal((3, 4)) * 2
    w = np.random.default_rng(2).standard_normal(reference(x, axis, keepdims).shape)

    def loss(a):
        return (mx.square(mx.logsumexp(a, axis=axis, keepdims=keepdims)) * f64(w)).sum()

    def loss_composed(a):
        return (mx.square(composed(a, axis=axis, keepdims=keepdims)) * f64(w)).sum()

    with mx.stream(mx.cpu):
        g = np.array(mx.grad(loss)(f64(x)))
        np.testing.assert_allclose(g, central_differences(loss, x), rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(g, np.array(mx.grad(loss_composed)(f64(x))), rtol=1e-12,
                                   atol=1e-14)
        # Second order: the output feeds the rule, and stays differentiable.
        def inner(a):
            return (mx.grad(lambda b: mx.logsumexp(b, axis=axis).sum())(a) * f64(x)).sum()

        def inner_composed(a):
            return (mx.grad(lambda b: composed(b, axis=axis).sum())(a) * f64(x)).sum()

        np.testing.assert_allclose(np.array(mx.grad(inner)(f64(x))),
                                   np.array(mx.grad(inner_composed)(f64(x))), rtol=1e-10,
                                   atol=1e-12)  # fmt: skip


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16"])
def test_grad_vjp_jvp_against_the_composition(name, rng, device):
    a, x = make(name, (5, 300), rng)
    t = tol_for(name, device) * 4
    for axis in (-1, 0, None):
        g = mx.grad(lambda v: mx.logsumexp(v, axis=axis).sum())(a)
        gc = mx.grad(lambda v: composed(v.astype(mx.float32), axis=axis).sum())(a)
        assert g.dtype == a.dtype
        assert_matches(g, to_np(gc).astype(np.float64), name, rtol=t, atol=t)
        tangent = mx.array(rng.standard_normal((5, 300)).astype(np.float32)).astype(a.dtype)
        _, (jv,) = mx.jvp(lambda v: mx.logsumexp(v, axis=axis), [a], [tangent])
        _, (jc,) = mx.jvp(lambda v: composed(v.astype(mx.float32), axis=axis),
                          [a], [tangent])  # fmt: skip
        assert jv.dtype == a.dtype
        assert_matches(jv, to_np(jc).astype(np.float64), name, rtol=t * 4, atol=t * 4)


def test_grad_of_special_rows():
    """Finite rows with -inf entries: those entries get no gradient."""
    x = mx.array([[0.0, -np.inf, 1.0], [2.0, 2.0, -np.inf]])
    g = np.array(mx.grad(lambda v: mx.logsumexp(v, axis=-1).sum())(x))
    e = np.exp(np.array([[0.0, -np.inf, 1.0], [2.0, 2.0, -np.inf]]))
    np.testing.assert_allclose(g, e / e.sum(-1, keepdims=True), rtol=1e-6)


@pytest.mark.parametrize("in_axes", [0, 1, 2])
def test_vmap_matches_a_loop(in_axes, rng, device):
    a, x = make("float32", (4, 5, 6), rng)
    t = tol_for("float32", device)
    for axis, keepdims in [(-1, False), (0, True), (None, False)]:
        f = mx.vmap(lambda v: mx.logsumexp(v, axis=axis, keepdims=keepdims), in_axes=in_axes)
        xs = np.moveaxis(x, in_axes, 0)
        want = np.stack([reference(r, axis, keepdims) for r in xs])
        assert_matches(f(a), want, "float32", rtol=t, atol=t)


@pytest.mark.parametrize("shapeless", [False, True])
def test_inside_compile(shapeless, rng, device):
    def log_probs(logits):
        return logits - mx.logsumexp(logits, axis=-1, keepdims=True)

    def whole(logits):
        return mx.logsumexp(logits, keepdims=True)

    t = tol_for("float32", device)
    cl, cw = mx.compile(log_probs, shapeless=shapeless), mx.compile(whole, shapeless=shapeless)
    for shape in [(1, 1000), (3, 1000)] if shapeless else [(2, 700)]:
        a, x = make("float32", shape, rng)
        assert_matches(cl(a), x - reference(x, -1, True), "float32", rtol=t, atol=t)
        assert_matches(cw(a), reference(x, None, True), "float32", rtol=t, atol=t)
    g = mx.compile(mx.grad(lambda v: mx.logsumexp(v, axis=-1).sum()))(a)
    e = np.exp(x - x.max(-1, keepdims=True))
    assert_matches(g, e / e.sum(-1, keepdims=True), "float32", rtol=t * 4, atol=t)


# ---------------------------------------------------------------------------------------
# MLX
# ---------------------------------------------------------------------------------------


def test_same_as_mlx():
    rows = ("[[1.0, 2.0, 3.0], [nan, 1.0, 2.0], [inf, 1.0, -inf], [-inf, -inf, -inf], "
            "[nan, inf, 0.0], [1e4, -1e4, 0.0]]")
    exprs = []
    for dtype in ("float32", "float16", "bfloat16", "float64"):
        x = f"mx.array({rows}, dtype=mx.{dtype})"
        for kw in ("axis=-1", "axis=0", "axis=1, keepdims=True", "", "keepdims=True",
                   "axis=(0, 1)", "axis=-3", "axis=()"):  # fmt: skip
            exprs.append(f"mx.logsumexp({x}, {kw})")
        exprs.append(f"mx.logsumexp({x}.T, axis=-1)")
        exprs.append(f"{x} - mx.logsumexp({x}, axis=-1, keepdims=True)")
    exprs += [
        "mx.logsumexp(mx.arange(40000, dtype=mx.float32).reshape(2, -1) / 1000, axis=-1)",
        "mx.logsumexp(mx.array([1, 2, 3]), axis=0)",
        "mx.logsumexp(mx.array(2.0))",
        "mx.logsumexp(mx.zeros((2, 0)), axis=1)",
        "mx.grad(lambda v: mx.logsumexp(v, axis=-1).sum())(mx.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]))",
        "mx.grad(lambda v: mx.logsumexp(v, axis=0).sum())(mx.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]))",
        "mx.jvp(lambda v: mx.logsumexp(v, axis=-1), [mx.array([[1.0, 2.0, 3.0]])], [mx.array([[1.0, -1.0, 2.0]])])[1][0]",
        "mx.vmap(lambda v: mx.logsumexp(v, axis=-1))(mx.array([[[1.0, 2.0], [3.0, 4.0]]]))",
        "mx.compile(lambda v: mx.logsumexp(v, axis=-1, keepdims=True))(mx.array([[1.0, 2.0, 3.0]]))",
    ]  # fmt: skip
    assert_same_as_mlx(exprs)
