"""Spatial upsampling of channels-last inputs ``(N, *spatial, C)``, as ``mlx.nn.Upsample``.

Every mode is separable: each spatial axis is resampled in turn by gathering a few source
rows (``mx.take``) and summing them with per-output weights, so a d-dimensional linear or
cubic upsample costs ``2 d`` or ``4 d`` gathers instead of ``2^d`` or ``4^d``. The sampling
grids follow MLX (PyTorch's ``interpolate`` where ``scale * n`` is whole): ``int(scale * n)``
samples ``1 / scale`` apart centred on the input, or spanning it with ``align_corners``.
Cubic is Keys' kernel with ``a = -0.75``, replicating the border; ``antialias`` widens a
triangle or ``a = -0.5`` cubic filter by ``1 / scale`` when shrinking and renormalises the
taps that fall inside the input.
Linear and cubic weights are float32, so those results are float32 (or wider).
"""

from __future__ import annotations

import math
from typing import Literal, Sequence, Tuple, Union

import kiln.core as mx
from kiln.nn.layers.base import Module

_MODES = ("nearest", "linear", "cubic")


def _check_scales(x: mx.array, scale_factor, name: str) -> Tuple[float, ...]:
    if not isinstance(scale_factor, (tuple, list)):
        raise TypeError(
            f"[{name}] scale_factor must be a tuple with one scale per spatial dimension, "
            f"got {type(scale_factor).__name__}."
        )
    dims = x.ndim - 2
    if dims != len(scale_factor):
        raise ValueError(
            f"[{name}] A scale needs to be provided for each spatial dimension: got "
            f"{len(scale_factor)} scales for an input with {max(dims, 0)} spatial dimensions."
        )
    scales = tuple(float(s) for s in scale_factor)
    if any(not s > 0 for s in scales):
        raise ValueError(f"[{name}] scale factors must be positive, got {scale_factor}.")
    return scales


def _check_antialias(align_corners: bool, antialias: bool) -> None:
    if antialias and align_corners:
        raise ValueError(
            "[Upsample] antialias=True with align_corners=True is not supported. "
            "Use align_corners=False for antialiased interpolation."
        )


def _source_positions(n: int, m: int, scale: float, align_corners: bool) -> mx.array:
    """Where each of the ``m`` outputs samples the ``n`` inputs (float32 positions)."""
    grid = mx.arange(m, dtype=mx.float32)
    if align_corners:
        # First and last samples land on the first and last inputs.
        return grid * ((n - 1) / max(m - 1, 1))
    # Samples 1 / scale apart, centred on the input: (i + 0.5) / scale - 0.5 when scale * n
    # is whole. Written as MLX computes it (one multiply, one subtract in float32) so the
    # grids agree bit for bit.
    step = 1 / scale
    return grid * step - ((m - 1) * step - n + 1) / 2


def _resample(x: mx.array, axis: int, taps) -> mx.array:
    """``sum_k w_k * x[..., idx_k, ...]`` along ``axis``; ``taps`` are ``(idx, w)`` pairs
    of ``(m,)`` arrays."""
    # Weights broadcast against the axes after `axis` (the later spatial axes and C).
    trailing = (1,) * (x.ndim - 1 - axis)
    out = None
    for idx, w in taps:
        term = mx.take(x, idx, axis=axis) * w.reshape((-1,) + trailing)
        out = term if out is None else out + term
    return out


def _linear_taps(n, m, scale, align_corners):
    pos = mx.clip(_source_positions(n, m, scale, align_corners), 0, n - 1)
    left = mx.floor(pos)
    frac = pos - left
    return [(left.astype(mx.uint32), 1 - frac), (mx.ceil(pos).astype(mx.uint32), frac)]


