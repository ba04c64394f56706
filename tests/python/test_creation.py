"""Creation and matrix-structure ops against numpy: zeros_like, ones_like, full_like,
linspace, eye, identity, tri, tril, triu, meshgrid, diag, diagonal, over dtypes, shapes,
views and their exceptions (as MLX 0.32 raises them).
"""

import kiln.core as mx
import numpy as np
import pytest
from conftest import ALL, FLOATS, INTS, NP, assert_matches, dt, make, name_of, to_np, view_variants

# ---------------------------------------------------------------------------------------
# *_like
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("shape", [(), (3,), (2, 3), (0, 2)], ids=str)
def test_zeros_ones_like(name, shape, rng):
    for kind, a, x in view_variants(name, shape, rng):
        for fn, ref in [(mx.zeros_like, np.zeros_like), (mx.ones_like, np.ones_like)]:
            out = fn(a)
            assert out.dtype == dt(name) and out.shape == x.shape, kind
            assert_matches(out, ref(x), name)
            out = fn(a, mx.float16)
            assert out.dtype == mx.float16
            assert_matches(out, ref(x, dtype=np.float16), "float16")


@pytest.mark.parametrize("name", ALL)
def test_full_like(name, rng):
    for kind, a, x in view_variants(name, (2, 3), rng):
        out = mx.full_like(a, 1)
        assert out.dtype == dt(name), kind
        assert_matches(out, np.ones_like(x), name)
        out = mx.full_like(a, 2.5, mx.float32)
        assert out.dtype == mx.float32 and to_np(out).tolist() == [[2.5] * 3] * 2
        vals, v = make(name, (3,), rng)
        out = mx.full_like(a, vals)
        assert out.dtype == dt(name)
        assert_matches(out, np.broadcast_to(v, (2, 3)), name)


def test_full_like_as_mlx():
    i8 = mx.array([1, 2], dtype=mx.int8)
    assert mx.full_like(i8, 3.7).tolist() == [3, 3] and mx.full_like(i8, 3.7).dtype == mx.int8
    assert mx.full_like(i8, mx.array([5, 6], dtype=mx.int32)).dtype == mx.int8
    assert mx.full_like(mx.array([1.0, 2.0]), True).tolist() == [1.0, 1.0]
    assert np.isnan(to_np(mx.full_like(mx.array([1.0]), float("nan")))).all()
    assert mx.full_like(mx.zeros((2, 0)), 1).shape == (2, 0)
    with pytest.raises(ValueError, match="Converting 300 to int8 would result in overflow"):
        mx.full_like(i8, 300)
    with pytest.raises(ValueError, match="would result in overflow"):
        mx.full_like(mx.array([1], dtype=mx.uint8), -1)
    with pytest.raises(ValueError, match="broadcast"):
        mx.full_like(i8, mx.array([5, 6, 7]))


# ---------------------------------------------------------------------------------------
# linspace
# ---------------------------------------------------------------------------------------


def linspace_f32(start, stop, num, endpoint):
    """MLX's formula, in float32: (1 - t) * start + t * stop, t = i / (num - 1)."""
    steps = num - 1 if endpoint else num
    t = np.arange(num, dtype=np.float32) / np.float32(steps)
    return (np.float32(1) - t) * np.float32(start) + t * np.float32(stop)


LINSPACE = [(0, 1, 5), (-3, 7, 7), (2.5, -1.25, 11), (0, 10, 4), (5, 5, 3), (0, 1, 2), (1e3, -1e3, 50)]


@pytest.mark.parametrize("start,stop,num", LINSPACE, ids=str)
@pytest.mark.parametrize("endpoint", [True, False])
@pytest.mark.parametrize("name", ALL)
def test_linspace(start, stop, num, endpoint, name):
    out = mx.linspace(start, stop, num, endpoint=endpoint, dtype=dt(name))
    assert out.dtype == dt(name) and out.shape == (num,)
    lo, hi = min(start, stop), max(start, stop)
    if name in INTS and (hi > 127 or lo < (0 if name.startswith("u") else -128)):
        return  # float -> int conversion out of range: C leaves it undefined, numpy too
    if name == "float64":
        expected = np.linspace(start, stop, num, endpoint=endpoint)
        assert_matches(out, expected, name, rtol=1e-12, atol=1e-12)
    else:
        # float32 arithmetic as MLX, then converted (integers truncate).
        expected = linspace_f32(start, stop, num, endpoint)
        if name == "bool_":
            expected = expected != 0
        with np.errstate(invalid="ignore"):
            expected = expected.astype(NP[name])
        assert_matches(out, expected, name)
        # And close to numpy's own linspace for float results.
        if name == "float32":
            np.testing.assert_allclose(
                to_np(out), np.linspace(start, stop, num, endpoint=endpoint), rtol=1e-5, atol=1e-4
            )


