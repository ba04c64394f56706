"""Transforms over a model's parameters (``value_and_grad``, ``checkpoint``) and
``average_gradients`` for data-parallel training."""

from __future__ import annotations

import itertools
from functools import wraps
from typing import Any, Callable, Optional

import kiln.core as mx
from kiln.nn.layers.base import Module
from kiln.utils import tree_flatten, tree_map, tree_unflatten


def value_and_grad(model: Module, fn: Callable) -> Callable:
    """Returns ``g(*args, **kwargs) -> (fn(*args, **kwargs), grads)`` where ``grads``
    is the gradient of ``fn``'s value with respect to ``model.trainable_parameters()``
    (a tree shaped like them). ``fn`` uses the model through ``model`` itself."""

    def inner(params, *args, **kwargs):
        model.update(params)
        return fn(*args, **kwargs)

    vg = mx.value_and_grad(inner)

    @wraps(fn)
    def wrapped(*args, **kwargs):
        params = model.trainable_parameters()
        try:
            return vg(params, *args, **kwargs)
        finally:
            # The model must not keep the transform's tracers.
            model.update(params)

    return wrapped


def checkpoint(module: Module, fn: Optional[Callable] = None) -> Callable:
    """``fn`` (default: the module's call) with gradient checkpointing: the backward pass
    recomputes its intermediates instead of keeping them."""
    fn = module if fn is None else fn

    def inner(params, *args, **kwargs):
        module.update(params)
        return fn(*args, **kwargs)

    ck = mx.checkpoint(inner)

    @wraps(fn)
    def wrapped(*args, **kwargs):
        params = module.trainable_parameters()
        try:
            return ck(params, *args, **kwargs)
        finally:
            module.update(params)

    return wrapped


# Gradients of at least this many bytes are all-summed alone (see average_gradients).
_ALONE_BYTES = 1 << 20


def _buckets(sizes: list, itemsize: int, limit: int) -> list:
    """Consecutive runs of indices whose bytes reach ``limit`` (the last run may be
    smaller), so that many small gradients travel in few messages."""
    runs, run, total = [], [], 0
    for i, n in enumerate(sizes):
        run.append(i)
        total += n * itemsize
        if total >= limit:
            runs.append(run)
            run, total = [], 0
    if run:
        runs.append(run)
    return runs


def average_gradients(
    gradients: Any,
    group: Optional[Any] = None,
    all_reduce_size: int = 32 * 1024**2,
    communication_stream: Optional[Any] = None,
) -> Any:
    """The mean of ``gradients`` (a tree, the same structure on every process) over the
    processes of ``group`` (default: the global group). Small arrays are concatenated into
    messages of at least ``all_reduce_size`` bytes (0 or less: one message per array);
    arrays of 1 MiB or more travel alone. The result is the same either way."""
    group = group or mx.distributed.init()
    n = group.size()
    if n == 1:
        return gradients

    def mean(x):
        return mx.distributed.all_sum(x, group=group, stream=communication_stream) / n

    flat = tree_flatten(gradients)
    if all_reduce_size <= 0 or not flat:
        return tree_map(mean, gradients)
    if len({v.dtype for _, v in flat}) > 1:
        return average_gradients(gradients, group, 0, communication_stream)
    itemsize = flat[0][1].dtype.size
    # An array this large is a bandwidth-bound message on its own: sent as it is, it costs
    # no copy into (and out of) a concatenation. The rest travel in buckets.
    alone = min(all_reduce_size, _ALONE_BYTES)
    out = [None] * len(flat)
    small = []
    for i, (k, v) in enumerate(flat):
        if v.size * itemsize >= alone:
            out[i] = (k, mx.distributed.all_sum(v, group=group, stream=communication_stream) / n)
        else:
            small.append(i)
    sizes = [flat[i][1].size for i in small]
    for run in _buckets(sizes, itemsize, all_reduce_size):
        idx = [small[j] for j in run]
        joined = mx.distributed.all_sum(
            mx.concatenate([flat[i][1].reshape(-1) for i in idx]),
            group=group,
            stream=communication_stream,
        )
        offsets = list(itertools.accumulate(flat[i][1].size for i in idx))[:-1]
        # Divided part by part: each division fuses into what consumes the part (the
        # optimizer's update) instead of a pass of its own over the whole message.
        for i, part in zip(idx, mx.split(joined, offsets)):
            out[i] = (flat[i][0], part.reshape(flat[i][1].shape) / n)
    return tree_unflatten(out)


def clip_grad_norm_sharded(gradients: Any, max_norm: float, group: Optional[Any] = None):
    """``optimizers.clip_grad_norm`` for gradients sharded over ``group`` (a module wrapped by
    ``nn.fully_shard``): the global norm adds every process's squared norm. Returns the
    rescaled local gradients and the global norm."""
    squares = [g.square().sum() for _, g in tree_flatten(gradients)]
    local = sum(squares[1:], squares[0]) if squares else mx.array(0.0)
    norm = mx.sqrt(mx.distributed.all_sum(local, group=group))
    scale = mx.minimum(max_norm / (norm + 1e-6), 1.0)
    return tree_map(lambda g: g * scale, gradients), norm
