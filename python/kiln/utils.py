"""Helpers for Python trees (nested lists, tuples and dicts), as ``mlx.utils``.

A tree's containers are lists, tuples (NamedTuples keep their type) and dicts; everything
else is a leaf unless ``is_leaf`` says otherwise. Paths use dot notation: ``"layers.0.w"``.
"""

from __future__ import annotations

from typing import Any, Callable, Optional


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def _rebuild(like: Any, children: list) -> Any:
    """A container of the same type as ``like`` holding ``children``."""
    if _is_namedtuple(like):
        return type(like)(*children)
    return type(like)(children)


def _children(tree: Any, is_leaf: Optional[Callable]):
    """(key, child) pairs of a container, or None for a leaf."""
    if is_leaf is not None and is_leaf(tree):
        return None
    if isinstance(tree, (list, tuple)):
        return list(enumerate(tree))
    if isinstance(tree, dict):
        return list(tree.items())
    return None


def tree_map(fn: Callable, tree: Any, *rest: Any, is_leaf: Optional[Callable] = None) -> Any:
    """Applies ``fn`` to every leaf of ``tree`` and returns a tree of the results.

    Each tree in ``rest`` must contain ``tree``'s structure; its matching subtrees are passed
    to ``fn`` as extra positional arguments.
    """
    return tree_map_with_path(lambda _, *xs: fn(*xs), tree, *rest, is_leaf=is_leaf)


def tree_map_with_path(
    fn: Callable,
    tree: Any,
    *rest: Any,
    is_leaf: Optional[Callable] = None,
    path: Optional[Any] = None,
) -> Any:
    """As :func:`tree_map`, with each leaf's dotted path as ``fn``'s first argument."""
    children = _children(tree, is_leaf)
    if children is None:
        return fn(path, tree, *rest)

    def sub(key):
        return f"{path}.{key}" if path is not None else str(key)

    mapped = [
        (k, tree_map_with_path(fn, child, *(r[k] for r in rest), is_leaf=is_leaf, path=sub(k)))
        for k, child in children
    ]
    if isinstance(tree, dict):
        return type(tree)(mapped) if type(tree) is not dict else dict(mapped)
    return _rebuild(tree, [v for _, v in mapped])


def tree_flatten(
    tree: Any,
    prefix: str = "",
    is_leaf: Optional[Callable] = None,
    destination: Optional[list | dict] = None,
) -> list | dict:
    """Flattens a tree to ``[(path, leaf), ...]`` (or into ``destination``, a list or dict).

    The first character of ``prefix`` is dropped, so ``prefix=".a"`` gives paths ``a.0``...
    """
    out = [] if destination is None else destination
    add = out.append if isinstance(out, list) else (lambda kv: out.__setitem__(*kv))
    stack = [(prefix, tree)]
    while stack:  # iterative: deep trees do not hit the recursion limit
        path, node = stack.pop()
        children = _children(node, is_leaf)
        if children is None:
            add((path[1:], node))
        else:
            stack.extend((f"{path}.{k}", c) for k, c in reversed(children))
    return out


class _Level(dict):
    """A level of the tree ``tree_unflatten`` is building (never a leaf)."""


def tree_unflatten(tree: list | dict) -> Any:
    """Rebuilds a tree from ``tree_flatten``'s output; levels whose keys are all integers
    become lists, others dicts."""
    items = tree.items() if isinstance(tree, dict) else tree
    root = _Level()
    for path, value in items:
        keys = path.split(".") if path else [""]
        node = root
        for k in keys[:-1]:
            node = node.setdefault(k, _Level())
        node[keys[-1]] = value

    def build(node):
        # Only the levels made here are rebuilt: a leaf that is a dict (an nn.Module, say)
        # is returned as it is.
        if not isinstance(node, _Level):
            return node
        if not node:
            return {}
        if all(k.isdigit() for k in node):
            # Missing indices become empty dicts, as MLX ("a.0", "a.2" -> [x, {}, y]), so
            # a module list with parameter-less layers keeps its positions.
            items = {int(k): v for k, v in node.items()}
            return [build(items[i]) if i in items else {} for i in range(max(items) + 1)]
        return {k: build(v) for k, v in node.items()}

    if list(root) == [""]:
        return root[""]
    return build(root)


_MISSING = object()


def tree_reduce(fn: Callable, tree: Any, initializer: Any = None, is_leaf: Optional[Callable] = None):
    """Folds ``fn(acc, leaf)`` over the leaves in order; without ``initializer`` the first
    leaf starts the accumulation."""
    acc = _MISSING if initializer is None else initializer
    for _, leaf in tree_flatten(tree, is_leaf=is_leaf):
        acc = leaf if acc is _MISSING else fn(acc, leaf)
    return None if acc is _MISSING else acc


def tree_merge(tree_a: Any, tree_b: Any, merge_fn: Optional[Callable] = None) -> Any:
    """Merges two trees into one holding the leaves of both, a deep ``dict.update``.

    Empty containers (and ``None``) count as empty subtrees, so the other tree's subtree
    is taken there. Sequences merge position by position (the longer one's tail is
    kept; the result has ``tree_a``'s type), dicts key by key (``tree_a``'s keys first).
    Where both trees hold a leaf, ``merge_fn(leaf_a, leaf_b)`` gives the result; without
    ``merge_fn`` that is a ``ValueError``.
    """

    def empty(t):
        return isinstance(t, (dict, list, tuple)) and len(t) == 0

    if empty(tree_a) and empty(tree_b):
        if type(tree_a) is not type(tree_b):
            raise ValueError(f"Cannot merge {type(tree_a).__name__} with {type(tree_b).__name__}")
        return type(tree_a)()
    a = None if empty(tree_a) else tree_a
    b = None if empty(tree_b) else tree_b
    # One side missing: the other's subtree is the result (both missing falls through to
    # merge_fn, as in MLX).
    if a is None and b is not None:
        return b
    if b is None and a is not None:
        return a
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        n = max(len(a), len(b))
        pad_a, pad_b = list(a) + [None] * (n - len(a)), list(b) + [None] * (n - len(b))
        return _rebuild(a, [tree_merge(x, y, merge_fn) for x, y in zip(pad_a, pad_b)])
    if isinstance(a, dict) and isinstance(b, dict):
        keys = list(a) + [k for k in b if k not in a]
        return {k: tree_merge(a.get(k), b.get(k), merge_fn) for k in keys}
    if merge_fn is None:
        raise ValueError(
            "Trees contain elements at the same locations but no merge function was provided"
        )
    return merge_fn(a, b)
