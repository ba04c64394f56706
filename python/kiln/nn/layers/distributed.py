"""Tensor-parallel linear layers and sharding helpers, following ``mlx.nn.layers.distributed``.

A layer shards its weight over a ``mx.distributed`` group: all-to-sharded layers split the
output features (each process computes its slice; gradients of the shared input are summed
over the group in the backward pass), sharded-to-all layers split the input features (each
process computes a partial product; ``all_sum`` adds them). Over the singleton group (no
backend launched) they equal the unsharded layers.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Callable, Optional, Union

import kiln.core as mx
from kiln.nn.layers.base import Module
from kiln.nn.layers.linear import Linear
from kiln.nn.layers.quantized import _defaults, _quantize
from kiln.utils import tree_flatten, tree_map_with_path, tree_unflatten

SHARDINGS = ("all-to-sharded", "sharded-to-all")


@lru_cache
def sum_gradients(group) -> Callable:
    """Identity in the forward pass; sums the cotangent over ``group`` in the backward."""
    if group.size() == 1:
        return lambda x: x

    @mx.custom_function
    def f(x):
        return x

    @f.vjp
    def f_vjp(x, dx, _):
        return mx.distributed.all_sum(dx, group=group)

    return f


def _pieces(weight: mx.array, segments, axis: int) -> list:
    """``weight`` split along ``axis`` into ``segments`` equal parts (an int) or at the
    given fractions of its length (floats) or indices (ints)."""
    if isinstance(segments, int) or isinstance(segments[0], int):
        return mx.split(weight, segments, axis=axis)
    n = weight.shape[axis]
    return mx.split(weight, [int(s * n) for s in segments], axis=axis)


def _shard(parameters: dict, predicate: Callable, group) -> dict:
    """The tree with each array this process's shard: ``predicate(path, w)`` gives the axis,
    or ``(axis, segments)`` for fused weights (each segment sharded on its own), or None to
    leave ``w`` whole."""
    group = group or mx.distributed.init()
    n, r = group.size(), group.rank()

    def shard_one(path, w):
        if not isinstance(w, mx.array):
            return w
        rule = predicate(path, w)
        if rule is None:
            return w
        if isinstance(rule, int):
            axis, segments = rule, 1
        elif isinstance(rule, tuple):
            axis, segments = rule
        else:
            raise ValueError("The sharding function should return int or tuple[int, list]")
        parts = [_pieces(p, n, axis)[r] for p in _pieces(w, segments, axis)]
        return mx.contiguous(mx.concatenate(parts, axis=axis))

    return tree_map_with_path(shard_one, parameters)


def _all_to_sharded(segments) -> Callable:
    # Output features are the weight's second to last axis; a bias is sharded with them.
    return lambda path, w: (-1, segments) if path.endswith("bias") else (max(w.ndim - 2, 0), segments)


def _sharded_to_all(segments) -> Callable:
    # Input features are the last axis; the bias is added once, after the sum.
    return lambda path, w: None if path.endswith("bias") else (-1, segments)


def _check_sharding(sharding: str) -> None:
    if sharding not in SHARDINGS:
        raise ValueError(
            f"Sharding type sharding={sharding!r} not supported, choose one of "
            "'all-to-sharded' or 'sharded-to-all'"
        )


def _predicate(sharding: Union[str, Callable], segments) -> Callable:
    if callable(sharding):
        return sharding
    _check_sharding(sharding)
    return _all_to_sharded(segments) if sharding == "all-to-sharded" else _sharded_to_all(segments)


def shard_inplace(
    module: Module,
    sharding: Union[str, Callable],
    *,
    segments: Union[int, list] = 1,
    group=None,
) -> None:
    """Replaces ``module``'s parameters by this process's shards (``sharding``: one of
    ``SHARDINGS`` or a predicate as :func:`_shard` takes). The module's code is unchanged,
    so it must do its own communication."""
    module.update(_shard(module.parameters(), _predicate(sharding, segments), group))


def shard_linear(
    module: Module, sharding: str, *, segments: Union[int, list] = 1, group=None
) -> Module:
    """A new sharded layer made from a :class:`Linear` or :class:`QuantizedLinear`."""
    _check_sharding(sharding)
    dense = isinstance(module, Linear)
    if sharding == "all-to-sharded":
        make = AllToShardedLinear.from_linear if dense else QuantizedAllToShardedLinear.from_quantized_linear
    else:
        make = ShardedToAllLinear.from_linear if dense else QuantizedShardedToAllLinear.from_quantized_linear
    return make(module, segments=segments, group=group)


def _divisible(n: int, parts: int, what: str) -> None:
    if n % parts:
        raise ValueError(f"Cannot shard the {what} of size {n} across {parts} devices.")


class _Sharded(Module):
    """What the sharded layers share: the group, and building one from an unsharded
    layer's parameters."""

    ALL_TO_SHARDED = True

    def _init_group(self, group) -> int:
        self.group = group or mx.distributed.init()
        return self.group.size()

    def _load_shards(self, layer: Module, segments) -> None:
        rule = _all_to_sharded(segments) if self.ALL_TO_SHARDED else _sharded_to_all(segments)
        self.update(_shard(layer.parameters(), rule, self.group))

    def _full_dims(self, in_dims: int, out_dims: int) -> tuple:
        n = self.group.size()
        return (in_dims, out_dims * n) if self.ALL_TO_SHARDED else (in_dims * n, out_dims)


