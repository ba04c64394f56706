"""Shapeless compile of reductions whose result depends on the reduced size (mean, var,
std, layer-norm-like functions) and of shape ops that infer their target (squeeze,
expand_dims, flatten, reshape with -1): replayed with other shapes, they equal eager
without tracing again; a size baked in by the Python code still raises."""

import numpy as np
import pytest

import kiln.core as mx


def data(shape, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape).astype(np.float32)


def check(fn, shapes, ndim_traces=1, rtol=2e-5, atol=2e-6):
    """Calls fn compiled shapeless on each shape; every result equals eager and numpy-free
    eager's shape; one trace per distinct ndim."""
    calls = []

    def counted(*args):
        calls.append(1)
        return fn(*args)

    g = mx.compile(counted, shapeless=True)
    for i, shape in enumerate(shapes):
        x = mx.array(data(shape, i))
        got, want = g(x), fn(x)
        assert got.shape == want.shape, (shape, got.shape, want.shape)
        np.testing.assert_allclose(np.array(got), np.array(want), rtol=rtol, atol=atol)
    assert g.explain()["traces"] == ndim_traces
    assert len(calls) == ndim_traces


SHAPES_2D = [(3, 4), (5, 2), (1, 7), (6, 6)]
SHAPES_3D = [(2, 3, 4), (4, 1, 5), (3, 5, 2)]

CASES = [
    ("mean_last", lambda x: mx.mean(x, axis=-1), SHAPES_2D),
    ("mean_keepdims", lambda x: mx.mean(x, axis=-1, keepdims=True), SHAPES_2D),
    ("mean_all", lambda x: mx.mean(x), SHAPES_2D),
    ("mean_all_keepdims", lambda x: mx.mean(x, keepdims=True), SHAPES_2D),
    ("mean_tuple", lambda x: mx.mean(x, axis=(0, 2)), SHAPES_3D),
    ("mean_tuple_keepdims", lambda x: mx.mean(x, axis=(0, 2), keepdims=True), SHAPES_3D),
    ("mean_plus_one", lambda x: mx.mean(x, axis=0) * 2 + 1, SHAPES_2D),
    ("var", lambda x: mx.var(x, axis=-1), SHAPES_2D),
    ("var_ddof", lambda x: mx.var(x, axis=(0, 1), ddof=1), SHAPES_3D),
    ("std", lambda x: mx.std(x, axis=0, keepdims=True), SHAPES_2D),
    ("std_all_ddof", lambda x: mx.std(x, ddof=1), SHAPES_2D),
    ("sum", lambda x: mx.sum(x, axis=1), SHAPES_2D),
    ("max", lambda x: mx.max(x, axis=(1, 2)), SHAPES_3D),
    ("argmax", lambda x: mx.argmax(x, axis=0), SHAPES_2D),
    ("logsumexp", lambda x: mx.logsumexp(x, axis=-1), SHAPES_2D),
    ("squeeze_expand", lambda x: mx.expand_dims(mx.sum(x, axis=1), 0) + 1, SHAPES_2D),
    ("flatten", lambda x: mx.flatten(x, 1, 2) * 2, SHAPES_3D),
    ("reshape_minus_one", lambda x: x.reshape(-1) + 1, SHAPES_2D),
    ("unflatten", lambda x: mx.unflatten(x * 3, 1, (-1, 1)), SHAPES_2D),
]


@pytest.mark.parametrize("name,fn,shapes", CASES, ids=[c[0] for c in CASES])
def test_shapeless_reductions_follow_new_shapes(name, fn, shapes, device):
    check(fn, shapes)


def layer_norm(x, w, b, eps=1e-5):
    mu = mx.mean(x, axis=-1, keepdims=True)
    xc = x - mu
    return xc / mx.sqrt(mx.mean(xc * xc, axis=-1, keepdims=True) + eps) * w + b