def _keys_cubic(d: mx.array, a: float, near: bool) -> mx.array:
    """Keys' cubic convolution kernel at distance ``d``: the branch for ``|d| <= 1``
    (``near``) or for ``1 < |d| <= 2``."""
    if near:
        return ((a + 2) * d - (a + 3)) * d * d + 1
    return (((d - 5) * d + 8) * d - 4) * a


def _cubic_taps(n, m, scale, align_corners):
    pos = _source_positions(n, m, scale, align_corners)
    left = mx.floor(pos)
    right = mx.floor(pos + 1)
    taps = []
    # Two neighbours on each side; indices past the border repeat the edge sample.
    for src, near in ((left, True), (right, True), (left - 1, False), (right + 1, False)):
        w = _keys_cubic(mx.abs(pos - src), -0.75, near)
        taps.append((mx.clip(src, 0, n - 1).astype(mx.uint32), w))
    return taps


def _triangle(d: mx.array) -> mx.array:
    return mx.maximum(1 - d, 0.0)


def _cubic_half(d: mx.array) -> mx.array:
    # Keys' kernel with a = -0.5 (Pillow's, and PyTorch's antialiased cubic), support 2.
    return mx.where(
        d <= 1, _keys_cubic(d, -0.5, True), mx.where(d <= 2, _keys_cubic(d, -0.5, False), 0.0)
    )


def _antialias_taps(n, m, scale, kernel, radius):
    pos = _source_positions(n, m, scale, False)
    # Shrinking widens the filter by 1/scale, so each output averages every input it covers.
    widen = 1 / scale if scale < 1 else 1.0
    reach = math.ceil(radius * widen)
    base = mx.floor(pos)
    srcs, weights = [], []
    for k in range(-reach, reach + 1):
        src = base + k
        w = kernel(mx.abs(pos - src) / widen)
        # Taps outside the input get no weight; the others are renormalised below.
        weights.append(mx.where((src >= 0) & (src < n), w, 0.0))
        srcs.append(src)
    total = sum(weights[1:], weights[0])
    total = mx.where(total > 0, total, 1.0)
    return [(mx.clip(s, 0, n - 1).astype(mx.uint32), w / total) for s, w in zip(srcs, weights)]


def _separable(x: mx.array, scales, taps_fn) -> mx.array:
    sizes = [int(s * n) for n, s in zip(x.shape[1:-1], scales)]
    if 0 in sizes or 0 in x.shape:
        # Nothing to sample from or into; the dtype is what the weights would give.
        dtype = (mx.zeros((), x.dtype) * mx.zeros((), mx.float32)).dtype
        return mx.zeros((x.shape[0], *sizes, x.shape[-1]), dtype)
    for axis, (n, m, scale) in enumerate(zip(x.shape[1:-1], sizes, scales), 1):
        x = _resample(x, axis, taps_fn(n, m, scale))
    return x


def upsample_nearest(x: mx.array, scale_factor: Sequence[float]) -> mx.array:
    """Nearest-neighbour upsampling of ``(N, *spatial, C)`` by one scale per spatial axis;
    keeps ``x``'s dtype."""
    scales = _check_scales(x, scale_factor, "upsample_nearest")
    if all(s == int(s) for s in scales):
        # Integer scales repeat every sample: a broadcast and a reshape, no gather.
        batch, *spatial, channels = x.shape
        reps = [int(s) for s in scales]
        inner = [d for n in spatial for d in (n, 1)]
        tiled = [d for n, r in zip(spatial, reps) for d in (n, r)]
        x = mx.broadcast_to(x.reshape([batch, *inner, channels]), [batch, *tiled, channels])
        return x.reshape([batch, *(n * r for n, r in zip(spatial, reps)), channels])
    for axis, (n, scale) in enumerate(zip(x.shape[1:-1], scales), 1):
        m = int(scale * n)
        grid = mx.arange(m, dtype=mx.float32)
        if m > n:
            # Each output takes the input whose centre is nearest its own.
            src = mx.round((grid + 0.5) * (n / m) - 0.5)
        else:
            src = grid * (n / m) if m else grid
        x = mx.take(x, src.astype(mx.uint32), axis=axis)
    return x


