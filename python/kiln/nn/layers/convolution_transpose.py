"""Transposed convolution layers (channels last): ConvTranspose1d, 2d and 3d."""

from __future__ import annotations

import math
from typing import Tuple, Union

import kiln.core as mx
from kiln.nn.layers.base import Module
from kiln.nn.layers.convolution import _ntuple

IntOrTuple = Union[int, Tuple[int, ...]]


class _ConvTransposeNd(Module):
    _n = 0
    _op = ""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: IntOrTuple,
        stride: IntOrTuple = 1,
        padding: IntOrTuple = 0,
        dilation: IntOrTuple = 1,
        output_padding: IntOrTuple = 0,
        bias: bool = True,
    ):
        super().__init__()
        n = self._n
        kernel = _ntuple(kernel_size, n, "kernel_size")
        scale = math.sqrt(1.0 / (in_channels * math.prod(kernel)))
        self.weight = mx.random.uniform(-scale, scale, (out_channels, *kernel, in_channels))
        if bias:
            self.bias = mx.zeros((out_channels,))
        self.stride = _ntuple(stride, n, "stride")
        self.padding = _ntuple(padding, n, "padding")
        self.dilation = _ntuple(dilation, n, "dilation")
        self.output_padding = _ntuple(output_padding, n, "output_padding")

    def _extra_repr(self) -> str:
        w = self.weight.shape
        return (
            f"{w[-1]}, {w[0]}, kernel_size={tuple(w[1:-1])}, stride={self.stride}, "
            f"padding={self.padding}, dilation={self.dilation}, "
            f"output_padding={self.output_padding}, bias={'bias' in self}"
        )

    def __call__(self, x: mx.array) -> mx.array:
        one = self._n == 1
        args = [self.stride, self.padding, self.dilation, self.output_padding]
        args = [a[0] for a in args] if one else [list(a) for a in args]
        y = getattr(mx, self._op)(x, self.weight, *args)
        if "bias" in self:
            y = y + self.bias
        return y


class ConvTranspose1d(_ConvTransposeNd):
    """1-D transposed convolution over ``(N, L, C_in)`` inputs with a ``(C_out, K, C_in)``
    weight drawn from ``U(-s, s)``, ``s = 1/sqrt(C_in K)``; the bias starts at zero."""

    _n, _op = 1, "conv_transpose1d"


class ConvTranspose2d(_ConvTransposeNd):
    """2-D transposed convolution over ``(N, H, W, C_in)`` inputs with a ``(C_out, KH, KW,
    C_in)`` weight (initialised as :class:`ConvTranspose1d`)."""

    _n, _op = 2, "conv_transpose2d"


class ConvTranspose3d(_ConvTransposeNd):
    """3-D transposed convolution over ``(N, D, H, W, C_in)`` inputs with a ``(C_out, KD, KH,
    KW, C_in)`` weight (initialised as :class:`ConvTranspose1d`)."""

    _n, _op = 3, "conv_transpose3d"
