"""kiln.utils against mlx.utils' documented behaviour."""

from collections import namedtuple

import pytest

import kiln.core as mx
from kiln.utils import tree_flatten, tree_map, tree_map_with_path, tree_reduce, tree_unflatten

Pair = namedtuple("Pair", ["a", "b"])


def test_tree_map_keeps_structure_and_types():
    tree = {"w": [1, 2, (3, 4)], "p": Pair(5, 6)}
    out = tree_map(lambda x: x * 10, tree)
    assert out == {"w": [10, 20, (30, 40)], "p": Pair(50, 60)}
    assert isinstance(out["w"][2], tuple) and isinstance(out["p"], Pair)


def test_tree_map_rest_and_is_leaf():
    assert tree_map(lambda x, y: x + y, [1, {"a": 2}], [10, {"a": 20, "b": 0}]) == [11, {"a": 22}]
    out = tree_map(len, {"a": [1, 2], "b": [3]}, is_leaf=lambda x: isinstance(x, list))
    assert out == {"a": 2, "b": 1}


def test_tree_map_on_arrays():
    params = {"w": mx.ones((2, 2)), "b": [mx.zeros((2,))]}
    doubled = tree_map(lambda x: x * 2 + 1, params)
    assert doubled["w"].tolist() == [[3.0, 3.0], [3.0, 3.0]]
    assert doubled["b"][0].tolist() == [1.0, 1.0]


def test_tree_map_with_path():
    seen = []
    tree = {"model": [{"w": 0, "b": 1}, {"w": 0, "b": 1}]}
    tree_map_with_path(lambda path, _: seen.append(path), tree)
    assert seen == ["model.0.w", "model.0.b", "model.1.w", "model.1.b"]


def test_flatten_unflatten_round_trip():
    assert tree_flatten([[[0]]]) == [("0.0.0", 0)]
    assert tree_flatten([[[0]]], prefix=".hello") == [("hello.0.0.0", 0)]
    assert tree_flatten({"a": {"b": 1}}, destination={}) == {"a.b": 1}
    assert tree_unflatten([("hello.world", 42)]) == {"hello": {"world": 42}}
    tree = {"layers": [{"w": 1, "b": 2}, {"w": 3, "b": 4}], "head": 5}
    assert tree_unflatten(tree_flatten(tree)) == tree
    assert tree_unflatten(dict(tree_flatten(tree))) == tree
    # A missing list index (a parameter-less layer) keeps its place, as in MLX.
    assert tree_unflatten([("a.0", 1), ("a.2", 3)]) == {"a": [1, {}, 3]}


def test_flatten_deep_tree_without_recursion():
    tree = 0
    for _ in range(5000):
        tree = [tree]
    assert tree_flatten(tree)[0][1] == 0


@pytest.mark.parametrize("init,want", [(None, 15), (100, 115)])
def test_tree_reduce(init, want):
    assert tree_reduce(lambda acc, x: acc + x, {"a": [1, 2, 3], "b": [4, 5]}, init) == want


def test_tree_reduce_empty():
    assert tree_reduce(lambda a, x: a + x, []) is None
