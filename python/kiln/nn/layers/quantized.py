"""Quantized layers and ``nn.quantize``, following ``mlx.nn``: weights stored as packed
integers with a scale and bias per group (MLX's parameter names and shapes, so MLX's
quantized checkpoints load as they are)."""

from __future__ import annotations

import math
from typing import Callable, Optional, Union

import kiln.core as mx
from kiln._core import quantized_matmul as _affine_qmm
from kiln.nn.layers.base import Module
from kiln.utils import tree_map_with_path

# mode -> (default group size, default bits), as MLX.
MODE_DEFAULTS = {"affine": (64, 4), "mxfp4": (32, 4), "nvfp4": (16, 4), "mxfp8": (32, 8)}


def _defaults(mode: str, group_size: Optional[int], bits: Optional[int]) -> tuple:
    if mode not in MODE_DEFAULTS:
        raise ValueError(
            f"Invalid quantization mode '{mode}'. Valid modes are: {', '.join(MODE_DEFAULTS)}."
        )
    g, b = MODE_DEFAULTS[mode]
    return group_size or g, bits or b


def _quantize(w: mx.array, group_size: int, bits: int, mode: str) -> tuple:
    """(weight, scales, biases or None) of ``w`` quantized along its last axis."""
    out = mx.quantize(w, group_size, bits, mode=mode)
    return out[0], out[1], (out[2] if len(out) > 2 else None)


def _blank(cls, group_size: Optional[int], bits: Optional[int], mode: str) -> Module:
    """A quantized layer of class ``cls`` with its settings but no parameters yet (the
    ``from_*`` constructors quantize an existing layer's weights instead of random ones)."""
    layer = cls.__new__(cls)
    Module.__init__(layer)
    layer.group_size, layer.bits = _defaults(mode, group_size, bits)
    layer.mode = mode
    return layer


class _QuantizedBase(Module):
    """Shared by the quantized layers: the packed weight with its group parameters (frozen
    when made, as MLX's)."""

    def _set_quantized(self, weight, scales, biases) -> None:
        self.weight, self.scales = weight, scales
        if biases is not None:
            self.biases = biases
        elif "biases" in self:
            del self["biases"]

    def _qargs(self) -> dict:
        return {
            "scales": self["scales"],
            "biases": self.get("biases"),
            "group_size": self.group_size,
            "bits": self.bits,
            "mode": self.mode,
        }


class QuantizedEmbedding(_QuantizedBase):
    """:class:`Embedding` with a quantized ``(num_embeddings, dims)`` table;
    :meth:`from_embedding` converts an existing layer."""

    def __init__(
        self,
        num_embeddings: int,
        dims: int,
        group_size: Optional[int] = None,
        bits: Optional[int] = None,
        mode: str = "affine",
    ):
        super().__init__()
        self.group_size, self.bits = _defaults(mode, group_size, bits)
        self.mode = mode
        self.num_embeddings, self.dims = num_embeddings, dims
        table = mx.random.normal(shape=(num_embeddings, dims), scale=math.sqrt(1.0 / dims))
        self._set_quantized(*_quantize(table, self.group_size, self.bits, mode))
        self.freeze()

    def __call__(self, x: mx.array) -> mx.array:
        biases = self.get("biases")
        return mx.dequantize(
            self["weight"][x],
            scales=self["scales"][x],
            biases=None if biases is None else biases[x],
            group_size=self.group_size,
            bits=self.bits,
            mode=self.mode,
        )

    def as_linear(self, x: mx.array) -> mx.array:
        """``x @ table.T`` on the quantized table (tied input and output embeddings)."""
        return mx.quantized_matmul(x, self["weight"], transpose=True, **self._qargs())

    def _extra_repr(self) -> str:
        return (
            f"{self.num_embeddings}, {self.dims}, group_size={self.group_size}, "
            f"bits={self.bits}, mode={self.mode}"
        )

    @classmethod
    def from_embedding(
        cls,
        embedding_layer: Module,
        group_size: Optional[int] = None,
        bits: Optional[int] = None,
        mode: str = "affine",
    ) -> "QuantizedEmbedding":
        n, dims = embedding_layer.weight.shape
        layer = _blank(cls, group_size, bits, mode)
        layer.num_embeddings, layer.dims = n, dims
        layer._set_quantized(*_quantize(embedding_layer.weight, layer.group_size, layer.bits, mode))
        layer.freeze()
        return layer


