"""Loss functions (as ``mlx.nn.losses``). ``reduction`` is ``"none"``, ``"mean"`` or
``"sum"``; the defaults follow MLX's per loss."""

from __future__ import annotations

import math
from typing import Optional

import kiln.core as mx
from kiln.nn.layers.activations import _log_sum_exp_shifted, _shift_by_max

_REDUCTIONS = ("none", "mean", "sum")


def _reduce(loss: mx.array, reduction: str = "none") -> mx.array:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"Invalid reduction. Must be one of {_REDUCTIONS}.")
    if reduction == "mean":
        return mx.mean(loss)
    if reduction == "sum":
        return mx.sum(loss)
    return loss


def _same_shape(name: str, a: mx.array, b: mx.array) -> None:
    if tuple(a.shape) != tuple(b.shape):
        raise ValueError(
            f"[{name}] Inputs shape {tuple(a.shape)} does not match targets shape {tuple(b.shape)}."
        )


def cross_entropy(
    logits: mx.array,
    targets: mx.array,
    weights: Optional[mx.array] = None,
    axis: int = -1,
    label_smoothing: float = 0.0,
    reduction: str = "none",
) -> mx.array:
    """``logsumexp(logits) - logits[target]`` along ``axis``; ``targets`` are class ids
    (one axis fewer than ``logits``) or probabilities (the same shape). With
    ``label_smoothing`` the target mixes in the uniform distribution."""
    if not 0 <= label_smoothing < 1:
        raise ValueError(f"Label smoothing must in [0, 1), got {label_smoothing}.")
    as_probs = targets.ndim == logits.ndim
    expect = list(logits.shape)
    if not as_probs:
        expect.pop(axis)
    if tuple(targets.shape) != tuple(expect):
        raise ValueError(
            f"Targets shape {tuple(targets.shape)} does not match logits shape "
            f"{tuple(logits.shape)}."
        )
    # Everything from the logits less their maximum, as MLX: large logits keep their
    # differences, and probability targets that do not sum to 1 see the same loss.
    shifted = _shift_by_max(logits, axis)
    if as_probs:
        score = mx.sum(shifted * targets, axis=axis)
    else:
        score = mx.squeeze(mx.take_along_axis(shifted, mx.expand_dims(targets, axis), axis), axis)
    lse = _log_sum_exp_shifted(shifted, axis, keepdims=False)
    if label_smoothing > 0:
        loss = lse - (1 - label_smoothing) * score - label_smoothing * mx.mean(shifted, axis=axis)
    else:
        loss = lse - score
    if weights is not None:
        if tuple(weights.shape) != tuple(loss.shape):
            raise ValueError(
                f"Weights with shape {tuple(weights.shape)} is not the same as output loss "
                f"with shape {tuple(loss.shape)}."
            )
        loss = loss * weights
    return _reduce(loss, reduction)


def binary_cross_entropy(
    inputs: mx.array,
    targets: mx.array,
    weights: Optional[mx.array] = None,
    with_logits: bool = True,
    reduction: str = "mean",
) -> mx.array:
    """``-(t log p + (1 - t) log(1 - p))`` with ``p = sigmoid(inputs)`` (``with_logits``)
    or ``p = inputs`` (logs clipped at -100)."""
    _same_shape("binary_cross_entropy", inputs, targets)
    if with_logits:
        loss = mx.logaddexp(0.0, inputs) - inputs * targets
    else:
        log_p = mx.maximum(mx.log(inputs), -100)
        log_q = mx.maximum(mx.log(1 - inputs), -100)
        loss = -(targets * log_p + (1 - targets) * log_q)
    if weights is not None:
        if tuple(weights.shape) != tuple(loss.shape):
            raise ValueError(
                f"Weights with shape {tuple(weights.shape)} is not the same as output loss "
                f"with shape {tuple(loss.shape)}."
            )
        loss = loss * weights
    return _reduce(loss, reduction)


def l1_loss(predictions: mx.array, targets: mx.array, reduction: str = "mean") -> mx.array:
    """``|predictions - targets|``."""
    _same_shape("l1_loss", predictions, targets)
    return _reduce(mx.abs(predictions - targets), reduction)


def mse_loss(predictions: mx.array, targets: mx.array, reduction: str = "mean") -> mx.array:
    """``(predictions - targets) ** 2``."""
    _same_shape("mse_loss", predictions, targets)
    return _reduce(mx.square(predictions - targets), reduction)


def nll_loss(
    inputs: mx.array, targets: mx.array, axis: int = -1, reduction: str = "none"
) -> mx.array:
    """``-inputs[target]`` along ``axis`` (``inputs`` are log probabilities)."""
    picked = mx.take_along_axis(inputs, mx.expand_dims(targets, axis), axis)
    return _reduce(-mx.squeeze(picked, axis), reduction)


