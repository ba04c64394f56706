"""Max and average pooling over channels-last inputs (``(N, L, C)``, ``(N, H, W, C)``,
``(N, D, H, W, C)``).

Each window position is one strided slice of the padded input; the pooled value is the
max or mean over the ``prod(kernel_size)`` slices, so gradients come from the slices.
Average pooling counts padded zeros, as MLX does.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple, Union

import kiln.core as mx
from kiln.nn.layers.base import Module

IntOrTuple = Union[int, Tuple[int, ...]]


def _ntuple(v, n: int, name: str) -> tuple:
    t = (v,) * n if isinstance(v, int) else tuple(v)
    if len(t) != n or any(not isinstance(i, int) for i in t):
        raise ValueError(f"[{name}] expected an int or a tuple of {n} ints, got {v}.")
    return t


class _Pool(Module):
    _n = 0
    _max = True

    def __init__(
        self, kernel_size: IntOrTuple, stride: Optional[IntOrTuple] = None, padding: IntOrTuple = 0
    ):
        super().__init__()
        n = self._n
        name = type(self).__name__
        self._kernel = _ntuple(kernel_size, n, name)
        self._stride = _ntuple(stride, n, name) if stride is not None else self._kernel
        self._padding = _ntuple(padding, n, name)
        if any(k < 1 for k in self._kernel) or any(s < 1 for s in self._stride):
            raise ValueError(f"[{name}] kernel_size and stride must be positive.")
        if any(p < 0 for p in self._padding):
            raise ValueError(f"[{name}] 'padding' must be non-negative but got {self._padding}.")

    def _extra_repr(self) -> str:
        return f"kernel_size={self._kernel}, stride={self._stride}, padding={self._padding}"

    def __call__(self, x: mx.array) -> mx.array:
        n = self._n
        if x.ndim != n + 2:
            raise ValueError(
                f"[{type(self).__name__}] expected a {n + 2}-D channels-last input, got {x.ndim}-D."
            )
        if any(self._padding):
            fill = -math.inf if self._max else 0
            if self._max and not mx.issubdtype(x.dtype, mx.floating):
                fill = mx.iinfo(x.dtype).min
            pads = [(0, 0)] + [(p, p) for p in self._padding] + [(0, 0)]
            x = mx.pad(x, pads, constant_values=fill)
        spatial = x.shape[1:-1]
        out = [(s - k) // st + 1 for s, k, st in zip(spatial, self._kernel, self._stride)]
        if any(o < 1 for o in out):
            raise ValueError(f"[{type(self).__name__}] the kernel is larger than the padded input.")
        acc = None
        for offset in _offsets(self._kernel):
            idx = (slice(None),) + tuple(
                slice(o, o + st * (m - 1) + 1, st) for o, st, m in zip(offset, self._stride, out)
            )
            window = x[idx]
            if acc is None:
                acc = window
            else:
                acc = mx.maximum(acc, window) if self._max else acc + window
        if not self._max:
            acc = acc / math.prod(self._kernel)
        return acc


def _offsets(kernel: tuple):
    """Every index inside a kernel window, in row-major order."""
    idx = [()]
    for k in kernel:
        idx = [i + (j,) for i in idx for j in range(k)]
    return idx


class MaxPool1d(_Pool):
    """Max over windows of ``kernel_size`` along the length of ``(N, L, C)`` inputs
    (``stride`` defaults to ``kernel_size``; ``padding`` with ``-inf``)."""

    _n, _max = 1, True


class MaxPool2d(_Pool):
    """Max over ``kernel_size`` windows of ``(N, H, W, C)`` inputs."""

    _n, _max = 2, True


class AvgPool1d(_Pool):
    """Mean over windows of ``kernel_size`` along the length of ``(N, L, C)`` inputs
    (zero padding counts in the mean)."""

    _n, _max = 1, False


class AvgPool2d(_Pool):
    """Mean over ``kernel_size`` windows of ``(N, H, W, C)`` inputs."""

    _n, _max = 2, False


class MaxPool3d(_Pool):
    """Max over ``kernel_size`` windows of ``(N, D, H, W, C)`` inputs."""

    _n, _max = 3, True


class AvgPool3d(_Pool):
    """Mean over ``kernel_size`` windows of ``(N, D, H, W, C)`` inputs."""

    _n, _max = 3, False
