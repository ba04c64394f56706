"""Dropout layers: zero elements (or whole channels) with probability ``p`` in training
mode and scale the rest by ``1 / (1 - p)``; identity in evaluation mode."""

from __future__ import annotations

import kiln.core as mx
from kiln.nn.layers.base import Module


class Dropout(Module):
    """Zeroes each element with probability ``p`` while training."""

    _name = "dropout"

    def __init__(self, p: float = 0.5):
        super().__init__()
        if p < 0 or p >= 1:
            raise ValueError(f"The dropout probability {p} is not in [0, 1)")
        self._p = p
        self._p_1 = 1 - p

    def _extra_repr(self) -> str:
        return f"p={self._p}"

    def _mask_shape(self, x: mx.array) -> tuple:
        return tuple(x.shape)

    def __call__(self, x: mx.array) -> mx.array:
        if self._p_1 == 1 or not self.training:
            return x
        keep = mx.random.bernoulli(self._p_1, self._mask_shape(x))
        return (keep * x) * (1 / self._p_1)


class Dropout2d(Dropout):
    """Zeroes whole channels of ``(N, H, W, C)`` or ``(H, W, C)`` inputs with probability
    ``p`` while training."""

    def _mask_shape(self, x: mx.array) -> tuple:
        if x.ndim not in (3, 4):
            raise ValueError(
                f"Received input with {x.ndim} dimensions. Expected 3 or 4 dimensions."
            )
        s = list(x.shape)
        s[-2] = s[-3] = 1
        return tuple(s)


class Dropout3d(Dropout):
    """Zeroes whole channels of ``(N, D, H, W, C)`` or ``(D, H, W, C)`` inputs with
    probability ``p`` while training."""

    def _mask_shape(self, x: mx.array) -> tuple:
        if x.ndim not in (4, 5):
            raise ValueError(
                f"Received input with {x.ndim} dimensions. Expected 4 or 5 dimensions."
            )
        s = list(x.shape)
        s[-2] = s[-3] = s[-4] = 1
        return tuple(s)