def gaussian_nll_loss(
    inputs: mx.array,
    targets: mx.array,
    vars: mx.array,
    full: bool = False,
    eps: float = 1e-6,
    reduction: str = "mean",
) -> mx.array:
    """``0.5 (log v + (targets - inputs)^2 / v)`` with ``v = max(vars, eps)`` (plus
    ``0.5 log 2 pi`` with ``full``)."""
    _same_shape("gaussian_nll_loss", inputs, targets)
    _same_shape("gaussian_nll_loss", inputs, vars)
    v = mx.maximum(vars, eps)
    loss = 0.5 * (mx.log(v) + mx.square(targets - inputs) / v)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)


def kl_div_loss(
    inputs: mx.array, targets: mx.array, axis: int = -1, reduction: str = "none"
) -> mx.array:
    """``sum(exp(targets) (targets - inputs), axis)`` for log probabilities."""
    return _reduce(mx.sum(mx.exp(targets) * (targets - inputs), axis=axis), reduction)


def smooth_l1_loss(
    predictions: mx.array, targets: mx.array, beta: float = 1.0, reduction: str = "mean"
) -> mx.array:
    """``0.5 d^2 / beta`` where ``d = |predictions - targets| < beta``, else ``d - beta/2``."""
    _same_shape("smooth_l1_loss", predictions, targets)
    d = mx.abs(predictions - targets)
    return _reduce(mx.where(d < beta, 0.5 * mx.square(d) / beta, d - 0.5 * beta), reduction)


def triplet_loss(
    anchors: mx.array,
    positives: mx.array,
    negatives: mx.array,
    axis: int = -1,
    p: int = 2,
    margin: float = 1.0,
    eps: float = 1e-6,
    reduction: str = "none",
) -> mx.array:
    """``max(||a - p||_p - ||a - n||_p + margin, 0)`` (``eps`` inside the root)."""
    pos = mx.power(mx.sum(mx.power(mx.abs(anchors - positives), p), axis=axis) + eps, 1.0 / p)
    neg = mx.power(mx.sum(mx.power(mx.abs(anchors - negatives), p), axis=axis) + eps, 1.0 / p)
    return _reduce(mx.maximum(pos - neg + margin, 0), reduction)


def hinge_loss(inputs: mx.array, targets: mx.array, reduction: str = "none") -> mx.array:
    """``max(1 - inputs * targets, 0)``."""
    return _reduce(mx.maximum(1 - inputs * targets, 0), reduction)


def huber_loss(
    inputs: mx.array, targets: mx.array, delta: float = 1.0, reduction: str = "none"
) -> mx.array:
    """``0.5 e^2`` for ``|e| <= delta``, else ``delta (|e| - delta/2)``, with
    ``e = inputs - targets``."""
    e = mx.abs(inputs - targets)
    q = mx.minimum(e, delta)
    return _reduce(0.5 * mx.square(q) + delta * (e - q), reduction)


def log_cosh_loss(inputs: mx.array, targets: mx.array, reduction: str = "none") -> mx.array:
    """``log(cosh(inputs - targets))``, computed without overflow."""
    e = inputs - targets
    return _reduce(mx.logaddexp(e, -e) - math.log(2), reduction)


def cosine_similarity_loss(
    x1: mx.array, x2: mx.array, axis: int = 1, eps: float = 1e-8, reduction: str = "none"
) -> mx.array:
    """``x1 . x2 / max(||x1|| ||x2||, eps)`` along ``axis``."""
    n1 = mx.sqrt(mx.sum(mx.square(x1), axis=axis))
    n2 = mx.sqrt(mx.sum(mx.square(x2), axis=axis))
    return _reduce(mx.sum(x1 * x2, axis=axis) / mx.maximum(n1 * n2, eps), reduction)


def margin_ranking_loss(
    inputs1: mx.array,
    inputs2: mx.array,
    targets: mx.array,
    margin: float = 0.0,
    reduction: str = "none",
) -> mx.array:
    """``max(0, -targets (inputs1 - inputs2) + margin)``."""
    if not (tuple(inputs1.shape) == tuple(inputs2.shape) == tuple(targets.shape)):
        raise ValueError(
            f"The shapes of the arguments do not match. The provided shapes are "
            f"inputs1.shape={tuple(inputs1.shape)}, inputs2.shape={tuple(inputs2.shape)}, "
            f"and targets.shape={tuple(targets.shape)}."
        )
    return _reduce(mx.maximum(0, -targets * (inputs1 - inputs2) + margin), reduction)
