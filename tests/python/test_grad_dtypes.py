"""Gradients and tangents across dtypes as MLX defines them (issue 22): an integer input's
gradient is the rule's value in the input's dtype (not zero), gradients flow through casts
to integers, comparisons have zero tangents of the tangents' float dtype, and the exponent
partial of a ** b is 0 where the power is 0."""

import numpy as np
import pytest

import kiln.core as mx

CASES = [
    ("grad through an int cast", lambda m: m.grad(lambda x: (x.astype(m.int32) * 2).astype(m.float32).sum())(m.array([1.5, 2.5]))),
    ("grad of an int input", lambda m: m.grad(lambda x: (x * x).sum())(m.array([1, 2]))),
    ("vjp of an int input", lambda m: m.vjp(lambda x: x * 2, [m.array([1, 2])], [m.array([1, 1])])[1][0]),
    ("floor_divide of ints", lambda m: m.grad(lambda x: (x // 2).astype(m.float32).sum())(m.array([3, 4]))),
    ("division of ints", lambda m: m.grad(lambda x: (x / 2).sum())(m.array([3, 4]))),
    ("masked by a comparison", lambda m: m.grad(lambda x: (x * (x > 2)).sum())(m.array([1.5, 2.5]))),
    ("jvp of a comparison", lambda m: m.jvp(lambda x: x > 1, [m.array([1.0, 2.0])], [m.array([1.0, 1.0])])[1][0]),
    ("jvp of a half comparison", lambda m: m.jvp(lambda x: x > 1, [m.array([1.0, 2.0], dtype=m.float16)], [m.array([1.0, 1.0], dtype=m.float16)])[1][0]),
    ("jvp of an int product", lambda m: m.jvp(lambda x: x * 2, [m.array([1, 2])], [m.array([1, 1])])[1][0]),
    ("exponent at base 0", lambda m: m.grad(lambda y: m.array(0.0) ** y)(m.array(2.0))),
    ("exponents at base 0", lambda m: m.grad(lambda y: (m.array([0.0, 0.0]) ** y).sum())(m.array([2.0, 0.0]))),
    ("jvp exponent at base 0", lambda m: m.jvp(lambda y: m.array([0.0, 0.0]) ** y, [m.array([2.0, 0.0])], [m.array([1.0, 1.0])])[1][0]),
    ("x ** x", lambda m: m.grad(lambda x: (x ** x).sum())(m.array([0.5, 2.0]))),
]


def _value(m, fn):
    out = fn(m)
    return np.array(out).tolist(), str(out.dtype).split(".")[-1]


@pytest.mark.parametrize("name,fn", CASES, ids=[c[0] for c in CASES])
def test_matches_mlx(name, fn):
    mlx = pytest.importorskip("mlx.core")
    got, want = _value(mx, fn), _value(mlx, fn)
    assert got[1] == want[1]
    np.testing.assert_allclose(np.array(got[0], dtype=np.float64), np.array(want[0], dtype=np.float64), rtol=1e-6)


def test_values_without_mlx():
    assert mx.grad(lambda x: (x * x).sum())(mx.array([1, 2])).tolist() == [2, 4]
    t = mx.jvp(lambda x: x > 1, [mx.array([1.0, 2.0])], [mx.array([1.0, 1.0])])[1][0]
    assert t.dtype == mx.float32 and t.tolist() == [0.0, 0.0]
    assert mx.grad(lambda y: mx.array(0.0) ** y)(mx.array(2.0)).item() == 0.0