class QuantizedLinear(_QuantizedBase):
    """:class:`Linear` with a quantized ``(output_dims, input_dims)`` weight;
    :meth:`from_linear` converts an existing layer. The packed weight is frozen; a bias
    becomes trainable with ``unfreeze``."""

    def __init__(
        self,
        input_dims: int,
        output_dims: int,
        bias: bool = True,
        group_size: Optional[int] = None,
        bits: Optional[int] = None,
        mode: str = "affine",
    ):
        super().__init__()
        self.group_size, self.bits = _defaults(mode, group_size, bits)
        self.mode = mode
        scale = math.sqrt(1.0 / input_dims)
        w = mx.random.uniform(-scale, scale, (output_dims, input_dims))
        self._set_quantized(*_quantize(w, self.group_size, self.bits, mode))
        if bias:
            self.bias = mx.zeros((output_dims,))
        self.freeze()

    def _extra_repr(self) -> str:
        out_dims, packed = self.weight.shape
        return (
            f"input_dims={packed * 32 // self.bits}, output_dims={out_dims}, "
            f"bias={'bias' in self}, group_size={self.group_size}, bits={self.bits}, "
            f"mode={self.mode}"
        )

    def __call__(self, x: mx.array) -> mx.array:
        if self.mode == "affine":
            # The native op directly: a decode step calls this ~7 times per layer, and the
            # keyword plumbing of the general path cost about as much as building the op.
            y = _affine_qmm(x, self["weight"], self["scales"], self.get("biases"), True,
                            self.group_size, self.bits)
        else:
            y = mx.quantized_matmul(x, self["weight"], transpose=True, **self._qargs())
        if "bias" in self:
            y = y + self["bias"]
        return y

    @classmethod
    def from_linear(
        cls,
        linear_layer: Module,
        group_size: Optional[int] = None,
        bits: Optional[int] = None,
        mode: str = "affine",
    ) -> "QuantizedLinear":
        layer = _blank(cls, group_size, bits, mode)
        layer._set_quantized(*_quantize(linear_layer.weight, layer.group_size, layer.bits, mode))
        if "bias" in linear_layer:
            layer.bias = linear_layer.bias
        layer.freeze()
        return layer