def test_linspace_as_mlx():
    assert mx.linspace(-3, 7, 7).tolist() == [
        -3.0, -1.3333332538604736, 0.3333336114883423, 2.0, 3.6666669845581055,
        5.3333330154418945, 7.0,
    ]  # fmt: skip
    assert mx.linspace(-3, 7, 7, endpoint=False).tolist() == [
        -3.0, -1.5714285373687744, -0.14285707473754883, 1.2857143878936768,
        2.7142858505249023, 4.142857074737549, 5.5714287757873535,
    ]  # fmt: skip
    assert mx.linspace(0, 10, 4, dtype=mx.int32).tolist() == [0, 3, 6, 10]
    assert mx.linspace(0, 10, 4, dtype=mx.bool_).tolist() == [False, True, True, True]
    assert mx.linspace(0, 1).shape == (50,) and mx.linspace(0, 1).dtype == mx.float32
    assert mx.linspace(0, 1, 1).tolist() == [0.0]
    assert mx.linspace(0, 1, 1, endpoint=False).tolist() == [0.0]
    assert mx.linspace(2.5, 2.5, 1, dtype=mx.int32).tolist() == [2]
    assert mx.linspace(0, 1, 0).shape == (0,)
    assert mx.linspace(mx.array(0), 1, 3).tolist() == [0.0, 0.5, 1.0]
    first = mx.linspace(0, float("inf"), 3).tolist()
    assert np.isnan(first[0]) and first[1:] == [float("inf")] * 2
    with pytest.raises(ValueError, match=r"\[linspace\] number of samples, -1, must be non-negative"):
        mx.linspace(0, 1, -1)
    with pytest.raises(TypeError):
        mx.linspace(0, 1, 2.0)
    with pytest.raises(TypeError):
        mx.linspace(0, 1, None)


# ---------------------------------------------------------------------------------------
# eye, identity, tri
# ---------------------------------------------------------------------------------------

GRIDS = [(3, None, 0), (2, 3, 1), (2, 3, -1), (4, 2, -3), (2, 3, 5), (3, 3, -5), (0, None, 0), (2, 0, 0), (1, 1, 0)]


@pytest.mark.parametrize("n,m,k", GRIDS, ids=str)
@pytest.mark.parametrize("name", ALL)
def test_eye_tri(n, m, k, name):
    out = mx.eye(n, m, k, dtype=dt(name))
    assert out.dtype == dt(name)
    assert_matches(out, np.eye(n, m, k, dtype=NP[name]), name)
    out = mx.tri(n, m, k, dtype=dt(name))
    assert out.dtype == dt(name)
    assert_matches(out, np.tri(n, m, k, dtype=NP[name]), name)


def test_eye_identity_tri_defaults_and_errors():
    assert mx.eye(3).dtype == mx.float32 and mx.tri(2).dtype == mx.float32
    assert mx.eye(n=2, m=3).tolist() == [[1, 0, 0], [0, 1, 0]]
    assert mx.eye(3, k=-1).tolist() == [[0, 0, 0], [1, 0, 0], [0, 1, 0]]
    assert mx.eye(2, 3, 2**40).tolist() == [[0, 0, 0], [0, 0, 0]]
    assert mx.tri(2, 3, -(2**40)).tolist() == [[0, 0, 0], [0, 0, 0]]
    for n in range(4):
        out = mx.identity(n, dtype=mx.int16)
        assert out.dtype == mx.int16 and out.tolist() == np.identity(n, dtype=np.int16).tolist()
    assert mx.identity(2, dtype=mx.bool_).tolist() == [[True, False], [False, True]]
    assert mx.tri(-1).shape == (0, 0) and mx.tri(2, -3).shape == (2, 0)
    assert mx.tri(2, k=1, dtype=mx.bool_).tolist() == [[True, True], [True, True]]
    for bad in [lambda: mx.eye(-1), lambda: mx.eye(2, -1), lambda: mx.identity(-1)]:
        with pytest.raises(ValueError, match=r"\[eye\] N and M must be positive integers"):
            bad()
    with pytest.raises(TypeError):
        mx.eye(2.5)


