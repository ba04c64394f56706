"""Embedding: a lookup table of vectors."""

from __future__ import annotations

import math
from typing import Optional

import kiln.core as mx
from kiln.nn.layers.base import Module


class Embedding(Module):
    """Maps integer ids to rows of a ``(num_embeddings, dims)`` table drawn from
    ``N(0, 1/dims)``; :meth:`as_linear` uses the table as an output projection."""

    def __init__(self, num_embeddings: int, dims: int):
        super().__init__()
        scale = math.sqrt(1.0 / dims)
        self.weight = mx.random.normal(shape=(num_embeddings, dims), scale=scale)

    def _extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, {self.weight.shape[1]}"

    def __call__(self, x: mx.array) -> mx.array:
        return self["weight"][x]

    def as_linear(self, x: mx.array) -> mx.array:
        """``x @ weight.T``: scores against every embedding (weight tying)."""
        return x @ self["weight"].T

    def to_quantized(
        self,
        group_size: Optional[int] = None,
        bits: Optional[int] = None,
        mode: str = "affine",
        quantize_input: bool = False,
    ) -> Module:
        """A :class:`QuantizedEmbedding` approximating this layer."""
        if quantize_input:
            raise ValueError("Quantized input is not supported.")
        from kiln.nn.layers.quantized import QuantizedEmbedding

        return QuantizedEmbedding.from_embedding(self, group_size, bits, mode)
