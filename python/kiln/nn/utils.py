"""Transforms over a model's parameters: ``value_and_grad`` and ``checkpoint``."""

from __future__ import annotations

from functools import wraps
from typing import Callable, Optional

import kiln.core as mx
from kiln.nn.layers.base import Module


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
