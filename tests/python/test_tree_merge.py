"""kiln.utils.tree_merge: merging rules written out, and the same outcome as
mlx.utils.tree_merge over a table of trees (with and without a merge function)."""

from collections import OrderedDict, namedtuple

import kiln.core as mx
import numpy as np
import pytest
from kiln.utils import tree_flatten, tree_merge

Point = namedtuple("Point", "x y")


def test_deep_update():
    a = {"model": {"w": 1, "layers": [{"b": 2}, {}]}, "opt": {}}
    b = {"model": {"layers": [{}, {"b": 3}], "v": 4}, "opt": {"lr": 5}}
    got = tree_merge(a, b)
    assert got == {"model": {"w": 1, "layers": [{"b": 2}, {"b": 3}], "v": 4}, "opt": {"lr": 5}}
    assert list(got["model"]) == ["w", "layers", "v"]  # tree_a's keys first
    assert tree_merge([1, {}], [{}, 2, 3]) == [1, 2, 3]
    assert tree_merge((1, {}), [{}, 2]) == (1, 2)  # tree_a's container type
    assert tree_merge(Point(1, {}), ({}, 2)) == Point(1, 2)
    assert type(tree_merge(Point(1, {}), ({}, 2))) is Point
    assert tree_merge(None, {"a": 1}) == {"a": 1} and tree_merge([], 5) == 5
    assert tree_merge({}, {}) == {} and tree_merge((), ()) == ()


def test_leaf_conflicts_and_merge_fn():
    with pytest.raises(ValueError, match="no merge function"):
        tree_merge({"a": 1}, {"a": 2})
    with pytest.raises(ValueError, match="Cannot merge list with dict"):
        tree_merge([], {})
    assert tree_merge({"a": [1, 2]}, {"a": [3]}, merge_fn=lambda x, y: 10 * x + y) == {"a": [13, 2]}
    # Arrays are leaves: merge_fn combines them.
    x = {"w": mx.ones((2,)), "b": [mx.zeros((1,))]}
    y = {"w": mx.full((2,), 2.0), "b": [{}, mx.ones((3,))]}
    got = dict(tree_flatten(tree_merge(x, y, merge_fn=lambda p, q: p + q)))
    assert set(got) == {"w", "b.0", "b.1"}
    np.testing.assert_array_equal(np.array(got["w"]), [3.0, 3.0])
    assert got["b.1"].shape == (3,)


CASES = [
    ({"a": 1}, {"b": 2}),
    ({"a": 1}, {"a": 2}),
    ({"a": {"x": 1}}, {"a": {"y": 2}}),
    ({"a": [1, {}]}, {"a": [{}, 2]}),
    ([1, {}], [{}, 2, 3]),
    ([1, 2], (3, 4)),
    ((1, {}), ({}, 2)),
    ((1, {}), [{}, 2]),
    ({}, 5),
    (5, {}),
    ([], 5),
    ((), [1]),
    (None, 1),
    (1, None),
    (None, None),
    ({"a": 1}, [1]),
    (1, 2),
    (Point(1, {}), Point({}, 2)),
    (Point(1, {}), ({}, 2)),
    ({"a": {}}, {"a": {"b": 1}}),
    ({"a": 1, "b": {}}, {"b": 3, "c": {}}),
    ({}, {}),
    ([], {}),
    ({}, []),
    ((), ()),
    ([{}], [{}]),
    (OrderedDict(a=1), {"b": 2}),
    ({"a": [1, 2, {}]}, {"a": [{}, {}, 3, 4]}),
    ([None, 1], [2, None]),
]


def _outcome(fn, a, b, **kw):
    try:
        r = fn(a, b, **kw)
    except ValueError as e:
        return "error", str(e)
    return "ok", r, type(r)


@pytest.mark.parametrize("merge_fn", [None, lambda x, y: (x, y)])
def test_matches_mlx(merge_fn):
    mlx_utils = pytest.importorskip("mlx.utils")
    diffs = [
        (a, b)
        for a, b in CASES
        if _outcome(tree_merge, a, b, merge_fn=merge_fn)
        != _outcome(mlx_utils.tree_merge, a, b, merge_fn=merge_fn)
    ]
    assert not diffs
