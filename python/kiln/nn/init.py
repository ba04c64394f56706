"""Parameter initializers (as ``mlx.nn.init``): each function returns an initializer
``init(a) -> array`` that draws a new array with ``a``'s shape, e.g.
``linear.weight = nn.init.glorot_uniform()(linear.weight)``."""

from __future__ import annotations

import math
from typing import Callable, Literal

import kiln.core as mx


def constant(value: float, dtype: mx.Dtype = mx.float32) -> Callable[[mx.array], mx.array]:
    """Fills with ``value``."""

    def initializer(a: mx.array) -> mx.array:
        return mx.full(a.shape, value, dtype=dtype)

    return initializer


def normal(
    mean: float = 0.0, std: float = 1.0, dtype: mx.Dtype = mx.float32
) -> Callable[[mx.array], mx.array]:
    """Draws from ``N(mean, std**2)``."""

    def initializer(a: mx.array) -> mx.array:
        return mx.random.normal(shape=a.shape, scale=std, loc=mean, dtype=dtype)

    return initializer


def uniform(
    low: float = 0.0, high: float = 1.0, dtype: mx.Dtype = mx.float32
) -> Callable[[mx.array], mx.array]:
    """Draws from ``U(low, high)``."""

    def initializer(a: mx.array) -> mx.array:
        return mx.random.uniform(low, high, a.shape, dtype=dtype)

    return initializer


def identity(dtype: mx.Dtype = mx.float32) -> Callable[[mx.array], mx.array]:
    """The identity matrix (square 2-D arrays only)."""

    def initializer(a: mx.array) -> mx.array:
        if a.ndim != 2 or a.shape[0] != a.shape[1]:
            raise ValueError(
                f"The input array must be a square matrix but got shape {tuple(a.shape)}."
            )
        return mx.eye(a.shape[0], dtype=dtype)

    return initializer


def _fans(x: mx.array) -> tuple:
    """(fan_in, fan_out) of a ``(out, ..., in)`` weight: the kernel's middle axes count
    towards both."""
    if x.ndim < 2:
        raise ValueError(
            "Glorot / He initialization requires at least 2 dimensional input"
            f" but input with {x.ndim} dimensions."
        )
    receptive = math.prod(x.shape[1:-1]) if x.ndim > 2 else 1
    return x.shape[-1] * receptive, x.shape[0] * receptive


def glorot_normal(dtype: mx.Dtype = mx.float32) -> Callable[[mx.array, float], mx.array]:
    """Draws from ``N(0, gain**2 * 2 / (fan_in + fan_out))``."""

    def initializer(a: mx.array, gain: float = 1.0) -> mx.array:
        fan_in, fan_out = _fans(a)
        std = gain * math.sqrt(2.0 / (fan_in + fan_out))
        return mx.random.normal(shape=a.shape, dtype=dtype) * std

    return initializer


def glorot_uniform(dtype: mx.Dtype = mx.float32) -> Callable[[mx.array, float], mx.array]:
    """Draws from ``U(-l, l)``, ``l = gain * sqrt(6 / (fan_in + fan_out))``."""

    def initializer(a: mx.array, gain: float = 1.0) -> mx.array:
        fan_in, fan_out = _fans(a)
        limit = gain * math.sqrt(6.0 / (fan_in + fan_out))
        return mx.random.uniform(-limit, limit, a.shape, dtype=dtype)

    return initializer


def _fan(a: mx.array, mode: str) -> int:
    fan_in, fan_out = _fans(a)
    if mode == "fan_in":
        return fan_in
    if mode == "fan_out":
        return fan_out
    raise ValueError(f"Invalid mode: {mode}. Valid modes are: fan_in, fan_out")


def he_normal(dtype: mx.Dtype = mx.float32) -> Callable[[mx.array, str, float], mx.array]:
    """Draws from ``N(0, gain**2 / fan)`` with ``fan`` the fan-in or fan-out (``mode``)."""

    def initializer(
        a: mx.array, mode: Literal["fan_in", "fan_out"] = "fan_in", gain: float = 1.0
    ) -> mx.array:
        std = gain / math.sqrt(_fan(a, mode))
        return mx.random.normal(shape=a.shape, dtype=dtype) * std

    return initializer


def he_uniform(dtype: mx.Dtype = mx.float32) -> Callable[[mx.array, str, float], mx.array]:
    """Draws from ``U(-l, l)``, ``l = gain * sqrt(3 / fan)``."""

    def initializer(
        a: mx.array, mode: Literal["fan_in", "fan_out"] = "fan_in", gain: float = 1.0
    ) -> mx.array:
        limit = gain * math.sqrt(3.0 / _fan(a, mode))
        return mx.random.uniform(-limit, limit, a.shape, dtype=dtype)

    return initializer


def sparse(
    sparsity: float, mean: float = 0.0, std: float = 1.0, dtype: mx.Dtype = mx.float32
) -> Callable[[mx.array], mx.array]:
    """A 2-D normal ``N(mean, std**2)`` array with ``ceil(sparsity * columns)`` random
    zeros in every row."""

    def initializer(a: mx.array) -> mx.array:
        if a.ndim != 2:
            raise ValueError("Only tensors with 2 dimensions are supported")
        zeros = math.ceil(sparsity * a.shape[1])
        order = mx.argsort(mx.random.uniform(shape=a.shape), axis=1)
        w = mx.random.normal(shape=a.shape, scale=std, loc=mean, dtype=dtype)
        drop = mx.put_along_axis(
            mx.zeros(a.shape, mx.bool_), order[:, :zeros], mx.array(True), axis=1
        )
        return mx.where(drop, mx.zeros_like(w), w)

    return initializer


def orthogonal(gain: float = 1.0, dtype: mx.Dtype = mx.float32) -> Callable[[mx.array], mx.array]:
    """A (semi-)orthogonal 2-D array times ``gain``: rows orthonormal when there are
    fewer rows than columns, else columns."""

    def initializer(a: mx.array) -> mx.array:
        if a.ndim != 2:
            raise ValueError(
                f"Orthogonal initialization requires a 2D array but got a {a.ndim}D array."
            )
        rows, cols = a.shape
        n = max(rows, cols)
        q, r = mx.linalg.qr(mx.random.normal(shape=(n, n)), stream=mx.cpu)
        # Fix the signs so the result is uniformly distributed over orthogonal matrices.
        q = q * mx.sign(mx.diag(r))
        q = q[:rows, :cols]
        return (gain * q).astype(dtype)

    return initializer
