"""Affine quantization: packed words, scales and biases equal MLX's for the same input;
dequantize and quantized_matmul against numpy references."""

import itertools

import kiln.core as mx
import numpy as np
import pytest

BITS = [1, 2, 3, 4, 5, 6, 8]
GROUPS = [32, 64, 128]


def ref_dequantize(q, s, b, group_size, bits):
    """numpy: unpack the little-endian bit stream of each row, then s * q + b."""
    q = np.asarray(q).astype(np.uint64)
    rows = q.reshape(-1, q.shape[-1])
    stream = ((rows[..., None] >> np.arange(32, dtype=np.uint64)) & 1).reshape(len(rows), -1)
    vals = stream.reshape(len(rows), -1, bits) << np.arange(bits, dtype=np.uint64)
    vals = vals.sum(-1).astype(np.float32)
    n = vals.shape[-1]
    s = np.asarray(s, dtype=np.float32).reshape(len(rows), -1, 1)
    b = np.asarray(b, dtype=np.float32).reshape(len(rows), -1, 1)
    w = s * vals.reshape(len(rows), n // group_size, group_size) + b
    return w.reshape(*q.shape[:-1], n)


@pytest.mark.parametrize("bits, group_size", list(itertools.product(BITS, GROUPS)))
def test_round_trip(bits, group_size):
    rng = np.random.default_rng(bits * 1000 + group_size)
    w = rng.normal(size=(3, 2 * group_size)).astype(np.float32)
    q, s, b = mx.quantize(mx.array(w), group_size=group_size, bits=bits)
    assert q.dtype == mx.uint32 and q.shape == (3, 2 * group_size * bits // 32)
    assert s.shape == b.shape == (3, 2) and s.dtype == mx.float32
    deq = mx.dequantize(q, s, b, group_size=group_size, bits=bits)
    np.testing.assert_allclose(np.array(deq), ref_dequantize(q, s, b, group_size, bits), rtol=1e-6, atol=1e-6)
    # each element lands within a step of its original value (MLX's rescaling of the grid
    # onto the larger endpoint can move the far endpoint by more than half a step)
    step = np.repeat(np.abs(np.array(s)), group_size, axis=-1)
    assert np.all(np.abs(np.array(deq) - w) <= step + 1e-5)


def test_defaults_shapes_and_dtypes():
    w = mx.ones((2, 3, 128), dtype=mx.float16)
    q, s, b = mx.quantize(w)  # group 64, 4 bits
    assert q.shape == (2, 3, 16) and s.shape == (2, 3, 2) and s.dtype == mx.float16
    assert mx.dequantize(q, s, b).dtype == mx.float16
    assert mx.dequantize(q, s, b, dtype=mx.float32).dtype == mx.float32
    q, s, b = mx.quantize(mx.zeros((0, 64)))
    assert q.shape == (0, 8) and s.shape == (0, 1)


@pytest.mark.parametrize(
    "call, exc",
    [
        (lambda: mx.quantize(mx.ones((64,))), ValueError),
        (lambda: mx.quantize(mx.ones((2, 48)), group_size=32), ValueError),
        (lambda: mx.quantize(mx.ones((2, 64)), group_size=16), ValueError),
        (lambda: mx.quantize(mx.ones((2, 64)), bits=7), ValueError),
        (lambda: mx.quantize(mx.ones((2, 64), dtype=mx.int32)), ValueError),
        (lambda: mx.quantize(mx.ones((2, 64)), mode="foo"), ValueError),
        (lambda: mx.dequantize(*mx.quantize(mx.ones((2, 64)))[:2]), ValueError),
        (lambda: mx.dequantize(*mx.quantize(mx.ones((2, 64))), bits=8), ValueError),
        (lambda: mx.dequantize(mx.ones((2, 8), dtype=mx.int32), mx.ones((2, 1)), mx.ones((2, 1))), ValueError),
        (lambda: mx.quantized_matmul(mx.ones((3, 63)), *mx.quantize(mx.ones((4, 64)))), ValueError),
        (lambda: mx.quantized_matmul(mx.ones((3, 64)), *mx.quantize(mx.ones((4, 64)))[:2]), ValueError),
    ],
)
def test_errors(call, exc):
    with pytest.raises(exc):
        call()


@pytest.mark.parametrize("transpose", [True, False])
@pytest.mark.parametrize("bits", [2, 4, 8])
def test_quantized_matmul(transpose, bits):
    rng = np.random.default_rng(bits)
    w = rng.normal(size=(64, 128)).astype(np.float32)
    q, s, b = mx.quantize(mx.array(w), group_size=64, bits=bits)
    dense = np.array(mx.dequantize(q, s, b, group_size=64, bits=bits))
    x = rng.normal(size=(2, 5, 128 if transpose else 64)).astype(np.float32)
    got = mx.quantized_matmul(mx.array(x), q, s, b, transpose=transpose, group_size=64, bits=bits)
    want = x @ (dense.T if transpose else dense)
    np.testing.assert_allclose(np.array(got), want, rtol=1e-4, atol=1e-4)


def test_gradient_through_dequantize():
    q, s, b = mx.quantize(mx.array(np.random.default_rng(0).normal(size=(4, 64)).astype(np.float32)))
    g = mx.grad(lambda s_: mx.dequantize(q, s_, b).sum())(s)
    assert g.shape == s.shape


mlx = pytest.importorskip("mlx.core")


@pytest.mark.parametrize("bits, group_size", list(itertools.product(BITS, GROUPS)))
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_matches_mlx(bits, group_size, dtype):
    rng = np.random.default_rng(7 * bits + group_size)
    w = rng.normal(size=(4, 2 * group_size)).astype(np.float32)
    w[0, :group_size] = 0.25  # a constant group
    w[1, :group_size] = np.abs(w[1, :group_size])  # all positive
    w[2, :group_size] = -np.abs(w[2, :group_size])  # all negative
    kq, ks, kb = mx.quantize(mx.array(w).astype(getattr(mx, dtype)), group_size=group_size, bits=bits)
    mq, ms, mb = mlx.quantize(mlx.array(w).astype(getattr(mlx, dtype)), group_size=group_size, bits=bits)
    np.testing.assert_array_equal(np.array(kq), np.array(mq))
    def kf(a):
        return np.array(a.astype(mx.float32))

    def mf(a):
        return np.array(a.astype(mlx.float32))
    np.testing.assert_array_equal(kf(ks), mf(ms))
    np.testing.assert_array_equal(kf(kb), mf(mb))
    kd = mx.dequantize(kq, ks, kb, group_size=group_size, bits=bits)
    md = mlx.dequantize(mq, ms, mb, group_size=group_size, bits=bits)
    np.testing.assert_allclose(kf(kd), mf(md), rtol=1e-2 if dtype != "float32" else 1e-6, atol=1e-6)
