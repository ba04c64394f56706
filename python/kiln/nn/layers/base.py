"""``Module``: the base class of every layer, a dict of its parameters and sub-modules
(as ``mlx.nn.Module``).

A module stores arrays, sub-modules and lists/dicts of them as dict items, so a model is a
tree that the tree utilities, ``mx.compile(inputs=model.state)`` and the optimizers walk
directly. Other attributes (hyper-parameters, flags) are plain Python attributes.
"""

from __future__ import annotations

import textwrap
from typing import Any, Callable, List, Optional, Tuple, Union

import kiln.core as mx
from kiln.utils import tree_flatten, tree_unflatten


class Module(dict):
    """Base class for layers and models.

    Arrays, modules, and lists or dicts holding them, assigned as attributes are stored as
    dict items and make up the module's tree; ``parameters()`` returns its arrays,
    ``children()`` its direct sub-modules. Names starting with ``_`` are never parameters.
    """

    __call__: Callable

    def __init__(self):
        self._no_grad = set()
        self._training = True

    @property
    def training(self) -> bool:
        """Whether the module is in training mode (see :meth:`train`, :meth:`eval`)."""
        return self._training

    @property
    def state(self) -> "Module":
        """The module's whole tree (itself): parameters and other arrays, e.g. for
        ``mx.compile(inputs=model.state, outputs=model.state)``."""
        return self

    def _extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        subs = tree_flatten(self.children(), is_leaf=lambda v: isinstance(v, Module))
        lines = [f"({k}): {v!r}" for k, v in subs if isinstance(v, Module)]
        head = f"{type(self).__name__}({self._extra_repr()}"
        if not lines:
            return head + ")"
        return head + "\n" + textwrap.indent("\n".join(lines), "  ") + "\n)"

    # Attribute access reads and writes the dict for tree values.
    def __getattr__(self, key: str):
        if key in self:
            return self[key]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {key!r}")

    def __setattr__(self, key: str, val: Any):
        if isinstance(val, (mx.array, dict, list, tuple)):
            # A value that was a plain attribute before moves into the tree.
            if key in self.__dict__:
                del self.__dict__[key]
            self[key] = val
        else:
            if key in self:
                del self[key]
            super().__setattr__(key, val)

    def __delattr__(self, key: str):
        if key in self:
            del self[key]
        else:
            super().__delattr__(key)

    # Filters used by parameters(), children() and friends.
    @staticmethod
    def is_module(value: Any) -> bool:
        """Whether ``value`` is a :class:`Module`."""
        return isinstance(value, Module)

    @staticmethod
    def valid_child_filter(module: "Module", key: str, value: Any) -> bool:
        """Keeps the items that can hold sub-modules (modules, lists and dicts)."""
        return isinstance(value, (dict, list))

    @staticmethod
    def valid_parameter_filter(module: "Module", key: str, value: Any) -> bool:
        """Keeps arrays and containers of them whose name does not start with ``_``."""
        return isinstance(value, (dict, list, mx.array)) and not key.startswith("_")

    @staticmethod
    def trainable_parameter_filter(module: "Module", key: str, value: Any) -> bool:
        """As :meth:`valid_parameter_filter`, minus the frozen names."""
        return Module.valid_parameter_filter(module, key, value) and key not in module._no_grad

    def filter_and_map(
        self,
        filter_fn: Callable[["Module", str, Any], bool],
        map_fn: Optional[Callable] = None,
        is_leaf_fn: Optional[Callable[["Module", str, Any], bool]] = None,
    ) -> dict:
        """The subtree of items for which ``filter_fn(module, key, value)`` holds, with
        ``map_fn`` applied to its leaves (arrays unless ``is_leaf_fn`` says otherwise)."""
        map_fn = map_fn or (lambda x: x)
        is_leaf_fn = is_leaf_fn or (lambda m, k, v: isinstance(v, mx.array))
        return {
            k: _unwrap(self, k, v, filter_fn, map_fn, is_leaf_fn)
            for k, v in self.items()
            if filter_fn(self, k, v)
        }

    def parameters(self) -> dict:
        """Every array of the module and its sub-modules, as a tree of dicts and lists."""
        return self.filter_and_map(self.valid_parameter_filter)

    def trainable_parameters(self) -> dict:
        """The parameters that are not frozen (see :meth:`freeze`)."""
        return self.filter_and_map(self.trainable_parameter_filter)

    def children(self) -> dict:
        """The direct sub-modules (inside lists and dicts too)."""
        return self.filter_and_map(
            self.valid_child_filter, is_leaf_fn=lambda m, k, v: isinstance(v, Module)
        )

    def leaf_modules(self) -> dict:
        """The sub-modules that have no sub-modules of their own."""

        def is_leaf(m, k, v):
            return isinstance(v, Module) and len(tree_flatten(v.children())) == 0

        return self.filter_and_map(self.valid_child_filter, is_leaf_fn=is_leaf)

    def update(self, parameters: dict, strict: bool = True) -> "Module":
        """Replaces the module's arrays with those of ``parameters`` (a tree shaped like
        :meth:`parameters`, or part of it). With ``strict`` every key must exist and every
        value be an array where the module has one."""

        def set_or_descend(dst, k, new, where):
            # The module's current value decides: an array is replaced, a container is
            # walked into.
            if isinstance(dst[k], mx.array):
                if isinstance(new, dict) and not new:
                    return  # a gap left by tree_unflatten: nothing to set here
                if strict and not isinstance(new, mx.array):
                    raise ValueError(f"Received invalid type: {type(new).__name__} for {where}.")
                dst[k] = new
            else:
                apply(dst[k], new, where + ".")

        def apply(dst, src, path):
            if isinstance(src, dict):
                for k, new in src.items():
                    if isinstance(dst, dict) and k in dst:
                        set_or_descend(dst, k, new, f"{path}{k}")
                    elif strict:
                        raise ValueError(f'Module does not have parameter named "{path}{k}".')
            elif isinstance(src, list):
                if not isinstance(dst, list) or len(src) > len(dst):
                    if strict:
                        raise ValueError(
                            f"Received invalid type: list for {path[:-1] or 'the module'}."
                        )
                    return
                for i, new in enumerate(src):
                    set_or_descend(dst, i, new, f"{path}{i}")
            elif strict:
                raise ValueError(
                    f"Received invalid type: {type(src).__name__} for {path[:-1] or 'the module'}."
                )

        apply(self, parameters, "")
        return self

    def apply(
        self, map_fn: Callable[[mx.array], mx.array], filter_fn: Optional[Callable] = None
    ) -> "Module":
        """Maps every parameter (selected by ``filter_fn``, default all) through ``map_fn``
        in place, e.g. ``model.apply(lambda x: x.astype(mx.float16))``."""
        filter_fn = filter_fn or Module.valid_parameter_filter
        self.update(self.filter_and_map(filter_fn, map_fn), strict=False)
        return self

    def update_modules(self, modules: dict, strict: bool = True) -> "Module":
        """Replaces sub-modules with those of ``modules`` (a tree shaped like
        :meth:`children`, or part of it)."""

        def apply(dst, src, path):
            items = src.items() if isinstance(src, dict) else enumerate(src)
            for k, new in items:
                where = f"{path}{k}"
                has = (k in dst) if isinstance(dst, dict) else (isinstance(k, int) and k < len(dst))
                if not has:
                    if strict:
                        raise ValueError(f'Module does not have sub-module named "{where}".')
                    continue
                if isinstance(new, Module):
                    dst[k] = new
                elif isinstance(new, (dict, list)):
                    apply(dst[k], new, where + ".")
                elif strict:
                    raise ValueError(f"Received invalid type: {type(new).__name__} for {where}.")

        apply(self, modules, "")
        return self

    def apply_to_modules(self, apply_fn: Callable[[str, "Module"], Any]) -> "Module":
        """Calls ``apply_fn(path, module)`` on this module and every sub-module."""
        stack = [("", self)]
        while stack:
            prefix, mod = stack.pop()
            apply_fn(prefix, mod)
            # tree_flatten drops the first character of its prefix: ".mlp" gives "mlp.x".
            prefix = "." + prefix if prefix else ""
            stack.extend(
                tree_flatten(mod.children(), prefix=prefix, is_leaf=lambda x: isinstance(x, Module))
            )
        return self

    def modules(self) -> List["Module"]:
        """This module and every sub-module."""
        out: list = []
        self.apply_to_modules(lambda _, m: out.append(m))
        return out

    def named_modules(self) -> List[Tuple[str, "Module"]]:
        """``(path, module)`` for this module (path ``""``) and every sub-module."""
        out: list = []
        self.apply_to_modules(lambda k, m: out.append((k, m)))
        return out

    def _check_keys(self, keys: List[str], strict: bool) -> List[str]:
        keys = keys if isinstance(keys, list) else [keys]
        if strict:
            for k in keys:
                if k not in self:
                    raise KeyError(f"Module doesn't contain member {k}.")
        return keys

    def freeze(
        self,
        *,
        recurse: bool = True,
        keys: Optional[Union[str, List[str]]] = None,
        strict: bool = False,
    ) -> "Module":
        """Marks parameters as not trainable: all of them (or ``keys``, names local to each
        module), in sub-modules too with ``recurse``."""

        def freeze_one(_, m):
            local = keys
            if local is None:
                local = tree_flatten(
                    m.filter_and_map(
                        lambda mod, k, v: (
                            not isinstance(v, Module) and mod.valid_parameter_filter(mod, k, v)
                        )
                    )
                )
                # Dotted paths: the filters see "name.0" for items of lists and dicts.
                local = [k for k, _ in local]
            m._no_grad.update(m._check_keys(local, strict))

        if recurse:
            self.apply_to_modules(freeze_one)
        else:
            freeze_one("", self)
        return self

    def unfreeze(
        self,
        *,
        recurse: bool = True,
        keys: Optional[Union[str, List[str]]] = None,
        strict: bool = False,
    ) -> "Module":
        """Undoes :meth:`freeze`: all names (or ``keys``) become trainable again."""

        def unfreeze_one(_, m):
            if keys is None:
                m._no_grad.clear()
            else:
                m._no_grad.difference_update(m._check_keys(keys, strict))

        if recurse:
            self.apply_to_modules(unfreeze_one)
        else:
            unfreeze_one("", self)
        return self

    def train(self, mode: bool = True) -> "Module":
        """Sets training mode (``mode=False`` is evaluation mode) here and below."""

        def set_mode(_, m):
            m._training = mode

        self.apply_to_modules(set_mode)
        return self

    def eval(self) -> "Module":
        """Sets evaluation mode (dropout off, batch norm uses its running statistics)."""
        return self.train(False)

    def set_dtype(
        self, dtype: mx.Dtype, predicate: Optional[Callable[[mx.Dtype], bool]] = None
    ) -> None:
        """Casts the parameters whose dtype satisfies ``predicate`` (default: floating
        point) to ``dtype``."""
        if predicate is None:

            def predicate(d):
                return mx.issubdtype(d, mx.floating)

        self.apply(lambda x: x.astype(dtype) if predicate(x.dtype) else x)

    def load_weights(
        self, file_or_weights: Union[str, List[Tuple[str, mx.array]]], strict: bool = True
    ) -> "Module":
        """Loads parameters from a ``.npz``/``.safetensors`` file or a list of
        ``(path, array)`` pairs. With ``strict`` the names and shapes must match the
        module's exactly."""
        weights = file_or_weights
        if isinstance(weights, str):
            weights = list(mx.load(weights).items())
        elif not isinstance(weights, list):
            weights = list(dict(weights).items())
        if strict:
            new = dict(weights)
            cur = dict(tree_flatten(self.parameters()))
            extra = new.keys() - cur.keys()
            if extra:
                raise ValueError(f"Received parameters not in model: {' '.join(sorted(extra))}.")
            missing = cur.keys() - new.keys()
            if missing:
                raise ValueError(f"Missing parameters: {' '.join(sorted(missing))}.")
            for k, v in cur.items():
                w = new[k]
                if not isinstance(w, mx.array):
                    raise ValueError(
                        f"Expected mx.array but received {type(w).__name__} for parameter {k}"
                    )
                if tuple(v.shape) != tuple(w.shape):
                    raise ValueError(
                        f"Expected shape {tuple(v.shape)} but received shape "
                        f"{tuple(w.shape)} for parameter {k}"
                    )
        if weights:
            self.update(tree_unflatten(weights), strict=False)
        return self

    def save_weights(self, file: str) -> None:
        """Saves the parameters to ``file`` (``.npz`` or ``.safetensors``)."""
        params = dict(tree_flatten(self.parameters()))
        if file.endswith(".npz"):
            mx.savez(file, **params)
        elif file.endswith(".safetensors"):
            mx.save_safetensors(file, params)
        else:
            raise ValueError("Unsupported file extension. Use '.npz' or '.safetensors'.")


def _unwrap(model, key, value, filter_fn, map_fn, is_leaf_fn):
    """The filtered, mapped subtree under ``model[key]`` (paths inside plain containers
    are dotted, so filters see ``"layers.0"``)."""
    if is_leaf_fn(model, key, value):
        return map_fn(value)
    if isinstance(value, Module):
        return {
            k: _unwrap(value, k, v, filter_fn, map_fn, is_leaf_fn)
            for k, v in value.items()
            if filter_fn(value, k, v)
        }
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            sub = f"{key}.{k}"
            out[k] = (
                _unwrap(model, sub, v, filter_fn, map_fn, is_leaf_fn)
                if filter_fn(model, sub, v)
                else {}
            )
        return out
    if isinstance(value, list):
        out = []
        for i, v in enumerate(value):
            sub = f"{key}.{i}"
            out.append(
                _unwrap(model, sub, v, filter_fn, map_fn, is_leaf_fn)
                if filter_fn(model, sub, v)
                else {}
            )
        return out
    raise RuntimeError("Unexpected leaf found while traversing the module")
