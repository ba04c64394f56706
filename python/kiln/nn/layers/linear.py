"""Identity, Linear and Bilinear layers."""

from __future__ import annotations

import math
from typing import Any, Optional

import kiln.core as mx
from kiln.nn.layers.base import Module


class Identity(Module):
    """Returns its input; takes and ignores any constructor arguments."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__()

    def __call__(self, x: mx.array) -> mx.array:
        return x


class Linear(Module):
    """``y = x W^T + b`` with ``W`` of shape ``(output_dims, input_dims)``, both drawn
    from ``U(-1/sqrt(input_dims), 1/sqrt(input_dims))``."""

    def __init__(self, input_dims: int, output_dims: int, bias: bool = True):
        super().__init__()
        scale = math.sqrt(1.0 / input_dims)
        self.weight = mx.random.uniform(-scale, scale, (output_dims, input_dims))
        if bias:
            self.bias = mx.random.uniform(-scale, scale, (output_dims,))

    def _extra_repr(self) -> str:
        out, inp = self.weight.shape
        return f"input_dims={inp}, output_dims={out}, bias={'bias' in self}"

    def __call__(self, x: mx.array) -> mx.array:
        if "bias" in self:
            return mx.addmm(self["bias"], x, self["weight"].T)
        return x @ self["weight"].T

    def to_quantized(
        self,
        group_size: Optional[int] = None,
        bits: Optional[int] = None,
        mode: str = "affine",
        quantize_input: bool = False,
    ) -> Module:
        """A :class:`QuantizedLinear` approximating this layer (``quantize_input``: a
        ``QQLinear``, which quantizes activations too)."""
        if quantize_input:
            from kiln.nn.layers.quantized import qq_linear_from

            return qq_linear_from(self, group_size, bits, mode)
        from kiln.nn.layers.quantized import QuantizedLinear

        return QuantizedLinear.from_linear(self, group_size, bits, mode)


class Bilinear(Module):
    """``y_o = x1^T W_o x2 + b_o`` with ``W`` of shape ``(output_dims, input2_dims,
    input1_dims)``, initialised from ``U(-1/sqrt(input1_dims), 1/sqrt(input1_dims))``."""

    def __init__(self, input1_dims: int, input2_dims: int, output_dims: int, bias: bool = True):
        super().__init__()
        scale = math.sqrt(1.0 / input1_dims)
        self.weight = mx.random.uniform(-scale, scale, (output_dims, input2_dims, input1_dims))
        if bias:
            self.bias = mx.random.uniform(-scale, scale, (output_dims,))

    def _extra_repr(self) -> str:
        out, in2, in1 = self.weight.shape
        return f"input1_dims={in1}, input2_dims={in2}, output_dims={out}, bias={'bias' in self}"

    def __call__(self, x1: mx.array, x2: mx.array) -> mx.array:
        out, in2, in1 = self.weight.shape
        lead = x1.shape[:-1]
        # (N, in1) @ (in1, out*in2) gives x1^T W_o for every o; then contract with x2.
        t = (x1.reshape(-1, in1) @ self.weight.reshape(out * in2, in1).T).reshape(-1, out, in2)
        y = (t @ x2.reshape(-1, in2, 1)).reshape(*lead, out)
        if "bias" in self:
            y = y + self.bias
        return y
