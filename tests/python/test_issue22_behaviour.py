"""Issue 22, "Different results": the Python-side fixes (nn.step at the threshold, half
precision InstanceNorm, the norm layers' eps / num_groups checks, log_softmax and
cross_entropy for large logits, async_eval inside a transform, stop_gradient's argument),
checked against numpy and, where installed, MLX 0.32.4."""

import numpy as np
import pytest

import kiln.core as mx
import kiln.nn as nn


def _np(a):
    return np.array(a.astype(mx.float32))


# ---- nn.step ------------------------------------------------------------------------------


def test_step_is_one_at_the_threshold():
    x = mx.array([-1.0, 0.0, 0.5, 1.0])
    assert nn.step(x).tolist() == [0, 1, 1, 1]
    assert nn.step(x, 0.5).tolist() == [0, 0, 1, 1]
    assert nn.step(mx.array([0, 1, 2]), 1).tolist() == [0, 1, 1]
    assert nn.step(x).dtype == mx.int32
    assert nn.Step()(x).tolist() == [0, 1, 1, 1]


# ---- log_softmax / cross_entropy ----------------------------------------------------------


@pytest.mark.parametrize("big", [1e3, 1e5, 1e6, 3e7])
def test_log_softmax_keeps_differences_of_large_logits(big):
    offsets = np.array([0.0, 1.0, 2.0, -5.0])
    x = np.float32(big) + offsets.astype(np.float32)
    s = x.astype(np.float64) - x.max()
    want = s - np.log(np.exp(s).sum())
    got = np.array(nn.log_softmax(mx.array(x[None]))[0])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    ce = nn.losses.cross_entropy(mx.array(x[None]), mx.array([1])).item()
    assert abs(ce + want[1]) < 1e-5


def test_log_softmax_half_precision_large_logits():
    x = mx.array([[1e4, 1e4]], dtype=mx.float16)
    y = nn.log_softmax(x)
    assert y.dtype == mx.float16
    np.testing.assert_allclose(_np(y), -np.log(2.0), rtol=1e-3)


def test_log_softmax_integers_and_infinities():
    y = nn.log_softmax(mx.array([[1, 2]]))
    assert y.dtype == mx.float32
    np.testing.assert_allclose(np.array(y), [[-1.3132616, -0.3132617]], rtol=1e-6)
    assert np.isnan(np.array(nn.log_softmax(mx.array([[np.inf, 0.0]])))).all()
    assert np.array(nn.log_softmax(mx.array([[-np.inf, 0.0]]))).tolist() == [[-np.inf, 0.0]]


def test_cross_entropy_probabilities_not_summing_to_one():
    # Taken from the shifted logits (as MLX): lse(s) - sum(s * t) with s = logits - max.
    logits, t = np.array([[1.0, 2.0, 5.0]]), np.array([[2.0, 0.0, 1.0]])
    s = logits - logits.max()
    want = np.log(np.exp(s).sum()) - (s * t).sum()
    got = nn.losses.cross_entropy(mx.array(logits), mx.array(t)).item()
    assert abs(got - want) < 1e-5


def test_log_softmax_gradient():
    x = mx.array([[1.0, 2.0, 3.0], [4.0, 5.0, 7.0]])
    g = mx.grad(lambda x: nn.log_softmax(x)[0, 1])(x)
    p = np.exp(np.array(x[0])) / np.exp(np.array(x[0])).sum()
    want = -p
    want[1] += 1
    np.testing.assert_allclose(np.array(g)[0], want, rtol=1e-5, atol=1e-6)
    assert np.array(g)[1].tolist() == [0, 0, 0]


# ---- InstanceNorm in half precision ---------------------------------------------------------


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16])
def test_instance_norm_half_is_normalised_in_float32(dtype):
    rng = np.random.default_rng(0)
    xn = (rng.standard_normal((2, 16, 16, 3)) * 3 + 100).astype(np.float32)
    x = mx.array(xn).astype(dtype)
    y = nn.InstanceNorm(3)(x)
    assert y.dtype == dtype
    xs = _np(x).astype(np.float64)
    want = (xs - xs.mean((1, 2), keepdims=True)) / np.sqrt(xs.var((1, 2), keepdims=True) + 1e-5)
    tol = 2e-3 if dtype == mx.float16 else 1.6e-2
    np.testing.assert_allclose(_np(y), want, rtol=tol, atol=tol)
    assert nn.InstanceNorm(3, affine=True)(x).dtype == mx.float32


# ---- norm layer checks ---------------------------------------------------------------------

_NORMS = [
    lambda eps: nn.LayerNorm(8, eps=eps),
    lambda eps: nn.RMSNorm(8, eps=eps),
    lambda eps: nn.InstanceNorm(8, eps=eps),
    lambda eps: nn.BatchNorm(8, eps=eps),
    lambda eps: nn.GroupNorm(2, 8, eps=eps),
]


