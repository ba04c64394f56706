"""Normalization layers: LayerNorm, RMSNorm, GroupNorm, InstanceNorm, BatchNorm.
Features are the last axis (channels last)."""

from __future__ import annotations

import kiln.core as mx
from kiln.nn.layers import _fast
from kiln.nn.layers.base import Module


def _check_eps(layer: str, eps) -> None:
    """MLX's check: ``eps`` must be positive (a non-number raises TypeError)."""
    if eps <= 0.0:
        raise ValueError(f"[{layer}] 'eps' must be positive but got {eps}.")


class LayerNorm(Module):
    """Normalises the last axis to zero mean and unit variance, then applies a learned
    scale and offset (``affine``; ``bias=False`` keeps only the scale)."""

    def __init__(self, dims: int, eps: float = 1e-5, affine: bool = True, bias: bool = True):
        super().__init__()
        _check_eps("LayerNorm", eps)
        if affine:
            self.weight = mx.ones((dims,))
            if bias:
                self.bias = mx.zeros((dims,))
        self.dims = dims
        self.eps = eps

    def _extra_repr(self) -> str:
        return f"{self.dims}, eps={self.eps}, affine={'weight' in self}"

    def __call__(self, x: mx.array) -> mx.array:
        return _fast.layer_norm(x, self.get("weight"), self.get("bias"), self.eps)


class RMSNorm(Module):
    """``x / sqrt(mean(x**2) + eps) * weight`` over the last axis."""

    def __init__(self, dims: int, eps: float = 1e-5):
        super().__init__()
        _check_eps("RMSNorm", eps)
        self.weight = mx.ones((dims,))
        self.eps = eps

    def _extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"

    def __call__(self, x: mx.array) -> mx.array:
        return _fast.rms_norm(x, self["weight"], self.eps)


class GroupNorm(Module):
    """Normalises groups of channels over the batch element's other axes. Channel ``c``
    belongs to group ``c % num_groups``, unless ``pytorch_compatible`` (contiguous groups)."""

    def __init__(
        self,
        num_groups: int,
        dims: int,
        eps: float = 1e-5,
        affine: bool = True,
        pytorch_compatible: bool = False,
    ):
        super().__init__()
        _check_eps("GroupNorm", eps)
        if num_groups <= 0:
            raise ValueError(f"The number of groups ({num_groups}) must be a positive integer.")
        if dims <= 0:
            raise ValueError(f"The number of features ({dims}) must be a positive integer.")
        if dims % num_groups:
            raise ValueError(
                f"The number of features ({dims}) must be evenly divisible by the number of "
                f"groups ({num_groups})."
            )
        if affine:
            self.bias = mx.zeros((dims,))
            self.weight = mx.ones((dims,))
        self.num_groups = num_groups
        self.dims = dims
        self.eps = eps
        self.pytorch_compatible = pytorch_compatible

    def _extra_repr(self) -> str:
        return (
            f"{self.num_groups}, {self.dims}, eps={self.eps}, affine={'weight' in self}, "
            f"pytorch_compatible={self.pytorch_compatible}"
        )

    def __call__(self, x: mx.array) -> mx.array:
        g = self.num_groups
        batch, dims = x.shape[0], x.shape[-1]
        if self.pytorch_compatible:
            y = x.reshape(batch, -1, g, dims // g).transpose(0, 2, 1, 3).reshape(batch, g, -1)
            y = _fast.layer_norm(y, None, None, self.eps)
            y = y.reshape(batch, g, -1, dims // g).transpose(0, 2, 1, 3).reshape(x.shape)
        else:
            y = x.reshape(batch, -1, g)
            mean = mx.mean(y, axis=1, keepdims=True)
            var = mx.var(y, axis=1, keepdims=True)
            y = ((y - mean) * mx.rsqrt(var + self.eps)).reshape(x.shape)
        if "weight" in self:
            y = self.weight * y + self.bias
        return y


class InstanceNorm(Module):
    """Normalises each channel of each batch element over the spatial axes (all but the
    first and last)."""

    def __init__(self, dims: int, eps: float = 1e-5, affine: bool = False):
        super().__init__()
        _check_eps("InstanceNorm", eps)
        if affine:
            self.weight = mx.ones((dims,))
            self.bias = mx.zeros((dims,))
        self.dims = dims
        self.eps = eps

    def _extra_repr(self) -> str:
        return f"{self.dims}, eps={self.eps}, affine={'weight' in self}"

    def __call__(self, x: mx.array) -> mx.array:
        axes = tuple(range(1, x.ndim - 1))
        # Half precision is normalised in float32 and rounded back (as MLX): its statistics
        # over many positions lose too much in float16 / bfloat16.
        z = x.astype(mx.float32) if x.dtype in (mx.float16, mx.bfloat16) else x
        mean = mx.mean(z, axis=axes, keepdims=True)
        var = mx.var(z, axis=axes, keepdims=True)
        y = ((z - mean) * mx.rsqrt(var + self.eps)).astype(x.dtype)
        if "weight" in self:
            y = y * self.weight + self.bias
        return y


class BatchNorm(Module):
    """Normalises each feature over the batch (and spatial) axes of 2 to 4-D inputs.

    While training it uses the batch's statistics and updates the running mean and
    (unbiased) variance with ``momentum``; in evaluation mode it uses the running ones
    (``track_running_stats``). The running statistics are never trainable.
    """

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
    ):
        super().__init__()
        _check_eps("BatchNorm", eps)
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.track_running_stats = track_running_stats
        if affine:
            self.weight = mx.ones((num_features,))
            self.bias = mx.zeros((num_features,))
        if track_running_stats:
            self.running_mean = mx.zeros((num_features,))
            self.running_var = mx.ones((num_features,))
            self.freeze(keys=["running_mean", "running_var"], recurse=False)

    def unfreeze(self, *args, **kwargs) -> "BatchNorm":
        """As :meth:`Module.unfreeze`; the running statistics stay frozen."""
        super().unfreeze(*args, **kwargs)
        if self.track_running_stats:
            self.freeze(keys=["running_mean", "running_var"], recurse=False)
        return self

    def _extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
            f"affine={'weight' in self}, track_running_stats={self.track_running_stats}"
        )

    def __call__(self, x: mx.array) -> mx.array:
        if x.ndim < 2 or x.ndim > 4:
            raise ValueError(
                f"Expected input tensor to have 2, 3 or 4 dimensions, but got {x.ndim}"
            )
        axes = tuple(range(x.ndim - 1))
        if self.training or not self.track_running_stats:
            mean = mx.mean(x, axis=axes)
            var = mx.var(x, axis=axes)
            if self.training and self.track_running_stats:
                m = self.momentum
                n = x.size / x.shape[-1]
                self.running_mean = (1 - m) * self.running_mean + m * mean
                self.running_var = (1 - m) * self.running_var + m * var * (n / max(n - 1, 1))
        else:
            mean, var = self.running_mean, self.running_var
        y = (x - mean) * mx.rsqrt(var + self.eps)
        if "weight" in self:
            y = self.weight * y + self.bias
        return y