def upsample_linear(
    x: mx.array, scale_factor: Sequence[float], align_corners: bool = False, antialias: bool = False
) -> mx.array:
    """Linear (bilinear, trilinear, ...) upsampling of ``(N, *spatial, C)``."""
    _check_antialias(align_corners, antialias)
    scales = _check_scales(x, scale_factor, "upsample_linear")
    if antialias:
        return _separable(x, scales, lambda n, m, s: _antialias_taps(n, m, s, _triangle, 1.0))
    return _separable(x, scales, lambda n, m, s: _linear_taps(n, m, s, align_corners))


def upsample_cubic(
    x: mx.array, scale_factor: Sequence[float], align_corners: bool = False, antialias: bool = False
) -> mx.array:
    """Cubic (bicubic, ...) upsampling of ``(N, *spatial, C)``."""
    _check_antialias(align_corners, antialias)
    scales = _check_scales(x, scale_factor, "upsample_cubic")
    if antialias:
        return _separable(x, scales, lambda n, m, s: _antialias_taps(n, m, s, _cubic_half, 2.0))
    return _separable(x, scales, lambda n, m, s: _cubic_taps(n, m, s, align_corners))


class Upsample(Module):
    """Upsamples the spatial axes (``1 .. ndim - 2``) of channels-last inputs by
    ``scale_factor`` (one number, or one per spatial axis) with ``mode`` ``"nearest"``,
    ``"linear"`` or ``"cubic"``; ``align_corners`` pins the corner samples, ``antialias``
    filters when shrinking (linear and cubic only)."""

    def __init__(
        self,
        scale_factor: Union[float, Tuple[float, ...]],
        mode: Literal["nearest", "linear", "cubic"] = "nearest",
        align_corners: bool = False,
        antialias: bool = False,
    ):
        super().__init__()
        if mode not in _MODES:
            raise ValueError(f"[Upsample] Got unsupported upsampling algorithm: {mode}")
        if antialias and mode == "nearest":
            raise ValueError(
                "[Upsample] Antialiasing is not supported for nearest neighbor upsampling"
            )
        _check_antialias(align_corners, antialias)
        try:
            if isinstance(scale_factor, (list, tuple)):
                scale_factor = tuple(float(s) for s in scale_factor)
            else:
                scale_factor = float(scale_factor)
        except (TypeError, ValueError) as e:
            # The class float() raised (as MLX), with the layer named.
            raise type(e)(
                f"[Upsample] scale_factor must be a number or a tuple of numbers, "
                f"got {scale_factor!r}."
            ) from None
        self.scale_factor = scale_factor
        self.mode = mode
        self.align_corners = align_corners
        self.antialias = antialias

    def _extra_repr(self) -> str:
        text = (
            f"scale_factor={self.scale_factor}, mode={self.mode!r}, "
            f"align_corners={self.align_corners}"
        )
        return text + (", antialias=True" if self.antialias else "")

    def __call__(self, x: mx.array) -> mx.array:
        dims = x.ndim - 2
        if dims <= 0:
            raise ValueError(
                "[Upsample] The input should have at least 1 spatial dimension which means it "
                f"should be at least 3D but {x.ndim}D was provided"
            )
        scales = self.scale_factor
        if isinstance(scales, tuple):
            if len(scales) != dims:
                raise ValueError(
                    "[Upsample] One scale per spatial dimension is required but "
                    f"scale_factor={scales} and the number of spatial dimensions were {dims}"
                )
        else:
            scales = (scales,) * dims
        if self.mode == "nearest":
            return upsample_nearest(x, scales)
        if self.mode == "linear":
            return upsample_linear(x, scales, self.align_corners, self.antialias)
        return upsample_cubic(x, scales, self.align_corners, self.antialias)