class AllToShardedLinear(_Sharded):
    """A linear layer whose output features are split over the group: takes the full input,
    gives this process's slice of the output."""

    def __init__(self, input_dims: int, output_dims: int, bias: bool = True, group=None):
        super().__init__()
        n = self._init_group(group)
        _divisible(output_dims, n, "output")
        scale = math.sqrt(1.0 / input_dims)
        self.weight = mx.random.uniform(-scale, scale, (output_dims // n, input_dims))
        if bias:
            self.bias = mx.random.uniform(-scale, scale, (output_dims // n,))

    def _extra_repr(self) -> str:
        i, o = self._full_dims(self.weight.shape[1], self.weight.shape[0])
        return f"input_dims={i}, output_dims={o}, bias={'bias' in self}"

    def __call__(self, x: mx.array) -> mx.array:
        x = sum_gradients(self.group)(x)
        if "bias" in self:
            return mx.addmm(self["bias"], x, self["weight"].T)
        return x @ self["weight"].T

    @classmethod
    def from_linear(cls, linear_layer: Module, *, segments=1, group=None) -> "AllToShardedLinear":
        out_dims, in_dims = linear_layer.weight.shape
        layer = cls(in_dims, out_dims, "bias" in linear_layer, group)
        layer._load_shards(linear_layer, segments)
        return layer


class ShardedToAllLinear(_Sharded):
    """A linear layer whose input features are split over the group: takes this process's
    slice of the input, gives the full output (partial products summed over the group)."""

    ALL_TO_SHARDED = False

    def __init__(self, input_dims: int, output_dims: int, bias: bool = True, group=None):
        super().__init__()
        n = self._init_group(group)
        _divisible(input_dims, n, "input")
        scale = math.sqrt(1.0 / input_dims)
        self.weight = mx.random.uniform(-scale, scale, (output_dims, input_dims // n))
        if bias:
            self.bias = mx.random.uniform(-scale, scale, (output_dims,))

    _extra_repr = AllToShardedLinear._extra_repr

    def __call__(self, x: mx.array) -> mx.array:
        x = mx.distributed.all_sum(x @ self["weight"].T, group=self.group)
        if "bias" in self:
            x = x + self["bias"]
        return x

    @classmethod
    def from_linear(cls, linear_layer: Module, *, segments=1, group=None) -> "ShardedToAllLinear":
        out_dims, in_dims = linear_layer.weight.shape
        layer = cls(in_dims, out_dims, "bias" in linear_layer, group)
        layer._load_shards(linear_layer, segments)
        return layer


class _QuantizedSharded(_Sharded):
    """Quantized sharded layers: their own parameters stay frozen, also through
    ``unfreeze`` (which reaches only sub-modules), as MLX's."""

    def __init__(
        self,
        input_dims: int,
        output_dims: int,
        bias: bool = True,
        group_size: Optional[int] = 64,
        bits: Optional[int] = 4,
        mode: str = "affine",
        group=None,
    ):
        super().__init__()
        n = self._init_group(group)
        if self.ALL_TO_SHARDED:
            _divisible(output_dims, n, "output")
            shape = (output_dims // n, input_dims)
        else:
            _divisible(input_dims, n, "input")
            shape = (output_dims, input_dims // n)
        self.group_size, self.bits = _defaults(mode, group_size, bits)
        self.mode = mode
        scale = math.sqrt(1.0 / input_dims)
        w = mx.random.uniform(-scale, scale, shape)
        self.weight, self.scales, biases = _quantize(w, self.group_size, self.bits, mode)
        if biases is not None:
            self.biases = biases
        if bias:
            self.bias = mx.zeros((shape[0],))
        self.freeze()

    def unfreeze(self, *args, **kwargs) -> Module:
        super().unfreeze(*args, **kwargs)
        self.freeze(recurse=False)
        return self

    def _product(self, x: mx.array) -> mx.array:
        return mx.quantized_matmul(
            x,
            self["weight"],
            scales=self["scales"],
            biases=self.get("biases"),
            transpose=True,
            group_size=self.group_size,
            bits=self.bits,
            mode=self.mode,
        )

    def _extra_repr(self) -> str:
        out_dims, packed = self.weight.shape
        i, o = self._full_dims(packed * 32 // self.bits, out_dims)
        return (
            f"input_dims={i}, output_dims={o}, bias={'bias' in self}, "
            f"group_size={self.group_size}, bits={self.bits}, mode={self.mode}"
        )

    @classmethod
    def from_quantized_linear(cls, quantized_linear_layer: Module, *, segments=1, group=None):
        ql = quantized_linear_layer
        out_dims, packed = ql.weight.shape
        in_dims = packed * 32 // ql.bits
        layer = cls(in_dims, out_dims, "bias" in ql, ql.group_size, ql.bits, ql.mode, group)
        layer._load_shards(ql, segments)
        return layer


class QuantizedAllToShardedLinear(_QuantizedSharded):
    """:class:`AllToShardedLinear` with a quantized weight."""

    def __call__(self, x: mx.array) -> mx.array:
        x = self._product(sum_gradients(self.group)(x))
        if "bias" in self:
            x = x + self["bias"]
        return x


class QuantizedShardedToAllLinear(_QuantizedSharded):
    """:class:`ShardedToAllLinear` with a quantized weight."""

    ALL_TO_SHARDED = False

    def __call__(self, x: mx.array) -> mx.array:
        x = mx.distributed.all_sum(self._product(x), group=self.group)
        if "bias" in self:
            x = x + self["bias"]
        return x


def _shardable(module: Module, key: str, value) -> bool:
    """Parameters to shard: the trainable-parameter filter, minus nested sharded modules
    (they shard their own)."""
    return not isinstance(value, FullyShardedModule) and Module.valid_parameter_filter(
        module, key, value
    )


def _gatherer(group, shapes: list, dtype) -> Callable:
    """``shards -> full parameters``: the shards flattened into one row, one all_gather, then
    split and reshaped; its vjp sums each rank's cotangents over the group and keeps this
    rank's block, averaged (every rank's loss counts once), in the shard's dtype."""
    n = group.size()
    counts = [math.prod(s) // n for s in shapes]
    cuts = [sum(counts[:i]) for i in range(1, len(counts))]

    def cast(x, to):
        return x if to is None or x.dtype == to else x.astype(to)

    @mx.custom_function
    def gather(*shards):
        row = mx.concatenate([cast(s.reshape(1, -1), dtype) for s in shards], axis=1)
        rows = mx.distributed.all_gather(row, group=group)  # (n, total / n)
        return [p.reshape(s) for p, s in zip(mx.split(rows, cuts, axis=1), shapes)]

    @gather.vjp
    def gather_vjp(shards, cotangents, _):
        # Full parameter i's rows of rank r are row r of its (n, count) reshape.
        rows = mx.concatenate([c.reshape(n, -1) for c in cotangents], axis=1)
        mine = mx.distributed.sum_scatter(rows, group=group) / n
        parts = mx.split(mine, cuts, axis=1)
        return tuple(cast(p.reshape(s.shape), s.dtype) for p, s in zip(parts, shards))

    return gather


class FullyShardedModule(Module):
    """``module`` with each of its parameters split along axis 0 over ``group``: each process
    stores (and its optimizer updates) only its block; the whole parameters are gathered for
    each call, and the gradients reach each block summed over the group and averaged.

    Each parameter's first axis must divide by the group's size. ``compute_dtype`` casts the
    gathered parameters for the call. Use :func:`fully_shard` to wrap a module."""

    def __init__(self, module: Module, group=None, compute_dtype=None):
        super().__init__()
        group = group or mx.distributed.init()
        n = group.size()
        params = module.filter_and_map(_shardable)
        flat = tree_flatten(params)
        for path, a in flat:
            if a.ndim == 0:
                raise ValueError(f"Cannot shard parameter '{path}' because it is a scalar.")
            if a.shape[0] % n:
                raise ValueError(
                    f"Cannot shard parameter '{path}' with shape {a.shape} across {n} "
                    f"devices: axis 0 must be divisible by {n}."
                )
        # Plain attributes (not parameters or children): set past Module's __setattr__.
        object.__setattr__(self, "_paths", [p for p, _ in flat])
        module.update(_shard(params, lambda path, w: 0, group))
        self.module = module
        object.__setattr__(self, "_gather", _gatherer(group, [a.shape for _, a in flat], compute_dtype))

    def _extra_repr(self) -> str:
        return f"num_sharded_params={len(self._paths)}"

    def _with_full_parameters(self, fn, *args, **kwargs):
        shards = self.module.filter_and_map(_shardable)
        full = self._gather(*[a for _, a in tree_flatten(shards)])
        self.module.update(tree_unflatten(list(zip(self._paths, full))))
        try:
            return fn(*args, **kwargs)
        finally:
            self.module.update(shards)

    def __call__(self, *args, **kwargs):
        return self._with_full_parameters(self.module, *args, **kwargs)

    def as_linear(self, *args, **kwargs):
        """The wrapped module's ``as_linear`` (a tied embedding's output projection) with
        the whole parameters."""
        return self._with_full_parameters(self.module.as_linear, *args, **kwargs)


def fully_shard(module: Module, *, group=None, compute_dtype=None) -> Module:
    """``module`` wrapped in a :class:`FullyShardedModule` (``module`` itself over one
    process, when it is already wrapped, or when it has no parameters)."""
    group = group or mx.distributed.init()
    if group.size() == 1 or isinstance(module, FullyShardedModule):
        return module
    wrapped = FullyShardedModule(module, group=group, compute_dtype=compute_dtype)
    return wrapped if wrapped._paths else module
