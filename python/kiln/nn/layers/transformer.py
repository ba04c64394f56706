"""Attention and Transformer layers (as ``mlx.nn``'s: pre-norm by default, ReLU MLP)."""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

import kiln.core as mx
from kiln.nn.layers import _fast
from kiln.nn.layers.activations import relu
from kiln.nn.layers.base import Module
from kiln.nn.layers.dropout import Dropout
from kiln.nn.layers.linear import Linear
from kiln.nn.layers.normalization import LayerNorm


class MultiHeadAttention(Module):
    """Multi-head scaled dot-product attention with query, key, value and output
    projections. ``mask`` is added to the scores (additive or boolean, or "causal")."""

    def __init__(
        self,
        dims: int,
        num_heads: int,
        query_input_dims: Optional[int] = None,
        key_input_dims: Optional[int] = None,
        value_input_dims: Optional[int] = None,
        value_dims: Optional[int] = None,
        value_output_dims: Optional[int] = None,
        bias: bool = False,
    ):
        super().__init__()
        if dims % num_heads:
            raise ValueError(
                "The input feature dimensions should be divisible by the "
                f"number of heads ({dims} % {num_heads}) != 0"
            )
        query_input_dims = query_input_dims or dims
        key_input_dims = key_input_dims or dims
        value_input_dims = value_input_dims or key_input_dims
        value_dims = value_dims or dims
        value_output_dims = value_output_dims or dims
        self.num_heads = num_heads
        self.query_proj = Linear(query_input_dims, dims, bias=bias)
        self.key_proj = Linear(key_input_dims, dims, bias=bias)
        self.value_proj = Linear(value_input_dims, value_dims, bias=bias)
        self.out_proj = Linear(value_dims, value_output_dims, bias=bias)

    def __call__(
        self, queries: mx.array, keys: mx.array, values: mx.array, mask: Any = None
    ) -> mx.array:
        q, k, v = self.query_proj(queries), self.key_proj(keys), self.value_proj(values)
        h = self.num_heads
        B, L, _ = q.shape
        S = k.shape[1]
        q = q.reshape(B, L, h, -1).transpose(0, 2, 1, 3)
        k = k.reshape(B, S, h, -1).transpose(0, 2, 1, 3)
        v = v.reshape(B, S, h, -1).transpose(0, 2, 1, 3)
        out = _fast.scaled_dot_product_attention(
            q, k, v, scale=math.sqrt(1 / q.shape[-1]), mask=mask
        )
        return self.out_proj(out.transpose(0, 2, 1, 3).reshape(B, L, -1))

    @staticmethod
    def create_additive_causal_mask(N: int, dtype: mx.Dtype = mx.float32) -> mx.array:
        """An ``(N, N)`` mask: 0 on and below the diagonal, the dtype's lowest value above."""
        i = mx.arange(N)
        return (i[:, None] < i[None]).astype(dtype) * mx.finfo(dtype).min


class TransformerEncoderLayer(Module):
    """Self-attention and an MLP (``mlp_dims``, default ``4 * dims``), each with a residual
    connection and LayerNorm before (``norm_first``) or after."""

    def __init__(
        self,
        dims: int,
        num_heads: int,
        mlp_dims: Optional[int] = None,
        dropout: float = 0.0,
        activation: Callable[[Any], Any] = relu,
        norm_first: bool = True,
    ):
        super().__init__()
        mlp_dims = mlp_dims or dims * 4
        self.attention = MultiHeadAttention(dims, num_heads)
        self.ln1 = LayerNorm(dims)
        self.ln2 = LayerNorm(dims)
        self.linear1 = Linear(dims, mlp_dims)
        self.linear2 = Linear(mlp_dims, dims)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.activation = activation
        self.norm_first = norm_first

    def __call__(self, x: mx.array, mask: Any) -> mx.array:
        if self.norm_first:
            y = self.ln1(x)
            x = x + self.dropout1(self.attention(y, y, y, mask))
            y = self.linear1(self.ln2(x))
            return x + self.linear2(self.dropout2(self.activation(y)))
        x = self.ln1(x + self.dropout1(self.attention(x, x, x, mask)))
        y = self.linear2(self.dropout2(self.activation(self.linear1(x))))
        return self.ln2(x + y)


