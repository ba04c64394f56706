"""kiln.core.random: threefry keys give MLX's numbers (reference values printed by MLX
0.32.4)."""

import kiln.core as mx
import kiln.core.random as kr
import numpy as np
import pytest


def test_submodule_import_styles():
    assert mx.random is kr
    assert mx.random.key is kr.key


def test_key_and_split():
    assert mx.random.key(0).tolist() == [0, 0]
    assert mx.random.key(2**40 + 5).tolist() == [256, 5]
    assert mx.random.key(0).dtype == mx.uint32
    assert mx.random.split(mx.random.key(0)).tolist() == [
        [4146024105, 967050713],
        [2718843009, 1272950319],
    ]
    assert mx.random.split(mx.random.key(0), 3).shape == (3, 2)


def test_uniform_matches_mlx():
    u = mx.random.uniform(key=mx.random.key(0), shape=(4,))
    assert u.dtype == mx.float32
    assert u.tolist() == [
        0.9653214812278748,
        0.22515903413295746,
        0.6330299973487854,
        0.2963818311691284,
    ]


def test_normal_matches_mlx():
    n = mx.random.normal(key=mx.random.key(0), shape=(4,))
    expected = [1.8160871267318726, -0.7548847794532776, 0.339889258146286, -0.5348353385925293]
    np.testing.assert_allclose(n.tolist(), expected, rtol=0, atol=1e-5)


def test_uniform_bounds_dtypes_and_arrays():
    k = mx.random.key(7)
    assert mx.random.uniform(-2, 3, (3,), key=k).tolist() == [
        -0.8750768899917603,
        0.13080215454101562,
        0.26804685592651367,
    ]
    assert mx.random.uniform(shape=(2,), dtype=mx.float16, key=k).tolist() == [
        0.04541015625,
        0.94580078125,
    ]
    assert mx.random.uniform(shape=(3,), key=mx.random.key(2**40 + 5)).tolist() == [
        0.6026660203933716,
        0.04818463698029518,
        0.7558345198631287,
    ]
    for d in (mx.float16, mx.bfloat16, mx.float32, mx.float64):
        u = mx.random.uniform(shape=(1000,), dtype=d, key=k)
        assert u.dtype == d
        x = np.asarray(u.astype(mx.float32))
        assert x.min() >= 0 and x.max() < 1 and 0.4 < x.mean() < 0.6
    lo = mx.array([0.0, 10.0]).reshape(2, 1)
    u = np.asarray(mx.random.uniform(lo, lo + 1, (2, 50), key=k))
    assert (u[0] < 1).all() and (u[1] >= 10).all()
    with pytest.raises(ValueError, match=r"\[uniform\].*broadcast"):
        mx.random.uniform(lo, 1, (4,), key=k)
    with pytest.raises(ValueError, match=r"\[uniform\]"):
        mx.random.uniform(shape=(2,), dtype=mx.int32)


def test_normal_loc_scale():
    k = mx.random.key(3)
    base = np.asarray(mx.random.normal((5,), key=k))
    np.testing.assert_allclose(
        np.asarray(mx.random.normal((5,), key=k, loc=2.0, scale=3.0)), 2 + 3 * base, rtol=1e-6
    )
    loc = mx.array([1.0, -1.0])
    out = np.asarray(mx.random.normal((2, 2), key=k, loc=loc, scale=3.0))
    base = np.asarray(mx.random.normal((2, 2), key=k))
    np.testing.assert_allclose(out, np.array([1.0, -1.0]) + 3 * base, rtol=1e-6)


def test_bits():
    k = mx.random.key(0)
    assert mx.random.bits((2,), key=k).dtype == mx.uint32
    assert mx.random.bits((2,), width=1, key=k).dtype == mx.uint8
    assert mx.random.bits((2,), width=8, key=k).dtype == mx.uint64
    assert mx.random.bits((2,), key=k).tolist() == mx.random.bits((2,), key=k).tolist()


def test_seed_makes_global_state_reproducible():
    mx.random.seed(4)
    a = mx.random.uniform(shape=(3,)).tolist()
    b = mx.random.uniform(shape=(3,)).tolist()
    mx.random.seed(4)
    assert mx.random.uniform(shape=(3,)).tolist() == a and a != b


def test_key_validation():
    with pytest.raises(ValueError, match=r"\[random\]"):
        mx.random.uniform(shape=(2,), key=mx.array([1, 2, 3], dtype=mx.uint32))
