"""Recurrent layers: RNN, GRU and LSTM over ``(N, L, D)`` or ``(L, D)`` inputs, returning
every step's hidden state (and, for LSTM, cell state). Parameters and gate order follow
``mlx.nn``, so weights load from MLX models."""

from __future__ import annotations

import math
from typing import Callable, Optional

import kiln.core as mx
from kiln.nn.layers.activations import tanh
from kiln.nn.layers.base import Module


def _uniform(scale: float, *shape: int) -> mx.array:
    return mx.random.uniform(-scale, scale, shape)


def _project(x: mx.array, w: mx.array, b: Optional[mx.array]) -> mx.array:
    """``x w^T + b`` for all steps at once (the input part of every gate)."""
    return x @ w.T if b is None else mx.addmm(b, x, w.T)


class RNN(Module):
    """Elman RNN: ``h_{t+1} = nonlinearity(W_xh x_t + W_hh h_t + b)`` (tanh by default),
    starting from ``hidden`` or zero."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        nonlinearity: Optional[Callable] = None,
    ):
        super().__init__()
        self.nonlinearity = nonlinearity or tanh
        if not callable(self.nonlinearity):
            raise ValueError(f"Nonlinearity must be callable. Current value: {nonlinearity}.")
        s = 1.0 / math.sqrt(hidden_size)
        self.hidden_size = hidden_size
        self.Wxh = _uniform(s, hidden_size, input_size)
        self.Whh = _uniform(s, hidden_size, hidden_size)
        self.bias = _uniform(s, hidden_size) if bias else None

    def _extra_repr(self) -> str:
        return (
            f"input_dims={self.Wxh.shape[1]}, hidden_size={self.hidden_size}, "
            f"nonlinearity={self.nonlinearity}, bias={self.bias is not None}"
        )

    def __call__(self, x: mx.array, hidden: Optional[mx.array] = None) -> mx.array:
        xs = _project(x, self.Wxh, self.bias)
        out = []
        for t in range(xs.shape[-2]):
            pre = xs[..., t, :]
            if hidden is not None:
                pre = mx.addmm(pre, hidden, self.Whh.T)
            hidden = self.nonlinearity(pre)
            out.append(hidden)
        return mx.stack(out, axis=-2)


class GRU(Module):
    """Gated recurrent unit: reset and update gates ``r, z``, candidate
    ``n = tanh(W_xn x + b_n + r (W_hn h + b_hn))``, ``h' = (1 - z) n + z h``."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
        super().__init__()
        s = 1.0 / math.sqrt(hidden_size)
        self.hidden_size = hidden_size
        self.Wx = _uniform(s, 3 * hidden_size, input_size)
        self.Wh = _uniform(s, 3 * hidden_size, hidden_size)
        self.b = _uniform(s, 3 * hidden_size) if bias else None
        self.bhn = _uniform(s, hidden_size) if bias else None

    def _extra_repr(self) -> str:
        return (
            f"input_dims={self.Wx.shape[1]}, hidden_size={self.hidden_size}, "
            f"bias={self.b is not None}"
        )

    def __call__(self, x: mx.array, hidden: Optional[mx.array] = None) -> mx.array:
        H = self.hidden_size
        xs = _project(x, self.Wx, self.b)
        out = []
        for t in range(xs.shape[-2]):
            xt = xs[..., t, :]
            rz, n = xt[..., : 2 * H], xt[..., 2 * H :]
            if hidden is not None:
                hp = hidden @ self.Wh.T
                rz = rz + hp[..., : 2 * H]
                hn = hp[..., 2 * H :]
                if self.bhn is not None:
                    hn = hn + self.bhn
            else:
                hn = self.bhn
            rz = mx.sigmoid(rz)
            r, z = rz[..., :H], rz[..., H:]
            if hn is not None:
                n = n + r * hn
            n = mx.tanh(n)
            hidden = (1 - z) * n if hidden is None else (1 - z) * n + z * hidden
            out.append(hidden)
        return mx.stack(out, axis=-2)


class LSTM(Module):
    """Long short-term memory with gates ``i, f, g, o`` (in that order in the weights);
    returns ``(hidden states, cell states)``."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
        super().__init__()
        s = 1.0 / math.sqrt(hidden_size)
        self.hidden_size = hidden_size
        self.Wx = _uniform(s, 4 * hidden_size, input_size)
        self.Wh = _uniform(s, 4 * hidden_size, hidden_size)
        self.bias = _uniform(s, 4 * hidden_size) if bias else None

    def _extra_repr(self) -> str:
        return (
            f"input_dims={self.Wx.shape[1]}, hidden_size={self.hidden_size}, "
            f"bias={self.bias is not None}"
        )

    def __call__(
        self, x: mx.array, hidden: Optional[mx.array] = None, cell: Optional[mx.array] = None
    ) -> tuple:
        H = self.hidden_size
        xs = _project(x, self.Wx, self.bias)
        hs, cs = [], []
        for t in range(xs.shape[-2]):
            g4 = xs[..., t, :]
            if hidden is not None:
                g4 = mx.addmm(g4, hidden, self.Wh.T)
            i, f = mx.sigmoid(g4[..., :H]), mx.sigmoid(g4[..., H : 2 * H])
            g, o = mx.tanh(g4[..., 2 * H : 3 * H]), mx.sigmoid(g4[..., 3 * H :])
            cell = i * g if cell is None else f * cell + i * g
            hidden = o * mx.tanh(cell)
            hs.append(hidden)
            cs.append(cell)
        return mx.stack(hs, axis=-2), mx.stack(cs, axis=-2)