class QQLinear(Module):
    """:class:`Linear` without bias whose input and weight are both quantized (``mode``
    ``"nvfp4"`` or ``"mxfp8"``, through ``mx.qqmm``). Training mode keeps the weight in
    floating point, quantized on the fly so that it gets gradients; evaluation mode
    (``eval()``) stores it quantized with its ``scales``, and ``train()`` dequantizes it
    again (in bfloat16), as MLX's."""

    def __init__(
        self,
        input_dims: int,
        output_dims: int,
        group_size: Optional[int] = None,
        bits: Optional[int] = None,
        mode: str = "nvfp4",
    ):
        super().__init__()
        self.group_size, self.bits = _defaults(mode, group_size, bits)
        self.mode = mode
        scale = math.sqrt(1.0 / input_dims)
        self.weight = mx.random.uniform(-scale, scale, (output_dims, input_dims))
        self._quantized = False

    # Module.train() sets ``_training`` on every module: switching modes here (a property)
    # quantizes or dequantizes the weight.
    @property
    def _training(self) -> bool:
        return self.__dict__.get("_qq_training", True)

    @_training.setter
    def _training(self, mode: bool) -> None:
        self.__dict__["_qq_training"] = mode
        if "weight" in self:  # not while Module.__init__ runs
            self.dequantize() if mode else self.quantize()

    def quantize(self) -> None:
        """Stores the weight quantized, with its ``scales`` (no-op when it is)."""
        if self._quantized:
            return
        if self.mode == "affine":
            raise ValueError("QQLinear supports the 'nvfp4' and 'mxfp8' modes, not 'affine'.")
        self.weight, self.scales = mx.quantize(
            self["weight"], self.group_size, self.bits, mode=self.mode
        )
        self._quantized = True

    def dequantize(self) -> None:
        """Stores the weight in floating point again (bfloat16; no-op when it is)."""
        if not self._quantized:
            return
        self.weight = mx.dequantize(
            self["weight"], self["scales"], group_size=self.group_size, bits=self.bits,
            mode=self.mode,
        )
        del self["scales"]
        self._quantized = False

    def _extra_repr(self) -> str:
        out_dims, cols = self["weight"].shape
        in_dims = cols * 32 // self.bits if self._quantized else cols
        return (
            f"input_dims={in_dims}, output_dims={out_dims}, group_size={self.group_size}, "
            f"bits={self.bits}, mode={self.mode}"
        )

    def __call__(self, x: mx.array) -> mx.array:
        return mx.qqmm(
            x, self["weight"], scales=self.get("scales"), group_size=self.group_size,
            bits=self.bits, mode=self.mode,
        )

    @classmethod
    def from_linear(
        cls,
        linear_layer: Module,
        group_size: Optional[int] = None,
        bits: Optional[int] = None,
        mode: str = "nvfp4",
    ) -> "QQLinear":
        """A :obj:`QQLinear` with the weight of ``linear_layer`` (which has no bias), in
        training mode."""
        if "bias" in linear_layer:
            raise NotImplementedError("QQLinear does not support bias yet.")
        layer = _blank(cls, group_size, bits, mode)
        layer._quantized = False
        layer.weight = linear_layer.weight
        return layer


def qq_linear_from(
    linear_layer: Module,
    group_size: Optional[int] = None,
    bits: Optional[int] = None,
    mode: str = "affine",
) -> QQLinear:
    """``Linear.to_quantized(..., quantize_input=True)``: a :obj:`QQLinear`, for the modes
    that quantize activations."""
    if mode not in ("nvfp4", "mxfp8"):
        raise ValueError(
            "Quantized activations are only supported for 'nvfp4' and 'mxfp8' modes, "
            f"got {mode}."
        )
    return QQLinear.from_linear(linear_layer, group_size, bits, mode)


def quantize(
    model: Module,
    group_size: Optional[int] = None,
    bits: Optional[int] = None,
    *,
    mode: str = "affine",
    quantize_input: bool = False,
    class_predicate: Optional[Callable[[str, Module], Union[bool, dict]]] = None,
) -> None:
    """Replaces, in place, every leaf module of ``model`` that has ``to_quantized`` (or those
    ``class_predicate(path, module)`` selects; a dict it returns is passed to
    ``to_quantized`` as keyword arguments) by its quantized version."""
    if class_predicate is None:

        def class_predicate(_, m):
            return hasattr(m, "to_quantized")

    def convert(path, m):
        choice = class_predicate(path, m)
        if not choice:
            return m
        if not hasattr(m, "to_quantized"):
            raise ValueError(f"Unable to quantize model of type {type(m)}")
        if isinstance(choice, bool):
            kwargs = {"group_size": group_size, "bits": bits, "mode": mode}
            if quantize_input:
                kwargs["quantize_input"] = True
        elif isinstance(choice, dict):
            kwargs = dict(choice)
            if not kwargs.get("quantize_input", True):
                del kwargs["quantize_input"]
        else:
            raise ValueError(
                "``class_predicate`` must return a bool or a dict of parameters to pass to "
                "``to_quantized``"
            )
        return m.to_quantized(**kwargs)

    leaves = tree_map_with_path(convert, model.leaf_modules(), is_leaf=Module.is_module)
    model.update_modules(leaves)
