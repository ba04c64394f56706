"""Property tests (hypothesis, skipped when it is not installed): float printing against
C's %g, and basic indexing against numpy."""

import kiln.core as mx
import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(st.floats(allow_nan=False, width=64))
def test_float64_repr_is_printf_g(v):
    # MLX prints through a C++ stream: %g with 6 significant digits.
    assert repr(mx.array(v, dtype=mx.float64)) == f"array({v:g}, dtype=float64)"


@hypothesis.settings(max_examples=200, deadline=None)
@hypothesis.given(st.floats(allow_nan=False, width=32))
def test_float32_repr_is_printf_g(v):
    assert repr(mx.array([v])) == f"array([{v:g}], dtype=float32)"


bounds = st.one_of(st.none(), st.integers(-8, 8))
steps = st.one_of(st.none(), st.integers(-4, 4).filter(lambda s: s != 0))
index_entry = st.one_of(
    st.integers(-3, 2),
    st.builds(slice, bounds, bounds, steps),
    st.just(None),
)


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(st.lists(index_entry, min_size=0, max_size=4), st.booleans(), st.integers(0, 4))
def test_basic_indexing_like_numpy(entries, ellipsis, at):
    x = np.arange(3 * 4 * 5).reshape(3, 4, 5)
    index = list(entries)
    if ellipsis:
        index.insert(min(at, len(index)), Ellipsis)
    index = tuple(index)
    try:
        expected = x[index]
    except IndexError:
        # numpy raises IndexError for too many indices; MLX (and kiln) raise ValueError.
        with pytest.raises((IndexError, ValueError)):
            mx.array(x)[index]
        return
    np.testing.assert_array_equal(np.array(mx.array(x)[index]), expected)
