"""Activation functions and their layer classes (as ``mlx.nn``'s)."""

from __future__ import annotations

import math
from typing import Any

import kiln.core as mx
from kiln.nn.layers.base import Module


def sigmoid(x: mx.array) -> mx.array:
    """``1 / (1 + exp(-x))``."""
    return mx.sigmoid(x)


def relu(x: mx.array) -> mx.array:
    """``max(x, 0)``."""
    return mx.maximum(x, 0)


def relu2(x: mx.array) -> mx.array:
    """``max(x, 0) ** 2``."""
    return mx.square(mx.maximum(x, 0))


def relu6(x: mx.array) -> mx.array:
    """``min(max(x, 0), 6)``."""
    return mx.minimum(mx.maximum(x, 0), 6.0)


def leaky_relu(x: mx.array, negative_slope: float = 0.01) -> mx.array:
    """``max(negative_slope * x, x)``."""
    return mx.maximum(negative_slope * x, x)


def _shift_by_max(x: mx.array, axis: int) -> mx.array:
    """``x - max(x, axis)`` (integers as float32): the largest entry becomes 0, so what
    follows does not lose the small differences of large logits."""
    if not mx.issubdtype(x.dtype, mx.inexact):
        x = x.astype(mx.float32)
    return x - mx.stop_gradient(mx.max(x, axis=axis, keepdims=True))


def _log_sum_exp_shifted(s: mx.array, axis: int, keepdims: bool = True) -> mx.array:
    """``log(sum(exp(s)))`` of shifted logits; half precision sums its exponentials in
    float32 and rounds the logarithm to its dtype."""
    wide = s.astype(mx.float32) if s.dtype in (mx.float16, mx.bfloat16) else s
    return mx.log(mx.sum(mx.exp(wide), axis=axis, keepdims=keepdims)).astype(s.dtype)


def log_softmax(x: mx.array, axis: int = -1) -> mx.array:
    """``x - logsumexp(x, axis)``, computed from ``x - max(x)`` (exact for large logits)."""
    s = _shift_by_max(x, axis)
    return s - _log_sum_exp_shifted(s, axis)


def elu(x: mx.array, alpha: float = 1.0) -> mx.array:
    """``x`` where positive, else ``alpha * (exp(x) - 1)``."""
    return mx.where(x > 0, x, alpha * (mx.exp(x) - 1))


def celu(x: mx.array, alpha: float = 1.0) -> mx.array:
    """``max(x, 0) + alpha * (exp(min(x, 0) / alpha) - 1)``."""
    return mx.maximum(x, 0.0) + alpha * (mx.exp(mx.minimum(x, 0.0) / alpha) - 1)


def selu(x: mx.array) -> mx.array:
    """``1.0507 * elu(x, 1.67326)``."""
    return elu(x, 1.67326) * 1.0507


def softplus(x: mx.array) -> mx.array:
    """``log(1 + exp(x))``, computed without overflow."""
    return mx.logaddexp(x, 0)


def softsign(x: mx.array) -> mx.array:
    """``x / (1 + |x|)``."""
    return mx.divide(x, 1 + mx.abs(x))


def softshrink(x: mx.array, lambd: float = 0.5) -> mx.array:
    """``x - sign(x) * lambd`` where ``|x| > lambd``, else 0."""
    return mx.where(mx.abs(x) > lambd, x - mx.sign(x) * lambd, 0)


def silu(x: mx.array) -> mx.array:
    """``x * sigmoid(x)`` (swish)."""
    return x * mx.sigmoid(x)


def log_sigmoid(x: mx.array) -> mx.array:
    """``log(sigmoid(x)) = -softplus(-x)``."""
    return -softplus(-x)


def gelu(x: mx.array) -> mx.array:
    """``x * Phi(x)`` with the normal CDF ``Phi`` computed through ``erf``."""
    return x * (1 + mx.erf(x / math.sqrt(2))) / 2


