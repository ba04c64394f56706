"""kiln.core.random: threefry keys give MLX's numbers (reference values printed by MLX
0.32.4)."""

import zlib

import kiln.core as mx
import kiln.core.random as kr
import numpy as np
import pytest
from test_ops import _erfinv


def test_submodule_import_styles():
    assert mx.random is kr
    assert mx.random.key is kr.key


def test_key_and_split(device):
    assert mx.random.key(0).tolist() == [0, 0]
    assert mx.random.key(2**40 + 5).tolist() == [256, 5]
    assert mx.random.key(0).dtype == mx.uint32
    assert mx.random.split(mx.random.key(0)).tolist() == [
        [4146024105, 967050713],
        [2718843009, 1272950319],
    ]
    assert mx.random.split(mx.random.key(0), 3).shape == (3, 2)


def test_uniform_matches_mlx(device):
    u = mx.random.uniform(key=mx.random.key(0), shape=(4,))
    assert u.dtype == mx.float32
    assert u.tolist() == [
        0.9653214812278748,
        0.22515903413295746,
        0.6330299973487854,
        0.2963818311691284,
    ]


def test_normal_matches_mlx(device):
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


def test_normal_loc_scale(device):
    k = mx.random.key(3)
    base = np.asarray(mx.random.normal((5,), key=k))
    np.testing.assert_allclose(
        np.asarray(mx.random.normal((5,), key=k, loc=2.0, scale=3.0)), 2 + 3 * base, rtol=1e-6
    )
    loc = mx.array([1.0, -1.0])
    out = np.asarray(mx.random.normal((2, 2), key=k, loc=loc, scale=3.0))
    base = np.asarray(mx.random.normal((2, 2), key=k))
    np.testing.assert_allclose(out, np.array([1.0, -1.0]) + 3 * base, rtol=1e-6)


def test_bits(device):
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


def test_more_distributions_match_mlx_numbers(device):
    k = mx.random.key(0)
    assert mx.random.randint(0, 10, (6,), key=k).tolist() == [5, 0, 7, 8, 5, 4]
    r8 = mx.random.randint(-5, 5, (4,), dtype=mx.int8, key=k)
    assert r8.dtype == mx.int8 and r8.tolist() == [4, -3, 1, -3]
    assert mx.random.bernoulli(0.5, (6,), key=k).tolist() == [False, True, False, False, False, True]
    np.testing.assert_allclose(mx.random.gumbel((3,), key=k).tolist(),
                               [3.3440396785736084, -0.14513324201107025, 0.7825523614883423], rtol=1e-5)
    np.testing.assert_allclose(mx.random.laplace((3,), key=k).tolist(),
                               [-2.6684885025024414, 0.4630463123321533, -0.3093280792236328], rtol=1e-5)
    np.testing.assert_allclose(mx.random.truncated_normal(-1, 1, (3,), key=k).tolist(),
                               [0.9065213799476624, -0.32263678312301636, 0.2296501249074936], rtol=1e-5)
    logits = mx.array([[0.0, 1.0, 2.0], [2.0, 1.0, 0.0]])
    assert mx.random.categorical(logits, key=k).tolist() == [2, 0]
    assert mx.random.permutation(6, key=k).tolist() == [1, 5, 0, 4, 2, 3]


def test_distribution_statistics_and_shapes():
    k = mx.random.key(3)
    r = np.array(mx.random.randint(2, 7, (4000,), key=k))
    assert r.min() == 2 and r.max() == 6
    b = np.array(mx.random.bernoulli(mx.array([0.1, 0.9]), (2000, 2), key=k))
    assert abs(b[:, 0].mean() - 0.1) < 0.03 and abs(b[:, 1].mean() - 0.9) < 0.03
    t = np.array(mx.random.truncated_normal(-0.5, 1.5, (4000,), key=k))
    assert t.min() >= -0.5 and t.max() <= 1.5
    lp = np.array(mx.random.laplace((8000,), loc=1.0, scale=2.0, key=k))
    assert abs(np.median(lp) - 1.0) < 0.15 and abs(np.abs(lp - 1.0).mean() - 2.0) < 0.15
    c = np.array(mx.random.categorical(mx.log(mx.array([0.2, 0.8])), num_samples=4000, key=k))
    assert c.shape == (4000,) and abs(c.mean() - 0.8) < 0.03
    x = mx.arange(12).reshape(3, 4)
    p = mx.random.permutation(x, axis=1, key=k)
    assert sorted(np.array(p)[0].tolist()) == [0, 1, 2, 3] and p.shape == (3, 4)
    with pytest.raises(ValueError, match=r"\[randint\]"):
        mx.random.randint(0, 5, (2,), dtype=mx.float32)