@pytest.mark.parametrize("make", _NORMS)
@pytest.mark.parametrize("eps", [0, -1e-5, -1.0])
def test_norms_reject_non_positive_eps(make, eps):
    with pytest.raises(ValueError, match="'eps' must be positive"):
        make(eps)


@pytest.mark.parametrize("make", _NORMS)
def test_norms_reject_non_number_eps(make):
    with pytest.raises(TypeError):
        make(None)


@pytest.mark.parametrize("groups", [0, -1, -2])
def test_group_norm_rejects_non_positive_groups(groups):
    with pytest.raises(ValueError, match=r"number of groups \(-?\d+\) must be a positive"):
        nn.GroupNorm(groups, 8)


def test_group_norm_checks_features():
    with pytest.raises(ValueError, match=r"number of features \(0\) must be a positive"):
        nn.GroupNorm(2, 0)
    with pytest.raises(ValueError, match="evenly divisible"):
        nn.GroupNorm(3, 8)
    assert nn.GroupNorm(8, 8)(mx.ones((1, 2, 8))).shape == (1, 2, 8)


# ---- async_eval and stop_gradient ------------------------------------------------------------


@pytest.mark.parametrize("transform", ["grad", "vmap", "compile"])
def test_async_eval_refused_inside_a_transform(transform):
    def f(x):
        y = x * 2
        mx.async_eval(y)
        return y.sum()

    wrapped = {"grad": mx.grad(f), "vmap": mx.vmap(f), "compile": mx.compile(f)}[transform]
    with pytest.raises(ValueError, match="async_eval"):
        wrapped(mx.ones((2, 2)) if transform == "vmap" else mx.ones((2,)))
    y = mx.ones((2,)) * 3
    mx.async_eval(y, [y, {"a": y}], 1)  # outside a transform: fine
    assert y.tolist() == [3, 3]


@pytest.mark.parametrize("bad", [[1.0, 2.0], 1.0, None, "a", {"a": 1}, np.ones(2)])
def test_stop_gradient_takes_arrays_only(bad):
    with pytest.raises(TypeError):
        mx.stop_gradient(bad)
    assert mx.stop_gradient(mx.array([1.0])).tolist() == [1.0]


# ---- against MLX ----------------------------------------------------------------------------


def test_against_mlx():
    m = pytest.importorskip("mlx.core")
    mn = pytest.importorskip("mlx.nn")
    rng = np.random.default_rng(1)
    xn = (rng.standard_normal((64, 50)) * 4).astype(np.float32)
    halves = ((m.float16, mx.float16), (m.bfloat16, mx.bfloat16))
    for md, kd in halves + ((m.float32, mx.float32),):
        want = np.array(mn.log_softmax(m.array(xn).astype(md)).astype(m.float32))
        got = _np(nn.log_softmax(mx.array(xn).astype(kd)))
        if kd == mx.float32:
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=4e-6)
        else:  # half precision: bit for bit
            np.testing.assert_array_equal(got, want)
    t = np.abs(rng.standard_normal((64, 50))).astype(np.float32)
    big = xn + 1e6
    for logits, targets, ls in ((big, np.arange(64) % 50, 0.0), (big, t, 0.0),
                                (xn, np.arange(64) % 50, 0.3), (xn, t, 0.2)):
        want = np.array(mn.losses.cross_entropy(m.array(logits), m.array(targets),
                                                label_smoothing=ls))
        got = np.array(nn.losses.cross_entropy(mx.array(logits), mx.array(targets),
                                               label_smoothing=ls))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    xh = (rng.standard_normal((2, 7, 5, 3)) * 3 + 100).astype(np.float32)
    for md, kd in halves:
        want = np.array(mn.InstanceNorm(3)(m.array(xh).astype(md)).astype(m.float32))
        np.testing.assert_array_equal(_np(nn.InstanceNorm(3)(mx.array(xh).astype(kd))), want)
    x = np.array([-1.0, 0.0, 2.0], np.float32)
    assert nn.step(mx.array(x)).tolist() == mn.step(m.array(x)).tolist()
    for make_k, make_m in ((lambda: nn.LayerNorm(4, eps=0), lambda: mn.LayerNorm(4, eps=0)),
                           (lambda: nn.GroupNorm(0, 4), lambda: mn.GroupNorm(0, 4)),
                           (lambda: nn.GroupNorm(3, 4), lambda: mn.GroupNorm(3, 4))):
        with pytest.raises(ValueError) as ek:
            make_k()
        with pytest.raises(ValueError) as em:
            make_m()
        assert str(ek.value) == str(em.value)
