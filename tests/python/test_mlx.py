"""Direct comparisons with MLX, when it is installed (skipped otherwise: CI may lack it).
The same expression runs against both modules."""

import kiln.core as kx
import numpy as np
import pytest
from conftest import ALL

mlx = pytest.importorskip("mlx.core")

EXPRESSIONS = [
    "mx.array([[1.5, 2], [3, 4]])",
    "mx.arange(1000)",
    "mx.arange(30).reshape(5, 6) / 7",
    "mx.arange(3 * 7 * 9).reshape(3, 7, 9).astype(mx.float16) * 0.1",
    "mx.array([1e-3, 1e3, 1e7, -2.5e-7, 0.0])",
    "mx.array([[1, -2], [3, 4]], dtype=mx.int64)",
    "mx.array([1.0 / 3, 2.0 / 3], dtype=mx.bfloat16)",
    "mx.zeros((3, 0, 2))",
    "mx.array([True, False, True]).reshape(3, 1)",
    "mx.array(2**40)",
    "mx.array([1, 2**40])",
    "mx.array([mx.array([1.5]), mx.array([2])])",
    "mx.arange(24).reshape(2, 3, 4)[..., ::-2]",
    "mx.arange(24).reshape(2, 3, 4).transpose(2, 0, 1)",
    "mx.arange(10)[2:8:3]",
    "mx.array([1, 2], dtype=mx.int8) * 3",
    "mx.array([1, 2], dtype=mx.uint8) * 1.5",
    "mx.array([True]) + 1",
    "mx.sum(mx.array([1, 2], dtype=mx.int8))",
    "mx.mean(mx.arange(5))",
    "mx.argmax(mx.array([[1, 5], [7, 2]]), axis=1)",
    "mx.exp(mx.arange(4))",
    "mx.where(mx.array([True, False]), 1, 2.5)",
    "mx.full((2, 2), 1, mx.int8)",
    "mx.arange(0, 1, 0.25)",
    "mx.concatenate([mx.array([1]), mx.array([2.5])])",
    "mx.random.uniform(shape=(3, 2), key=mx.random.key(11))",
    "mx.random.split(mx.random.key(5), 4)",
]


def run(module, expression):
    return eval(expression, {"mx": module})


def canonical(text):
    return text.replace("mlx.core", "kiln.core")


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_repr_same_as_mlx(expression):
    assert repr(run(kx, expression)) == canonical(repr(run(mlx, expression)))


@pytest.mark.parametrize("op", ["add", "divide", "less", "maximum"])
def test_promotion_same_as_mlx(op):
    for a in ALL:
        for b in ALL:
            k = getattr(kx, op)(kx.zeros((1,), getattr(kx, a)), kx.zeros((1,), getattr(kx, b)))
            m = getattr(mlx, op)(mlx.zeros((1,), getattr(mlx, a)), mlx.zeros((1,), getattr(mlx, b)))
            assert canonical(str(k.dtype)) == canonical(str(m.dtype)), (op, a, b)


# MLX silently overflows these two (kiln raises "would result in overflow").
MLX_QUIRKS = {("bool_", 2**40), ("uint64", -1)}


def test_weak_scalars_same_as_mlx():
    for name in ALL:
        for s in [True, 1, -1, 1.5, 300, 2**40]:
            if (name, s) in MLX_QUIRKS:
                continue
            try:
                m = canonical(str((mlx.zeros((1,), getattr(mlx, name)) + s).dtype))
            except ValueError:
                m = "overflow"
            try:
                k = str((kx.zeros((1,), getattr(kx, name)) + s).dtype)
            except ValueError:
                k = "overflow"
            assert k == m, (name, s)


@pytest.mark.parametrize("seed", [0, 1, 42, 2**33 + 7])
@pytest.mark.parametrize("shape", [(1,), (5,), (2, 3), (1001,)], ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_uniform_same_as_mlx(seed, shape, dtype):
    k = kx.random.uniform(shape=shape, dtype=getattr(kx, dtype), key=kx.random.key(seed))
    m = mlx.random.uniform(shape=shape, dtype=getattr(mlx, dtype), key=mlx.random.key(seed))
    assert k.astype(kx.float32).tolist() == m.astype(mlx.float32).tolist()


@pytest.mark.parametrize("seed", [0, 3, 42])
@pytest.mark.parametrize("shape", [(4,), (3, 3), (101,)], ids=str)
def test_normal_same_as_mlx(seed, shape):
    k = kx.random.normal(shape=shape, key=kx.random.key(seed))
    m = mlx.random.normal(shape=shape, key=mlx.random.key(seed))
    np.testing.assert_allclose(np.array(k), np.array(m), rtol=1e-5, atol=1e-5)


def test_split_same_as_mlx():
    for seed in [0, 9, 2**40]:
        k = kx.random.split(kx.random.key(seed), 5).tolist()
        assert k == mlx.random.split(mlx.random.key(seed), 5).tolist()


def test_elementwise_values_same_as_mlx():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    y = rng.standard_normal((5,)).astype(np.float32)
    for op in ["add", "multiply", "divide", "maximum", "power", "greater"]:
        k = np.array(getattr(kx, op)(kx.array(x), kx.array(y)))
        m = np.array(getattr(mlx, op)(mlx.array(x), mlx.array(y)))
        np.testing.assert_allclose(k, m, rtol=1e-6, equal_nan=True)
    for op in ["exp", "log", "sqrt", "sin", "tanh", "sigmoid", "erf", "abs", "negative"]:
        k = np.array(getattr(kx, op)(kx.array(x)))
        m = np.array(getattr(mlx, op)(mlx.array(x)))
        np.testing.assert_allclose(k, m, rtol=2e-6, atol=1e-7, equal_nan=True)