# ---------------------------------------------------------------------------------------
# tril, triu
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("shape", [(3, 4), (4, 3), (2, 3, 4), (0, 3), (3, 0), (1, 1)], ids=str)
@pytest.mark.parametrize("k", [0, 1, -1, 3, -4, 100])
def test_tril_triu(name, shape, k, rng):
    for kind, a, x in view_variants(name, shape, rng, special=True):
        for fn, ref in [(mx.tril, np.tril), (mx.triu, np.triu)]:
            out = fn(a, k)
            assert out.dtype == dt(name), kind
            assert_matches(out, ref(x, k), name)


def test_tril_triu_errors_and_defaults():
    x = mx.arange(12).reshape(3, 4)
    assert mx.tril(x).tolist() == np.tril(np.arange(12).reshape(3, 4)).tolist()
    assert mx.triu(x, k=-(2**62)).tolist() == np.arange(12).reshape(3, 4).tolist()
    for fn in (mx.tril, mx.triu):
        with pytest.raises(ValueError, match=r"array must be at least 2-D"):
            fn(mx.ones((3,)))
        with pytest.raises(ValueError, match=r"array must be at least 2-D"):
            fn(mx.array(1))


# ---------------------------------------------------------------------------------------
# meshgrid
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("indexing", ["xy", "ij"])
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("sizes", [(3,), (3, 2), (3, 2, 4), (0, 2), (1, 3, 2, 2)], ids=str)
def test_meshgrid(indexing, sparse, sizes, rng):
    names = ["int32", "float32", "uint8", "float16"]
    arrays, refs = [], []
    for i, n in enumerate(sizes):
        a, x = make(names[i % len(names)], (n,), rng)
        arrays.append(a)
        refs.append(x)
    out = mx.meshgrid(*arrays, sparse=sparse, indexing=indexing)
    expected = np.meshgrid(*refs, sparse=sparse, indexing=indexing)
    assert isinstance(out, tuple) and len(out) == len(expected)
    for a, o, e in zip(arrays, out, expected):
        assert o.dtype == a.dtype  # no promotion between the inputs
        assert_matches(o, e, name_of(a.dtype))


def test_meshgrid_as_mlx():
    a, b = mx.array([[1, 2], [3, 4]]), mx.array([4, 5])
    x, y = mx.meshgrid(a, b)
    assert x.tolist() == [[1, 2, 3, 4]] * 2 and y.tolist() == [[4] * 4, [5] * 4]
    x, y = mx.meshgrid(mx.array(1), b)
    assert x.tolist() == [[1], [1]] and y.tolist() == [[4], [5]]
    assert mx.meshgrid() == ()
    x, y = mx.meshgrid(a, b, sparse=None, indexing=None)  # MLX's defaults
    assert x.shape == (2, 4) and y.shape == (2, 4)
    # A transposed view is flattened in its own (row-major) order.
    t = mx.arange(6).reshape(2, 3).T
    (g,) = mx.meshgrid(t)
    assert g.tolist() == [0, 3, 1, 4, 2, 5]
    with pytest.raises(ValueError, match=r"\[meshgrid\] Invalid indexing value"):
        mx.meshgrid(b, indexing="xx")


# ---------------------------------------------------------------------------------------
# diag, diagonal
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("k", [0, 1, 2, -1, -3, 10, -10])
def test_diag(name, k, rng):
    for kind, a, x in view_variants(name, (4,), rng, special=True):
        out = mx.diag(a, k)
        assert out.dtype == dt(name), kind
        assert_matches(out, np.diag(x, k), name)
    for shape in [(3, 4), (4, 3), (0, 2)]:
        for kind, a, x in view_variants(name, shape, rng, special=True):
            out = mx.diag(a, k)
            assert out.dtype == dt(name), kind
            assert_matches(out, np.diag(x, k), name)
            assert_matches(a.diag(k), np.diag(x, k), name)


