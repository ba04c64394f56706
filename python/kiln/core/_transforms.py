"""grad, value_and_grad, vjp and jvp over pytrees, with mlx.core's signatures.

The Rust core differentiates a function of a flat list of arrays (``_core._vjp``/``_jvp``);
this module flattens argument trees to that list and rebuilds them around the call.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

from kiln import _core

array = _core.array


def _flatten(tree: Any) -> tuple[list, Callable[[list], Any]]:
    """The arrays of a tree, and a function putting new arrays in their places."""
    leaves: list = []

    def walk(node):
        if isinstance(node, array):
            leaves.append(node)
            return lambda it: next(it)
        if isinstance(node, (list, tuple)):
            parts = [walk(c) for c in node]
            if isinstance(node, tuple) and hasattr(type(node), "_fields"):
                return lambda it: type(node)(*(p(it) for p in parts))
            return lambda it: type(node)(p(it) for p in parts)
        if isinstance(node, dict):
            parts = {k: walk(v) for k, v in node.items()}
            return lambda it: {k: p(it) for k, p in parts.items()}
        return lambda it: node  # not differentiated: passed through as is

    build = walk(tree)
    return leaves, lambda new: build(iter(new))


def _place(tree: Any) -> tuple[list, Callable[[list], Any]]:
    """As ``_flatten``, but putting the new arrays into the caller's own lists and dicts
    (tuples, immutable, are rebuilt around them), as MLX's grad does: changes the function
    makes to those containers stay visible to the caller. Returns the leaves and a function
    placing the new arrays and returning the tree to pass."""
    leaves: list = []

    def walk(node):
        if isinstance(node, array):
            leaves.append(node)
            return lambda it: next(it)
        if isinstance(node, tuple):
            parts = [walk(c) for c in node]
            if hasattr(type(node), "_fields"):
                return lambda it: type(node)(*(p(it) for p in parts))
            return lambda it: type(node)(p(it) for p in parts)
        if isinstance(node, list):
            parts = [walk(c) for c in node]

            def put_list(it):
                for i, p in enumerate(parts):
                    node[i] = p(it)
                return node

            return put_list
        if isinstance(node, dict):
            parts = {k: walk(v) for k, v in node.items()}

            def put_dict(it):
                for k, p in parts.items():
                    node[k] = p(it)
                return node

            return put_dict
        return lambda it: node

    build = walk(tree)
    return leaves, lambda new: build(iter(new))


def _restore(tree: Any, originals: dict, seen: set) -> None:
    """Puts the caller's arrays back wherever a list or dict of ``tree`` still holds the
    tracer that stood in for one (``originals``: tracer id -> array)."""
    if id(tree) in seen:
        return
    if isinstance(tree, (list, dict, tuple)):
        seen.add(id(tree))
    if isinstance(tree, list):
        items = enumerate(tree)
    elif isinstance(tree, dict):
        items = tree.items()
    elif isinstance(tree, tuple):
        for c in tree:
            _restore(c, originals, seen)
        return
    else:
        return
    for k, v in list(items):
        if isinstance(v, array):
            if id(v) in originals:
                tree[k] = originals[id(v)]
        else:
            _restore(v, originals, seen)


def _unflatten_into(tree: Any, grads: list) -> Any:
    """The gradient tree shaped like ``tree`` as it is after the call (MLX pairs the
    gradients, in the order of the inputs, with the array leaves there); other leaves are
    passed through, array leaves past the gradients get zeros."""
    it = iter(grads)

    def walk(node):
        if isinstance(node, array):
            g = next(it, None)
            return _core.zeros_like(node) if g is None else g
        if isinstance(node, tuple):
            parts = [walk(c) for c in node]
            return type(node)(*parts) if hasattr(type(node), "_fields") else type(node)(parts)
        if isinstance(node, list):
            return [walk(c) for c in node]
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        return node

    return walk(tree)


def _as_list(out: Any, op: str) -> list:
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    for o in outs:
        if not isinstance(o, array):
            raise ValueError(f"[{op}] The function must return arrays, got {type(o).__name__}.")
    return outs


def vjp(fun: Callable, primals: Sequence[array], cotangents: Sequence[array]):
    """Returns ``(outputs, vjps)``: ``fun(*primals)`` and the cotangents of the primals for
    the given cotangents of the outputs."""
    return _core._vjp(lambda xs: _as_list(fun(*xs), "vjp"), list(primals), list(cotangents))


def jvp(fun: Callable, primals: Sequence[array], tangents: Sequence[array]):
    """Returns ``(outputs, jvps)``: ``fun(*primals)`` and the tangents of the outputs for the
    given tangents of the primals."""
    return _core._jvp(lambda xs: _as_list(fun(*xs), "jvp"), list(primals), list(tangents))


def _targets(argnums, argnames):
    if isinstance(argnames, str):
        argnames = [argnames]
    if argnums is None and not argnames:
        argnums = 0
    single = isinstance(argnums, int)
    nums = [] if argnums is None else ([argnums] if single else list(argnums))
    return nums, list(argnames), single or len(nums) == 1


def value_and_grad(
    fun: Callable, argnums: int | Sequence[int] | None = None, argnames: str | Sequence[str] = []
) -> Callable:
    """A function returning ``(fun(*args, **kwargs), gradients)``.

    ``fun`` returns a scalar array, or a tuple whose first element is one (the rest is passed
    through). Gradients are taken with respect to the positional arguments ``argnums``
    (default 0) and the keyword arguments ``argnames``; each may be a tree of arrays.
    """
    nums, names, single = _targets(argnums, argnames)
    op = "value_and_grad"

    @functools.wraps(fun)
    def wrapped(*args, **kwargs):
        for i in nums:
            if not -len(args) <= i < len(args):
                raise ValueError(
                    f"[{op}] Can't compute the gradient of argument index {i} because the "
                    f"function is called with only {len(args)} positional arguments."
                )
        for n in names:
            if n not in kwargs:
                raise ValueError(
                    f"[{op}] Can't compute the gradient of keyword argument '{n}' because the "
                    f"function is called with the keyword arguments {sorted(kwargs)}."
                )
        leaves, place = _place([args[i] for i in nums] + [kwargs[n] for n in names])
        result = {}

        def flat_fun(tracers):
            originals = {id(t): a for t, a in zip(tracers, leaves)}
            targets = place(tracers)
            result["targets"] = targets
            new_args, new_kwargs = list(args), dict(kwargs)
            for k, i in enumerate(nums):
                new_args[i] = targets[k]
            for k, n in enumerate(names):
                new_kwargs[n] = targets[len(nums) + k]
            try:
                out = fun(*new_args, **new_kwargs)
            finally:
                _restore(targets, originals, set())
            loss = out[0] if isinstance(out, (tuple, list)) and out else out
            if not isinstance(loss, array) or loss.ndim != 0:
                shape = getattr(loss, "shape", type(loss).__name__)
                raise ValueError(
                    f"[{op}] The function must return a scalar array or a tuple whose first "
                    f"element is a scalar array; got {shape}."
                )
            result["out"] = out
            return [loss]

        _, grads = _core._vjp(flat_fun, leaves)
        trees = _unflatten_into(result["targets"], grads)
        by_num = trees[: len(nums)]
        by_name = {n: trees[len(nums) + k] for k, n in enumerate(names)}
        if nums:
            by_num = by_num[0] if single else tuple(by_num)
        else:
            by_num = None
        return result["out"], ((by_num, by_name) if names else by_num)

    return wrapped


def grad(
    fun: Callable, argnums: int | Sequence[int] | None = None, argnames: str | Sequence[str] = []
) -> Callable:
    """A function returning the gradient of scalar-valued ``fun`` (see value_and_grad)."""
    vg = value_and_grad(fun, argnums, argnames)

    @functools.wraps(fun)
    def wrapped(*args, **kwargs):
        return vg(*args, **kwargs)[1]

    return wrapped


def _leaf_axes(tree: Any, spec: Any, op: str, where: str) -> list:
    """The axis spec of every array leaf of ``tree`` (``spec``: an int/None for the whole
    subtree, or a tree of the same structure)."""
    if isinstance(tree, array):
        if spec is not None and not isinstance(spec, int):
            raise ValueError(f"[{op}] Expected an int or None as the axis of an array {where}.")
        if spec is None:
            return [None]
        if not -tree.ndim - (where == "output") <= spec < tree.ndim + (where == "output"):
            raise ValueError(
                f"[{op}] Axis {spec} is out of bounds for an array with {tree.ndim} dimensions."
            )
        return [spec % (tree.ndim + (where == "output"))]
    children = None
    if isinstance(tree, (list, tuple)):
        children = list(enumerate(tree))
    elif isinstance(tree, dict):
        children = list(tree.items())
    if children is None:
        return []
    out = []
    for k, child in children:
        if spec is None or isinstance(spec, int):
            sub = spec
        else:
            try:
                sub = spec[k]
            except (KeyError, IndexError, TypeError):
                raise ValueError(f"[{op}] The axes tree does not match the {where} tree.") from None
        out.extend(_leaf_axes(child, sub, op, where))
    return out


def vmap(fun: Callable, in_axes: Any = 0, out_axes: Any = 0) -> Callable:
    """Vectorises ``fun`` over axis ``in_axes`` of its inputs, stacking the results along
    ``out_axes``. Axes are an int, None (not mapped), or trees matching the arguments and
    outputs."""
    op = "vmap"

    @functools.wraps(fun)
    def wrapped(*args):
        if isinstance(in_axes, (list, tuple)):
            if len(in_axes) != len(args):
                raise ValueError(
                    f"[{op}] in_axes has {len(in_axes)} entries but the function got "
                    f"{len(args)} arguments."
                )
            specs = list(in_axes)
        else:
            specs = [in_axes] * len(args)
        leaves, rebuild = _flatten(list(args))
        axes = [a for arg, s in zip(args, specs) for a in _leaf_axes(arg, s, op, "input")]
        result = {}

        def flat_fun(tracers):
            out = fun(*rebuild(tracers))
            out_leaves, out_rebuild = _flatten(out)
            result["out"], result["rebuild"] = out, out_rebuild
            return out_leaves

        outs, batch_axes, size = _core._vmap(flat_fun, leaves, axes)
        out_specs = _leaf_axes(result["out"], out_axes, op, "output")
        placed = [_core._place_batch(o, b, to, size) for o, b, to in zip(outs, batch_axes, out_specs)]
        return result["rebuild"](placed)

    return wrapped


def checkpoint(fun: Callable) -> Callable:
    """``fun`` whose gradient recomputes its forward pass instead of keeping the
    intermediates alive until the backward pass (less memory, more compute)."""

    @functools.wraps(fun)
    def wrapped(*args, **kwargs):
        leaves, rebuild = _flatten(list(args))
        result = {}

        def flat(tracers):
            out = fun(*rebuild(tracers), **kwargs)
            out_leaves, result["rebuild"] = _flatten(out)
            return out_leaves

        outs = _core._custom_call(flat, leaves)
        return result["rebuild"](outs)

    return wrapped


class custom_function:
    """A function with its own transform rules, as ``mx.custom_function``::

        @mx.custom_function
        def f(x, y):
            return mx.sin(x) * y

        @f.vjp
        def f_vjp(primals, cotangent, output):
            x, y = primals
            return cotangent * mx.cos(x) * y, cotangent * mx.sin(x)

    ``vjp(primals, cotangents, outputs)`` returns one cotangent per argument; ``jvp(primals,
    tangents)`` returns the outputs' tangents; ``vmap(inputs, axes)`` returns the batched
    outputs and their batch axes (None: not batched). A missing rule transforms ``fun``
    itself.
    """

    def __init__(self, fun: Callable):
        functools.update_wrapper(self, fun)
        self.fun, self._vjp, self._jvp, self._vmap = fun, None, None, None

    def vjp(self, f: Callable) -> Callable:
        self._vjp = f
        return f

    def jvp(self, f: Callable) -> Callable:
        self._jvp = f
        return f

    def vmap(self, f: Callable) -> Callable:
        """Sets the batching rule: ``f(inputs, axes) -> (outputs, out_axes)``."""
        self._vmap = f
        return f

    def __call__(self, *args):
        leaves, rebuild = _flatten(list(args))
        out_tree = {}

        def flat(tracers):
            out = self.fun(*rebuild(tracers))
            out_leaves, out_tree["rebuild"] = _flatten(out)
            return out_leaves

        def flat_vjp(primals, cotangents, outputs):
            rebuild_out = out_tree["rebuild"]
            grads = self._vjp(tuple(rebuild(primals)), rebuild_out(cotangents), rebuild_out(outputs))
            if not isinstance(grads, (tuple, list)):
                grads = (grads,)
            return _flatten(list(grads))[0]

        def flat_jvp(primals, tangents):
            return _flatten(self._jvp(tuple(rebuild(primals)), tuple(rebuild(tangents))))[0]

        def flat_vmap(inputs, axes):
            outs, out_axes = self._vmap(tuple(rebuild(inputs)), tuple(rebuild(axes)))
            out_leaves = _flatten(outs)[0]
            op = "custom_function.vmap"
            return out_leaves, _leaf_axes(outs, out_axes, op, "rule output")

        outs = _core._custom_call(flat, leaves, flat_vjp if self._vjp else None,
                                  flat_jvp if self._jvp else None,
                                  flat_vmap if self._vmap else None)
        return out_tree["rebuild"](outs)
