"""The fused ``mx.fast`` ops the layers use, or a composition of core ops when this build
of kiln has no ``mx.fast.<op>`` yet. One place to switch, so the layers never check.

The compositions follow ``mx.fast``'s definitions: statistics in float32, results in the
input's dtype; RoPE rotates the first ``dims`` features; attention takes a "causal" mask
aligned to the end of the keys, boolean masks (True keeps) or additive ones, and grouped
key/value heads.
"""

from __future__ import annotations

import functools
import math
from typing import Optional, Union

import numpy as np

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


def layer_norm(
    x: mx.array, weight: Optional[mx.array], bias: Optional[mx.array], eps: float
) -> mx.array:
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


@functools.lru_cache(maxsize=64)
def _rope_tables(D: int, dims: int, traditional: bool) -> tuple:
    """``(R, pick)`` for :func:`rope`: ``x @ R`` is ``x`` with each rotated pair turned by
    90 degrees (``(a, b) -> (-b, a)``), zero past ``dims``; ``pick`` maps each feature to its
    pair's frequency index (-1 past ``dims``)."""
    half = dims // 2
    R = np.zeros((D, D), np.float32)
    pick = np.full(D, -1)
    for i in range(half):
        a, b = (2 * i, 2 * i + 1) if traditional else (i, i + half)
        R[b, a], R[a, b] = -1.0, 1.0
        pick[a] = pick[b] = i
    return R, pick


def rope(
    x: mx.array,
    dims: int,
    *,
    traditional: bool,
    base: Optional[float],
    scale: float,
    offset: Union[int, mx.array],
    freqs: Optional[mx.array] = None,
) -> mx.array:
    """Rotary position embedding of ``x`` (``(..., L, D)``) at positions
    ``(offset + arange(L)) * scale``."""
    f = _fast("rope")
    if f is not None:
        return f(
            x, dims, traditional=traditional, base=base, scale=scale, offset=offset, freqs=freqs
        )
    D, L = x.shape[-1], x.shape[-2]
    if dims % 2 or dims > D or dims <= 0:
        raise ValueError(f"[rope] dims must be even, positive and at most {D}, got {dims}.")
    # x * cos + rot90(x) * sin with per-feature tables: one small matmul and elementwise ops
    # (no slices or concatenations, whose gradients cost far more here).
    R, pick = _rope_tables(D, dims, bool(traditional))
    if freqs is None:
        inv = np.power(float(base), -np.arange(0, dims, 2, dtype=np.float64) / dims)
        inv = mx.array(np.where(pick >= 0, inv[np.maximum(pick, 0)], 0.0).astype(np.float32))
    else:
        inv = mx.where(
            mx.array(pick >= 0), 1.0 / freqs.astype(mx.float32)[mx.array(np.maximum(pick, 0))], 0.0
        )
    off = mx.array(offset).astype(mx.float32)
    if off.ndim == 0:
        theta = ((mx.arange(L, dtype=mx.float32) + off) * scale)[:, None] * inv
    else:
        # One offset per batch element: (B, L, D) tables broadcast over the middle axes.
        if off.ndim != 1 or x.ndim < 3 or off.shape[0] != x.shape[0]:
            raise ValueError(
                f"[rope] offset must be a scalar or one offset per batch element, "
                f"got shape {tuple(off.shape)}."
            )
        pos = (mx.arange(L, dtype=mx.float32)[None, :] + off[:, None]) * scale
        theta = (pos[..., None] * inv).reshape(off.shape[0], *([1] * (x.ndim - 3)), L, D)
    xf = x.astype(mx.float32)
    out = xf * mx.cos(theta) + mx.matmul(xf, mx.array(R)) * mx.sin(theta)
    return out.astype(x.dtype)


def scaled_dot_product_attention(
    q: mx.array, k: mx.array, v: mx.array, *, scale: float, mask: Union[None, str, mx.array] = None
) -> mx.array:
    """``softmax(q k^T * scale + mask) v`` for ``(B, H, L, D)`` queries and
    ``(B, H_kv, S, D)`` keys and values (``H`` a multiple of ``H_kv``)."""
    f = _fast("scaled_dot_product_attention")
    if f is not None:
        return f(q, k, v, scale=scale, mask=mask)
    H, L = q.shape[1], q.shape[2]
    Hkv, S = k.shape[1], k.shape[2]
    if H % Hkv:
        raise ValueError(
            f"[scaled_dot_product_attention] {H} query heads are not a multiple "
            f"of {Hkv} key/value heads."
        )
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