DIAGONAL = [
    (0, 0, 1), (1, 1, 2), (-1, 2, 0), (0, -1, -3), (2, 0, 2), (-2, 1, 0), (5, 0, 1),
    (-5, 2, 1), (0, 2, 1),
]  # fmt: skip


@pytest.mark.parametrize("offset,axis1,axis2", DIAGONAL, ids=str)
@pytest.mark.parametrize("name", ["int32", "float16", "bool_", "uint64", "float64"])
def test_diagonal(offset, axis1, axis2, name, rng):
    for kind, a, x in view_variants(name, (2, 3, 4), rng, special=True):
        expected = np.diagonal(x, offset, axis1, axis2)
        out = mx.diagonal(a, offset, axis1, axis2)
        assert out.dtype == dt(name) and out.shape == expected.shape, kind
        assert_matches(out, expected, name)
        assert_matches(a.diagonal(offset, axis1, axis2), expected, name)


def test_diag_diagonal_as_mlx():
    x = mx.arange(24).reshape(2, 3, 4)
    assert mx.diagonal(x).tolist() == [[0, 16], [1, 17], [2, 18], [3, 19]]
    assert x.diagonal(1).tolist() == [[4, 20], [5, 21], [6, 22], [7, 23]]
    assert mx.diagonal(mx.arange(6).reshape(2, 3), 5).shape == (0,)
    assert mx.arange(6).reshape(2, 3).diag(1).tolist() == [1, 5]
    assert mx.diag(mx.array([1, 2, 3]), -2).tolist() == np.diag([1, 2, 3], -2).tolist()
    assert mx.diag(mx.array([])).shape == (0, 0)
    assert mx.diagonal(mx.zeros((0, 3)), 0).shape == (0,)
    with pytest.raises(ValueError, match=r"\[diag\] array must be 1-D or 2-D, got array with 0 dimensions"):
        mx.diag(mx.array(1))
    with pytest.raises(ValueError, match=r"\[diag\] array must be 1-D or 2-D"):
        mx.diag(mx.ones((2, 2, 2)))
    with pytest.raises(ValueError, match=r"\[diagonal\] axis1 and axis2 cannot be the same axis"):
        mx.diagonal(x, 0, 1, 1)
    with pytest.raises(ValueError, match=r"\[diagonal\] axis1 and axis2 cannot be the same"):
        mx.diagonal(x, 0, -1, 2)
    with pytest.raises(IndexError, match=r"\[diagonal\] Invalid axis2 5 for array with 3 dimensions"):
        mx.diagonal(x, 0, 1, 5)
    with pytest.raises(IndexError, match=r"\[diagonal\] Invalid axis1 -4"):
        mx.diagonal(x, 0, -4, 1)
    with pytest.raises(ValueError, match=r"\[diagonal\] Array must have at least two dimensions"):
        mx.diagonal(mx.arange(3))


@pytest.mark.parametrize("name", FLOATS)
def test_diagonal_of_contiguous_input_is_a_view(name):
    # Same values whether or not the plane is contiguous (copy vs view paths).
    x = mx.arange(16).reshape(4, 4).astype(dt(name))
    ref = np.arange(16).reshape(4, 4)
    assert_matches(mx.diagonal(x), np.diagonal(ref), name)
    assert_matches(mx.diagonal(x.T, 1), np.diagonal(ref.T, 1), name)
    assert_matches(mx.diagonal(x[::-1, ::-2], -1), np.diagonal(ref[::-1, ::-2], -1), name)


def test_arange_keeps_the_sign_of_a_negative_zero_start():
    # numpy and MLX: element 0 is `start` itself.
    for dt in (mx.float32, mx.float16, mx.bfloat16):
        a = np.array(mx.arange(-0.0, 3.0, dtype=dt).astype(mx.float32))
        assert np.signbit(a[0]) and a.tolist() == [0.0, 1.0, 2.0]


def test_compiled_negative_zero_literal_on_every_call():
    # The fused interpreter tier (first calls) builds literals with arange.
    f = mx.compile(lambda x: (x + 0.5) * -0.0)
    x = mx.array([1.0, 2.0])
    for _ in range(3):
        assert np.signbit(np.array(f(x))).all()