class TransformerDecoderLayer(Module):
    """Self-attention, cross-attention over ``memory`` and an MLP, each with a residual
    connection and LayerNorm before (``norm_first``) or after."""

    def __init__(
        self,
        dims: int,
        num_heads: int,
        mlp_dims: Optional[int] = None,
        dropout: float = 0.0,
        activation: Callable[[Any], Any] = relu,
        norm_first: bool = True,
    ):
        super().__init__()
        mlp_dims = mlp_dims or dims * 4
        self.self_attention = MultiHeadAttention(dims, num_heads)
        self.cross_attention = MultiHeadAttention(dims, num_heads)
        self.ln1 = LayerNorm(dims)
        self.ln2 = LayerNorm(dims)
        self.ln3 = LayerNorm(dims)
        self.linear1 = Linear(dims, mlp_dims)
        self.linear2 = Linear(mlp_dims, dims)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)
        self.activation = activation
        self.norm_first = norm_first

    def __call__(self, x: mx.array, memory: mx.array, x_mask: Any, memory_mask: Any) -> mx.array:
        if self.norm_first:
            y = self.ln1(x)
            x = x + self.dropout1(self.self_attention(y, y, y, x_mask))
            y = self.ln2(x)
            x = x + self.dropout2(self.cross_attention(y, memory, memory, memory_mask))
            y = self.linear1(self.ln3(x))
            return x + self.linear2(self.dropout3(self.activation(y)))
        x = self.ln1(x + self.dropout1(self.self_attention(x, x, x, x_mask)))
        x = self.ln2(x + self.dropout2(self.cross_attention(x, memory, memory, memory_mask)))
        y = self.linear2(self.dropout3(self.activation(self.linear1(x))))
        return self.ln3(x + y)


def _maybe_checkpoint(layer: Module, on: bool) -> Callable:
    if not on:
        return layer
    from kiln.nn.utils import checkpoint

    return checkpoint(layer)


class TransformerEncoder(Module):
    """``num_layers`` :class:`TransformerEncoderLayer` followed by a LayerNorm
    (``checkpoint`` recomputes each layer's activations in the backward pass)."""

    def __init__(
        self,
        num_layers: int,
        dims: int,
        num_heads: int,
        mlp_dims: Optional[int] = None,
        dropout: float = 0.0,
        activation: Callable[[Any], Any] = relu,
        norm_first: bool = True,
        checkpoint: bool = False,
    ):
        super().__init__()
        self.layers = [
            TransformerEncoderLayer(dims, num_heads, mlp_dims, dropout, activation, norm_first)
            for _ in range(num_layers)
        ]
        self.ln = LayerNorm(dims)
        self.checkpoint = checkpoint

    def __call__(self, x: mx.array, mask: Any) -> mx.array:
        for layer in self.layers:
            x = _maybe_checkpoint(layer, self.checkpoint)(x, mask)
        return self.ln(x)


class TransformerDecoder(Module):
    """``num_layers`` :class:`TransformerDecoderLayer` followed by a LayerNorm."""

    def __init__(
        self,
        num_layers: int,
        dims: int,
        num_heads: int,
        mlp_dims: Optional[int] = None,
        dropout: float = 0.0,
        activation: Callable[[Any], Any] = relu,
        norm_first: bool = True,
        checkpoint: bool = False,
    ):
        super().__init__()
        self.layers = [
            TransformerDecoderLayer(dims, num_heads, mlp_dims, dropout, activation, norm_first)
            for _ in range(num_layers)
        ]
        self.ln = LayerNorm(dims)
        self.checkpoint = checkpoint

    def __call__(self, x: mx.array, memory: mx.array, x_mask: Any, memory_mask: Any) -> mx.array:
        for layer in self.layers:
            x = _maybe_checkpoint(layer, self.checkpoint)(x, memory, x_mask, memory_mask)
        return self.ln(x)


class Transformer(Module):
    """An encoder-decoder Transformer: ``decoder(tgt, encoder(src, src_mask), tgt_mask,
    memory_mask)``."""

    def __init__(
        self,
        dims: int = 512,
        num_heads: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        mlp_dims: Optional[int] = None,
        dropout: float = 0.0,
        activation: Callable[[Any], Any] = relu,
        custom_encoder: Optional[Any] = None,
        custom_decoder: Optional[Any] = None,
        norm_first: bool = True,
        checkpoint: bool = False,
    ):
        super().__init__()
        self.encoder = custom_encoder or TransformerEncoder(
            num_encoder_layers,
            dims,
            num_heads,
            mlp_dims,
            dropout,
            activation,
            norm_first,
            checkpoint,
        )
        self.decoder = custom_decoder or TransformerDecoder(
            num_decoder_layers,
            dims,
            num_heads,
            mlp_dims,
            dropout,
            activation,
            norm_first,
            checkpoint,
        )

    def __call__(
        self, src: mx.array, tgt: mx.array, src_mask: Any, tgt_mask: Any, memory_mask: Any
    ) -> mx.array:
        return self.decoder(tgt, self.encoder(src, src_mask), tgt_mask, memory_mask)
