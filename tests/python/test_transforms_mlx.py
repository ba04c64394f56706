"""Gradients and vmap of the heavier primitives against MLX (skipped without MLX):
conv with every parameter, scans (ties and zeros), sort, scatter max/min, masked scatter,
and vmap of gathers and scatters. Expressions run with ``mx`` bound to each library."""

import numpy as np
import pytest

from mlx_parity import assert_same_as_mlx

pytest.importorskip("mlx.core")

X = "mx.array(np.linspace(-1, 1, {n}).reshape({shape}).astype(np.float32) ** 3)"


def arr(*shape):
    return X.format(n=int(np.prod(shape)), shape=shape).replace("np.", "__import__('numpy').")


GRADS = [
    f"mx.grad(lambda x, w: (mx.conv1d(x, w, stride=2, padding=1, dilation=2, groups=2) ** 2).sum(), argnums={a})({arr(2, 9, 4)}, {arr(6, 3, 2)})"
    for a in (0, 1)
] + [
    f"mx.grad(lambda x, w: (mx.conv_general(x, w, stride=[1, 2], padding=([1, 0], [0, 2]), kernel_dilation=[1, 2], input_dilation=[2, 1], flip=True) ** 2).sum(), argnums={a})({arr(1, 4, 5, 2)}, {arr(3, 2, 2, 2)})"
    for a in (0, 1)
] + [
    f"mx.grad(lambda x, w: (mx.conv_transpose2d(x, w, stride=2, padding=1) ** 2).sum(), argnums={a})({arr(1, 3, 3, 2)}, {arr(2, 3, 3, 2)})"
    for a in (0, 1)
] + [
    f"mx.grad(lambda x: (mx.{op}(x, axis=1, reverse={rev}) * mx.arange(6)).sum())(mx.array([[1., 3, 3, 0, 3, 0.5], [0, 2, 0, 1, 1, 1]]))"
    for op in ("cummax", "cummin", "cumprod", "cumsum", "logcumsumexp") for rev in (False, True)
] + [
    "mx.grad(lambda x: (mx.cumprod(x, axis=0, inclusive=False) * mx.arange(3)).sum())(mx.array([2., 0, 3]))",
    "mx.grad(lambda x: (mx.sort(x, axis=1) * mx.arange(6)).sum())(mx.array([[1., 3, 3, 2, 3, 0.5]]))",
    f"mx.grad(lambda x: (mx.topk(x, 2) ** 2).sum())({arr(3, 5)})",
] + [
    f"mx.grad(lambda x, v: x.at[mx.array([0, 0, 2])].{op}(v).sum(), argnums={a})(mx.array([1., 5, 3, 2]), mx.array([4., 2, 1]))"
    for op in ("maximum", "minimum") for a in (0, 1)
] + [
    f"mx.grad(lambda x, v: (mx.where(x > 0, x, 0) + x.at[mx.array([1, 3])].add(v) * x).sum(), argnums={a})(mx.array([1., -5, 3, 2]), mx.array([4., 2]))"
    for a in (0, 1)
] + [
    f"mx.grad(lambda x: (mx.as_strided(x, (3, 3), (2, 1), 1) ** 2).sum())({arr(3, 4)})",
    f"mx.grad(lambda x: mx.take_along_axis(x, mx.array([[2, 0, 0]]), axis=1).sum())({arr(3, 4)})",
    "mx.grad(lambda x: x.at[mx.array([0, 0])].multiply(2.0).sum())(mx.array([1., 2]))",
    f"mx.grad(lambda a: mx.linalg.lu(a, stream=mx.cpu)[1].sum())({arr(3, 3)})",
]

VMAPS = [
    f"mx.vmap(lambda x, i: mx.take(x, i, axis=0))({arr(3, 4, 5)}, mx.array([[0, 3], [2, 2], [1, 0]]))",
    f"mx.vmap(lambda x, i: x[i, 1:], in_axes=(None, 0))({arr(4, 4)}, mx.array([[0, 3], [2, 2], [1, 0]]))",
    f"mx.vmap(lambda x, i: x.at[i].add(1.0))({arr(3, 4, 2)}, mx.array([[0, 0], [2, 3], [1, 1]]))",
    f"mx.vmap(lambda x, v: x.at[mx.array([1, 3])].maximum(v), in_axes=(0, 1))({arr(3, 4)}, {arr(2, 3)})",
    f"mx.vmap(lambda x, i: mx.put_along_axis(x, i, mx.array(9.0), axis=0))({arr(3, 4, 2)}, mx.array([[[1]], [[0]], [[3]]]))",
    f"mx.vmap(lambda v: mx.searchsorted(mx.array([0., 1, 1, 3]), v, side='right'))({arr(3, 5)})",
    f"mx.vmap(lambda x, w: mx.conv1d(x, w, padding=1, groups=2))({arr(3, 2, 6, 4)}, {arr(3, 4, 3, 2)})",
]


def test_gradients_same_as_mlx():
    assert_same_as_mlx(GRADS)


def test_vmap_same_as_mlx():
    assert_same_as_mlx(VMAPS)
