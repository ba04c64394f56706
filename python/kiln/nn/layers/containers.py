"""Sequential: modules (or callables) applied in order."""

from __future__ import annotations

from typing import Callable

from kiln.nn.layers.base import Module


class Sequential(Module):
    """Calls its modules (any callables) one after the other on the input."""

    def __init__(self, *modules: Callable):
        super().__init__()
        self.layers = list(modules)

    def __call__(self, x):
        for m in self.layers:
            x = m(x)
        return x
