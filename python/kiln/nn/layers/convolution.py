"""Convolution layers (channels last): Conv1d, Conv2d, Conv3d."""

from __future__ import annotations

import math
from typing import Tuple, Union

import kiln.core as mx
from kiln.nn.layers.base import Module

IntOrTuple = Union[int, Tuple[int, ...]]


def _ntuple(v: IntOrTuple, n: int, name: str) -> tuple:
    t = (v,) * n if isinstance(v, int) else tuple(v)
    if len(t) != n:
        raise ValueError(f"{name} must be an int or a tuple of {n} ints, got {v}.")
    return t


class _ConvNd(Module):
    _n = 0

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: IntOrTuple,
        stride: IntOrTuple = 1,
        padding: IntOrTuple = 0,
        dilation: IntOrTuple = 1,
        groups: int = 1,
        bias: bool = True,
    ):
        super().__init__()
        n = self._n
        if in_channels % groups:
            raise ValueError(
                f"The number of input channels ({in_channels}) must be divisible "
                f"by the number of groups ({groups})"
            )
        kernel = _ntuple(kernel_size, n, "kernel_size")
        scale = math.sqrt(1.0 / (in_channels * math.prod(kernel)))
        self.weight = mx.random.uniform(
            -scale, scale, (out_channels, *kernel, in_channels // groups)
        )
        if bias:
            self.bias = mx.zeros((out_channels,))
        self.stride = _ntuple(stride, n, "stride")
        self.padding = _ntuple(padding, n, "padding")
        self.dilation = _ntuple(dilation, n, "dilation")
        self.groups = groups

    def _extra_repr(self) -> str:
        w = self.weight.shape
        return (
            f"{w[-1] * self.groups}, {w[0]}, kernel_size={tuple(w[1:-1])}, stride={self.stride}, "
            f"padding={self.padding}, dilation={self.dilation}, groups={self.groups}, "
            f"bias={'bias' in self}"
        )

    def __call__(self, x: mx.array) -> mx.array:
        y = mx.conv_general(
            x,
            self.weight,
            stride=list(self.stride),
            padding=list(self.padding),
            kernel_dilation=list(self.dilation),
            groups=self.groups,
        )
        if "bias" in self:
            y = y + self.bias
        return y


class Conv1d(_ConvNd):
    """1-D convolution over ``(N, L, C_in)`` inputs with a ``(C_out, K, C_in / groups)``
    weight drawn from ``U(-s, s)``, ``s = 1/sqrt(C_in K)``; the bias starts at zero."""

    _n = 1


class Conv2d(_ConvNd):
    """2-D convolution over ``(N, H, W, C_in)`` inputs with a ``(C_out, KH, KW, C_in /
    groups)`` weight (initialised as :class:`Conv1d`)."""

    _n = 2


class Conv3d(_ConvNd):
    """3-D convolution over ``(N, D, H, W, C_in)`` inputs with a ``(C_out, KD, KH, KW,
    C_in / groups)`` weight (initialised as :class:`Conv1d`)."""

    _n = 3