def test_shapeless_layer_norm_like():
    calls = []

    def f(x, w, b):
        calls.append(1)
        return layer_norm(x, w, b)

    g = mx.compile(f, shapeless=True)
    for i, shape in enumerate([(4, 8), (3, 5), (7, 16), (1, 3)]):
        x, w, b = (mx.array(data(s, i + k)) for k, s in enumerate([shape, shape[-1:], shape[-1:]]))
        xn = np.array(x, dtype=np.float64)
        mu = xn.mean(-1, keepdims=True)
        want = (xn - mu) / np.sqrt(xn.var(-1, keepdims=True) + 1e-5) * np.array(w) + np.array(b)
        np.testing.assert_allclose(np.array(g(x, w, b)), want, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(np.array(g(x, w, b)), np.array(layer_norm(x, w, b)),
                                   rtol=1e-6, atol=1e-6)
    assert g.explain()["traces"] == 1 and len(calls) == 1


@pytest.mark.parametrize("dtype", [mx.float32, mx.float16, mx.bfloat16, mx.int32, mx.uint8,
                                   mx.bool_])
def test_shapeless_mean_dtypes(dtype, device):
    g = mx.compile(lambda x: mx.mean(x, axis=0), shapeless=True)
    for i, shape in enumerate([(3, 2), (9, 4), (2, 1)]):
        x = mx.array(np.abs(data(shape, i)) * 10).astype(dtype)
        got, want = g(x), mx.mean(x, axis=0)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(np.array(got.astype(mx.float32)),
                                      np.array(want.astype(mx.float32)))


def test_shapeless_mean_nan_inf_and_empty(device):
    g = mx.compile(lambda x: mx.mean(x, axis=-1), shapeless=True)
    x = mx.array(np.array([[1.0, np.nan], [np.inf, 1.0]], dtype=np.float32))
    np.testing.assert_array_equal(np.array(g(x)), [np.nan, np.inf])
    y = mx.array(np.ones((3, 5), dtype=np.float32))
    np.testing.assert_array_equal(np.array(g(y)), np.ones(3))
    empty = g(mx.zeros((0, 4)))
    assert empty.shape == (0,)
    assert g.explain()["traces"] == 1


def test_compiled_mean_at_fixed_shapes_folds_the_count():
    # Not shapeless: the count is a constant of the trace, fused as a literal.
    g = mx.compile(lambda x: mx.mean(x, axis=-1) * 2 + 1)
    x = mx.array(data((4, 6)))
    np.testing.assert_allclose(np.array(g(x)), np.array(mx.mean(x, axis=-1) * 2 + 1), rtol=1e-6)
    graph = "\n".join(g.explain()["entries"][0]["graph"])
    assert "number_of_elements" not in graph


def test_shapeless_graph_keeps_the_count_node():
    g = mx.compile(lambda x: mx.mean(x, axis=-1), shapeless=True)
    g(mx.ones((2, 3)))
    graph = "\n".join(g.explain()["entries"][0]["graph"])
    assert "number_of_elements" in graph


def test_shapeless_grad_of_mean():
    def loss(x):
        return mx.mean(mx.mean(x * x, axis=-1))

    g = mx.compile(mx.grad(loss), shapeless=True)
    for i, shape in enumerate([(3, 4), (5, 2), (2, 6)]):
        x = mx.array(data(shape, i))
        want = 2 * np.array(x) / np.prod(shape)
        np.testing.assert_allclose(np.array(g(x)), want, rtol=1e-5, atol=1e-7)
    assert g.explain()["traces"] == 1


@pytest.mark.parametrize("shapeless", [False, True])
def test_mean_under_vmap_inside_compile(shapeless):
    g = mx.compile(mx.vmap(lambda x: mx.mean(x, axis=0)), shapeless=shapeless)
    # The batch size stays that of the trace (vmap bakes it); per-example sizes change.
    for i, shape in enumerate([(3, 4, 2), (3, 5, 3), (3, 1, 4)]):
        x = mx.array(data(shape, i))
        np.testing.assert_allclose(np.array(g(x)), np.array(x).mean(axis=1), rtol=1e-5,
                                   atol=1e-6)
    assert g.explain()["traces"] == (1 if shapeless else 3)


@pytest.mark.parametrize("fn,bad", [
    (lambda x: x.reshape(2, 3) + 1, (8,)),
    (lambda x: x.reshape(3, -1) * 2, (8,)),
    (lambda x: mx.unflatten(x, 0, (2, 3)), (8,)),
])
def test_shapeless_baked_sizes_still_raise(fn, bad):
    g = mx.compile(fn, shapeless=True)
    g(mx.ones((6,)) if len(bad) == 1 else mx.ones((3, 2)))
    with pytest.raises(ValueError, match="reshape"):
        g(mx.ones(bad))
