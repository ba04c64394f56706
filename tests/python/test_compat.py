"""mlx.core aliases and compositions (kiln/core/_compat.py) against numpy."""

import math

import numpy as np
import pytest

import kiln.core as mx

rng = np.random.default_rng(5)


def test_constants_and_aliases():
    assert mx.pi == math.pi and mx.e == math.e and mx.newaxis is None and math.isinf(mx.inf)
    x = mx.array([0.25, 0.5])
    for alias, name in [("acos", "arccos"), ("asin", "arcsin"), ("atan", "arctan"), ("atanh", "arctanh")]:
        assert getattr(mx, alias)(x).tolist() == getattr(mx, name)(x).tolist()
    assert mx.concat([x, x]).shape == (4,) and mx.pow(x, 2).tolist() == [0.0625, 0.25]
    assert mx.permute_dims(mx.zeros((2, 3)), (1, 0)).shape == (3, 2)


@pytest.mark.parametrize("shape", [(), (3,), (2, 3), (2, 3, 4)])
def test_atleast(shape):
    a = np.ones(shape, dtype=np.float32)
    for n in (1, 2, 3):
        assert getattr(mx, f"atleast_{n}d")(mx.array(a)).shape == getattr(np, f"atleast_{n}d")(a).shape


def test_compositions_match_numpy():
    a = rng.standard_normal((3, 4)).astype(np.float32)
    x = mx.array(a)
    np.testing.assert_allclose(np.array(mx.flip(x)), np.flip(a))
    np.testing.assert_allclose(np.array(mx.flip(x, axis=1)), np.flip(a, axis=1))
    np.testing.assert_allclose(np.array(mx.trunc(x)), np.trunc(a))
    np.testing.assert_allclose(np.array(mx.diff(x, n=2, axis=1)), np.diff(a, n=2, axis=1), rtol=1e-5)
    np.testing.assert_allclose(np.array(mx.trace(x)), np.trace(a), rtol=1e-5)
    np.testing.assert_allclose(np.array(mx.degrees(x)), np.degrees(a), rtol=1e-5)
    np.testing.assert_allclose(np.array(mx.radians(x)), np.radians(a), rtol=1e-5)
    np.testing.assert_allclose(np.array(mx.kron(x[:2, :2], x[1:, 2:])), np.kron(a[:2, :2], a[1:, 2:]), rtol=1e-5)
    np.testing.assert_allclose(np.array(mx.vecdot(x, x)), (a * a).sum(-1), rtol=1e-5)
    np.testing.assert_allclose(np.array(mx.matrix_transpose(x)), a.T)
    assert [u.shape for u in mx.unstack(x, axis=1)] == [(3,)] * 4
    assert mx.logical_xor(mx.array([True, False]), mx.array([True, True])).tolist() == [False, True]
    assert mx.broadcast_shapes((3, 1), (4,), ()) == (3, 4)
    with pytest.raises(ValueError):
        mx.broadcast_shapes((3,), (4,))
    assert mx.empty((2, 2)).shape == (2, 2) and mx.asarray(x) is not x and mx.asarray(x).tolist() == x.tolist()


@pytest.mark.parametrize("name", ["hanning", "hamming", "blackman", "bartlett"])
@pytest.mark.parametrize("m", [0, 1, 5, 8])
def test_windows(name, m):
    np.testing.assert_allclose(np.array(getattr(mx, name)(m)), getattr(np, name)(m), atol=1e-6)


def test_result_type_and_misc():
    assert mx.result_type(mx.int8, 1.0) == mx.float32
    assert mx.result_type(mx.zeros(2, dtype=mx.uint8), mx.int8) == mx.int16
    assert mx.get_memory_limit() > 0
    x = mx.ones((2,)) * 2
    mx.async_eval(x)
    mx.synchronize()
    assert x.tolist() == [2.0, 2.0]


def test_inplace_operators_rebind_every_reference():
    a = mx.array([1, 2])
    b = a
    a += 1
    assert b.tolist() == [2, 3]
    a *= a
    assert a.tolist() == [4, 9] and b.tolist() == [4, 9]
    f = mx.array([1.0, 2.0])
    f /= 2
    f @= mx.eye(2)
    assert f.tolist() == [0.5, 1.0] and (+f).tolist() == [0.5, 1.0]
    i = mx.array([6, 7])
    i //= 2
    i %= 2
    i <<= 1
    i |= 1
    assert i.tolist() == [3, 3]
    with pytest.raises(ValueError):  # as MLX: operators take no strings, lists or tuples
        i += "a"