# ---------------------------------------------------------------------------------------
# The same numbers on every device: the bits (by their crc32, as the CPU draws MLX's), and
# uniform and normal samples as the documented transforms of those bits
# ---------------------------------------------------------------------------------------

BITS_SHAPES = [(7,), (3, 5), (0,), (1000, 3), (2, 2, 2)]
BITS_CRC32 = {  # mx.random.bits(shape, width, key=mx.random.key(1234))
    ((7,), 4): 2109493494, ((7,), 1): 3137512868, ((7,), 2): 1839316396,
    ((3, 5), 4): 2842675124, ((3, 5), 1): 6474701, ((3, 5), 2): 3998013172,
    ((0,), 4): 0, ((0,), 1): 0, ((0,), 2): 0,
    ((1000, 3), 4): 4093317059, ((1000, 3), 1): 3682544680, ((1000, 3), 2): 3460051001,
    ((2, 2, 2), 4): 2209506711, ((2, 2, 2), 1): 1054482190, ((2, 2, 2), 2): 3400911409,
}  # fmt: skip


def crc(a):
    return zlib.crc32(np.ascontiguousarray(np.array(a)).tobytes())


def uniform_of_bits(bits, low=0.0, high=1.0):
    """kiln's (MLX's) uniform in float32: bits / (2^32 - 1), kept below 1, scaled."""
    unit = np.minimum(bits.astype(np.float32) / np.float32(4294967295.0),
                      np.uint32(0x3F7FFFFF).view(np.float32))
    lo = np.float32(low)
    return (np.float32(high) - lo) * unit + lo


@pytest.mark.parametrize("shape", BITS_SHAPES, ids=str)
@pytest.mark.parametrize("width", [4, 1, 2])
def test_bits_are_the_same_on_every_device(shape, width, device):
    b = mx.random.bits(shape, width=width, key=mx.random.key(1234))
    assert b.dtype == {4: mx.uint32, 1: mx.uint8, 2: mx.uint16}[width]
    assert crc(b) == BITS_CRC32[(shape, width)]


@pytest.mark.parametrize("shape", BITS_SHAPES, ids=str)
@pytest.mark.parametrize("name", ["float32", "bfloat16"])
def test_uniform_and_normal_follow_the_bits(shape, name, device):
    key = mx.random.key(1234)
    bits = np.array(mx.random.bits(shape, key=key))
    assert crc(bits) == BITS_CRC32[(shape, 4)]
    np.testing.assert_array_equal(np.array(mx.random.uniform(shape=shape, key=key)),
                                  uniform_of_bits(bits))
    # normal: sqrt(2) erfinv(u) of uniforms in (-1, 1), then rounded to the dtype.
    u = uniform_of_bits(bits, np.uint32(0xBF7FFFFF).view(np.float32), 1.0)
    want = np.sqrt(2) * _erfinv(u.astype(np.float64))
    got = mx.random.normal(shape, dtype=getattr(mx, name), key=key)
    tol = 1e-5 if name == "float32" else 1.6e-2
    np.testing.assert_allclose(np.array(got.astype(mx.float32)), want, rtol=tol, atol=tol)
    # A split key's draws.
    k1 = mx.random.split(key, 3)[1]
    np.testing.assert_array_equal(
        np.array(mx.random.uniform(shape=(3,) + shape[:1], key=k1)),
        uniform_of_bits(np.array(mx.random.bits((3,) + shape[:1], key=k1))))


def test_uniform_of_another_key(device):
    key = mx.random.key(3)
    bits = mx.random.bits((100,), key=key)
    assert crc(bits) == 973733746
    np.testing.assert_array_equal(np.array(mx.random.uniform(shape=(100,), key=key)),
                                  uniform_of_bits(np.array(bits)))
