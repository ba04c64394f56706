"""The fused ``mx.fast`` ops the layers use, or a composition of core ops when this build
of kiln has no ``mx.fast.<op>`` yet. One place to switch, so the layers never check.

The compositions follow ``mx.fast``'s definitions: statistics in float32, results in the
input's dtype; RoPE rotates the first ``dims`` features; attention takes a "causal" mask
aligned to the end of the keys, boolean masks (True keeps) or additive ones, and grouped
key/value heads.
"""

from __future__ import annotations

import math
from typing import Optional, Union

import kiln.core as mx


def _fast(name: str):
    fast = getattr(mx, "fast", None)
    return getattr(fast, name, None) if fast is not None else None


def rms_norm(x: mx.array, weight: Optional[mx.array], eps: float) -> mx.array:
    """``x / sqrt(mean(x**2, -1) + eps) * weight``."""
    f = _fast("rms_norm")
    if f is not None:
        return f(x, weight, eps)
    xf = x.astype(mx.float32)
    y = (xf * mx.rsqrt(mx.mean(mx.square(xf), axis=-1, keepdims=True) + eps)).astype(x.dtype)
    return y if weight is None else y * weight


def layer_norm(x: mx.array, weight: Optional[mx.array], bias: Optional[mx.array], eps: float) -> mx.array:
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the last axis."""
    f = _fast("layer_norm")
    if f is not None:
        return f(x, weight, bias, eps)
    xf = x.astype(mx.float32)
    mean = mx.mean(xf, axis=-1, keepdims=True)
    c = xf - mean
    var = mx.mean(mx.square(c), axis=-1, keepdims=True)
    y = (c * mx.rsqrt(var + eps)).astype(x.dtype)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def rope(x: mx.array, dims: int, *, traditional: bool, base: Optional[float], scale: float,
         offset: Union[int, mx.array], freqs: Optional[mx.array] = None) -> mx.array:
    """Rotary position embedding of ``x`` (``(..., L, D)``) at positions
    ``(offset + arange(L)) * scale``."""
    f = _fast("rope")
    if f is not None:
        return f(x, dims, traditional=traditional, base=base, scale=scale, offset=offset, freqs=freqs)
    if dims % 2 or dims > x.shape[-1]:
        raise ValueError(f"[rope] dims must be even and at most the last axis size, got {dims}.")
    L = x.shape[-2]
    half = dims // 2
    if freqs is None:
        inv = mx.power(mx.array(base, mx.float32), -mx.arange(0, dims, 2, dtype=mx.float32) / dims)
    else:
        inv = 1.0 / freqs.astype(mx.float32)
    pos = (mx.arange(L, dtype=mx.float32) + mx.array(offset).astype(mx.float32)) * scale
    theta = pos[:, None] * inv[None, :]
    cos, sin = mx.cos(theta), mx.sin(theta)
    xr = x[..., :dims].astype(mx.float32)
    if traditional:
        pairs = xr.reshape(*xr.shape[:-1], half, 2)
        a, b = pairs[..., 0], pairs[..., 1]
        rot = mx.stack([a * cos - b * sin, a * sin + b * cos], axis=-1).reshape(xr.shape)
    else:
        a, b = xr[..., :half], xr[..., half:]
        rot = mx.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)
    rot = rot.astype(x.dtype)
    if dims == x.shape[-1]:
        return rot
    return mx.concatenate([rot, x[..., dims:]], axis=-1)


def scaled_dot_product_attention(q: mx.array, k: mx.array, v: mx.array, *, scale: float,
                                 mask: Union[None, str, mx.array] = None) -> mx.array:
    """``softmax(q k^T * scale + mask) v`` for ``(B, H, L, D)`` queries and
    ``(B, H_kv, S, D)`` keys and values (``H`` a multiple of ``H_kv``)."""
    f = _fast("scaled_dot_product_attention")
    if f is not None:
        return f(q, k, v, scale=scale, mask=mask)
    H, L = q.shape[1], q.shape[2]
    Hkv, S = k.shape[1], k.shape[2]
    if H % Hkv:
        raise ValueError(f"[scaled_dot_product_attention] {H} query heads are not a multiple "
                         f"of {Hkv} key/value heads.")
    if H != Hkv:
        k = mx.repeat(k, H // Hkv, axis=1)
        v = mx.repeat(v, H // Hkv, axis=1)
    scores = mx.matmul(q * mx.array(scale, q.dtype), mx.swapaxes(k, -1, -2))
    if isinstance(mask, str):
        if mask != "causal":
            raise ValueError(f"[scaled_dot_product_attention] Unknown mask '{mask}'.")
        # Query i sits at key position S - L + i.
        mask = mx.arange(S - L, S)[:, None] >= mx.arange(S)[None, :]
    if mask is not None:
        if mask.dtype == mx.bool_:
            scores = mx.where(mask, scores, mx.array(-math.inf, scores.dtype))
        else:
            scores = scores + mask.astype(scores.dtype)
    p = mx.softmax(scores.astype(mx.float32), axis=-1).astype(v.dtype)
    return mx.matmul(p, v)