def gelu_approx(x: mx.array) -> mx.array:
    """GELU's tanh approximation ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``."""
    return 0.5 * x * (1 + mx.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def gelu_fast_approx(x: mx.array) -> mx.array:
    """GELU's sigmoid approximation ``x * sigmoid(1.702 x)``."""
    return x * mx.sigmoid(1.702 * x)


def glu(x: mx.array, axis: int = -1) -> mx.array:
    """Splits ``x`` in halves ``a, b`` along ``axis`` and returns ``a * sigmoid(b)``."""
    a, b = mx.split(x, indices_or_sections=2, axis=axis)
    return a * mx.sigmoid(b)


def step(x: mx.array, threshold: float = 0.0) -> mx.array:
    """1 where ``x >= threshold``, else 0 (int32)."""
    return mx.where(x >= threshold, 1, 0)


def prelu(x: mx.array, alpha: mx.array) -> mx.array:
    """``max(x, 0) + alpha * min(x, 0)``."""
    return mx.maximum(0, x) + alpha * mx.minimum(0, x)


def mish(x: mx.array) -> mx.array:
    """``x * tanh(softplus(x))``."""
    return x * mx.tanh(softplus(x))


def hardswish(x: mx.array) -> mx.array:
    """``x * min(max(x + 3, 0), 6) / 6``."""
    return x * mx.minimum(mx.maximum(x + 3, 0), 6) / 6


def hard_tanh(x: mx.array, min_val: float = -1.0, max_val: float = 1.0) -> mx.array:
    """``x`` clipped to ``[min_val, max_val]``."""
    return mx.minimum(mx.maximum(x, min_val), max_val)


def hard_shrink(x: mx.array, lambd: float = 0.5) -> mx.array:
    """``x`` where ``|x| > lambd``, else 0."""
    return mx.where(mx.abs(x) > lambd, x, 0)


def softmax(x: mx.array, axis: int = -1) -> mx.array:
    """``exp(x) / sum(exp(x), axis)``."""
    return mx.softmax(x, axis=axis)


def softmin(x: mx.array, axis: int = -1) -> mx.array:
    """``softmax(-x, axis)``."""
    return mx.softmax(-x, axis=axis)


def tanh(x: mx.array) -> mx.array:
    """The hyperbolic tangent."""
    return mx.tanh(x)


def _layer(name: str, fn, doc: str, **params: Any) -> type:
    """A Module class calling ``fn`` with the hyper-parameters given to its constructor
    (defaults ``params``, in order)."""
    names = list(params)

    def __init__(self, *args, **kwargs):
        Module.__init__(self)
        if len(args) > len(names):
            raise TypeError(f"{name}() takes at most {len(names)} arguments")
        values = dict(params)
        values.update(zip(names, args))
        for k, v in kwargs.items():
            if k not in values:
                raise TypeError(f"{name}() got an unexpected keyword argument {k!r}")
            values[k] = v
        for k, v in values.items():
            object.__setattr__(self, "_" + k, v)

    def __call__(self, x):
        return fn(x, **{k: getattr(self, "_" + k) for k in names})

    def _extra_repr(self):
        return ", ".join(f"{k}={getattr(self, '_' + k)}" for k in names)

    return type(
        name,
        (Module,),
        {
            "__init__": __init__,
            "__call__": __call__,
            "_extra_repr": _extra_repr,
            "__doc__": doc,
            "__module__": __name__,
        },
    )


Sigmoid = _layer("Sigmoid", sigmoid, "Applies :func:`sigmoid`.")
ReLU = _layer("ReLU", relu, "Applies :func:`relu`.")
ReLU2 = _layer("ReLU2", relu2, "Applies :func:`relu2`.")
ReLU6 = _layer("ReLU6", relu6, "Applies :func:`relu6`.")
LeakyReLU = _layer("LeakyReLU", leaky_relu, "Applies :func:`leaky_relu`.", negative_slope=0.01)
ELU = _layer("ELU", elu, "Applies :func:`elu`.", alpha=1.0)
CELU = _layer("CELU", celu, "Applies :func:`celu`.", alpha=1.0)
SELU = _layer("SELU", selu, "Applies :func:`selu`.")
Softplus = _layer("Softplus", softplus, "Applies :func:`softplus`.")
Softsign = _layer("Softsign", softsign, "Applies :func:`softsign`.")
Softshrink = _layer("Softshrink", softshrink, "Applies :func:`softshrink`.", lambd=0.5)
SiLU = _layer("SiLU", silu, "Applies :func:`silu`.")
LogSigmoid = _layer("LogSigmoid", log_sigmoid, "Applies :func:`log_sigmoid`.")
Mish = _layer("Mish", mish, "Applies :func:`mish`.")
Hardswish = _layer("Hardswish", hardswish, "Applies :func:`hardswish`.")
HardTanh = _layer("HardTanh", hard_tanh, "Applies :func:`hard_tanh`.", min_val=-1.0, max_val=1.0)
HardShrink = _layer("HardShrink", hard_shrink, "Applies :func:`hard_shrink`.", lambd=0.5)
Tanh = _layer("Tanh", tanh, "Applies :func:`tanh`.")
Softmax = _layer("Softmax", softmax, "Applies :func:`softmax` over the last axis.")
Softmin = _layer("Softmin", softmin, "Applies :func:`softmin` over the last axis.")
LogSoftmax = _layer("LogSoftmax", log_softmax, "Applies :func:`log_softmax` over the last axis.")
GLU = _layer("GLU", glu, "Applies :func:`glu` along ``axis``.", axis=-1)
Step = _layer("Step", step, "Applies :func:`step`.", threshold=0.0)


class GELU(Module):
    """Applies GELU: ``approx="none"`` (erf), ``"precise"``/``"tanh"`` (:func:`gelu_approx`)
    or ``"fast"`` (:func:`gelu_fast_approx`)."""

    def __init__(self, approx: str = "none"):
        super().__init__()
        fns = {"none": gelu, "precise": gelu_approx, "tanh": gelu_approx, "fast": gelu_fast_approx}
        if approx not in fns:
            raise ValueError(f"The approximation should be in {list(fns)} but '{approx}' was given")
        self._approx = approx
        self._act = fns[approx]

    def __call__(self, x: mx.array) -> mx.array:
        return self._act(x)


class PReLU(Module):
    """Applies :func:`prelu` with a learned slope per channel (``num_parameters`` of them,
    starting at ``init``)."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25):
        super().__init__()
        self.weight = mx.full([num_parameters], init)

    def __call__(self, x: mx.array) -> mx.array:
        return prelu(x, self.weight)
