"""Positional encodings: RoPE and sinusoidal."""

from __future__ import annotations

import math
from typing import Optional, Union

import kiln.core as mx
from kiln.nn.layers import _fast
from kiln.nn.layers.base import Module


class RoPE(Module):
    """Rotary position embedding of the first ``dims`` features of ``(..., L, D)``
    inputs; ``traditional`` rotates consecutive pairs instead of the two halves, positions
    are ``(offset + i) * scale``, frequencies ``base ** (-2j / dims)``."""

    def __init__(
        self, dims: int, traditional: bool = False, base: float = 10000, scale: float = 1.0
    ):
        super().__init__()
        self.dims = dims
        self.traditional = traditional
        self.base = base
        self.scale = scale

    def _extra_repr(self) -> str:
        return f"{self.dims}, traditional={self.traditional}"

    def __call__(self, x: mx.array, offset: Union[int, mx.array] = 0) -> mx.array:
        return _fast.rope(
            x,
            self.dims,
            traditional=self.traditional,
            base=self.base,
            scale=self.scale,
            offset=offset,
        )


class SinusoidalPositionalEncoding(Module):
    """Sine and cosine features of positions at ``dims // 2`` frequencies spaced
    geometrically from ``max_freq`` down to ``min_freq``."""

    def __init__(
        self,
        dims: int,
        min_freq: float = 0.0001,
        max_freq: float = 1,
        scale: Optional[float] = None,
        cos_first: bool = False,
        full_turns: bool = False,
    ):
        super().__init__()
        if dims <= 0 or dims % 2:
            raise ValueError(
                f"[SinusoidalPositionalEncoding] dims must be positive and even but got {dims}."
            )
        half = dims // 2
        frac = mx.array([1.0]) if half == 1 else 1 - mx.arange(0, half) / (half - 1)
        lo, hi = math.log(min_freq), math.log(max_freq)
        self._sigmas = mx.exp(frac * (hi - lo) + lo)
        if full_turns:
            self._sigmas = self._sigmas * (2 * math.pi)
        self.scale = scale if scale is not None else (2 / dims) ** 0.5
        self.cos_first = cos_first

    def __call__(self, x: mx.array) -> mx.array:
        y = x[..., None] * self._sigmas
        parts = [mx.cos(y), mx.sin(y)] if self.cos_first else [mx.sin(y), mx.cos(y)]
        y = mx.concatenate(parts, axis=-1)
        return y * self.scale if self.scale != 1 else y


def _alibi_slopes(n: int) -> list:
    """The geometric head slopes of the ALiBi paper: ``2^(-8 i / n)`` for a power of two
    ``n``, else those of the next lower power of two plus every other one of the next
    higher."""
    if math.log2(n).is_integer():
        first = 2 ** (-8 / n)
        return [first ** (i + 1) for i in range(n)]
    low = 2 ** math.floor(math.log2(n))
    return _alibi_slopes(low) + _alibi_slopes(2 * low)[0::2][: n - low]


class ALiBi(Module):
    """Attention with linear biases: adds ``-slope_h * |i - j|`` to the scores of head
    ``h`` between query ``i`` and key ``j`` (no parameters)."""

    @staticmethod
    def create_alibi_matrix(
        q_sequence_length: int,
        k_sequence_length: int,
        num_heads: int,
        offset: int = 0,
        dtype: mx.Dtype = mx.float32,
    ) -> mx.array:
        """The ``(1, num_heads, q_sequence_length - offset, k_sequence_length)`` bias."""
        q = mx.arange(offset, q_sequence_length)
        k = mx.arange(0, k_sequence_length)
        distance = -mx.abs(q[:, None] - k[None, :])[None, None]
        return (distance * ALiBi.create_alibi_slope(num_heads, dtype)).astype(dtype)

    @staticmethod
    def create_alibi_slope(num_heads: int, dtype: mx.Dtype = mx.float32) -> mx.array:
        """The per-head slopes, shaped ``(num_heads, 1, 1)``."""
        return mx.array(_alibi_slopes(num_heads), dtype=dtype).reshape(num_heads, 1, 1)

    def __call__(
        self, attention_scores: mx.array, offset: int = 0, mask: Optional[mx.array] = None
    ) -> mx.array:
        bias = ALiBi.create_alibi_matrix(
            attention_scores.shape[-2] + offset,
            attention_scores.shape[-1],
            attention_scores.shape[1],
            offset,
            attention_scores.dtype,
        )
        if mask is not None:
            bias = bias + mask
        return attention_scores + bias
