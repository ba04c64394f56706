"""The array class: construction and dtype inference, properties, conversions to Python and
numpy, repr (strings verified against MLX 0.32.4), indexing and errors."""

import copy

import kiln.core as mx
import numpy as np
import pytest
from conftest import ALL, INTS, NP, dt, make, name_of, to_np

# ---------------------------------------------------------------------------------------
# dtypes
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_dtype_objects(name):
    d = dt(name)
    assert d.size == np.dtype(NP[name]).itemsize or name == "bfloat16"
    assert d == getattr(mx, name) and hash(d) == hash(getattr(mx, name))
    assert repr(d) == f"kiln.core.{'bool' if name == 'bool_' else name}" == str(d)
    assert isinstance(d, mx.Dtype)
    assert d != "float32" and (d == mx.float32) == (name == "float32")


def test_dtype_sizes():
    assert [dt(n).size for n in ALL] == [1, 1, 2, 4, 8, 1, 2, 4, 8, 2, 2, 4, 8]


# ---------------------------------------------------------------------------------------
# Construction
# ---------------------------------------------------------------------------------------

INFER = [
    (True, "bool_", ()), (3, "int32", ()), (2**40, "int64", ()), (-(2**31) - 1, "int64", ()),
    (-(2**31), "int32", ()), (1.5, "float32", ()), ([1, 2], "int32", (2,)),
    ([1, 2.5], "float32", (2,)), ([True, False], "bool_", (2,)), ([True, 2], "int32", (2,)),
    ([True, 2.5], "float32", (2,)), ([1, 2**40], "int64", (2,)), ([], "float32", (0,)),
    ([[]], "float32", (1, 0)), ((), "float32", (0,)), (((1, 2), [3, 4]), "int32", (2, 2)),
    ([[1], [2.0]], "float32", (2, 1)), (np.int64(5), "int64", ()), (np.int8(1), "int8", ()),
    (np.float64(5), "float32", ()), (np.float16(1), "float16", ()), (np.bool_(1), "bool_", ()),
    (np.array(5.0), "float32", ()), (np.arange(3, dtype=np.uint16), "uint16", (3,)),
    (np.arange(3.0), "float32", (3,)), (np.array([True]), "bool_", (1,)),
]  # fmt: skip


@pytest.mark.parametrize("value,want,shape", INFER, ids=repr)
def test_inference(value, want, shape):
    a = mx.array(value)
    assert name_of(a.dtype) == want and a.shape == shape
    np.testing.assert_array_equal(to_np(a), np.asarray(value).astype(NP[want]))


def test_nested_arrays_and_mixed():
    assert mx.array([mx.array(1, dtype=mx.int8), mx.array(2, dtype=mx.int8)]).dtype == mx.int8
    assert mx.array([mx.array(1), 2]).tolist() == [1, 2]
    out = mx.array([mx.array([1.5]), mx.array([2])])
    assert out.dtype == mx.float32 and out.tolist() == [[1.5], [2.0]]
    assert mx.array([mx.array([1]), [2]]).tolist() == [[1], [2]]
    assert mx.array([np.array([1, 2]), [3, 4]]).dtype == mx.int64


@pytest.mark.parametrize(
    "value", [[[1, 2], [3]], [[1, 2], 3], [3, [1, 2]], [[[]], [1]], [[1], []]], ids=repr
)
def test_ragged(value):
    with pytest.raises(
        ValueError, match=r"\[array\] Initialization encountered non-uniform length"
    ):
        mx.array(value)


@pytest.mark.parametrize("value", ["abc", [1, "a"], {1: 2}, object(), [None]], ids=repr)
def test_invalid_types(value):
    with pytest.raises(ValueError, match=r"\[array\] Invalid type"):
        mx.array(value)


def test_construct_with_dtype():
    assert mx.array(300, dtype=mx.int8).item() == 44  # wraps, as MLX
    assert mx.array([300], dtype=mx.int8).tolist() == [44]
    assert mx.array(1.7, dtype=mx.int32).item() == 1
    assert mx.array(-1, dtype=mx.uint8).item() == 255
    assert mx.array([1.7, -1.7], dtype=mx.uint8).tolist() == [1, 255]
    assert mx.array(0.1, dtype=mx.float64).item() == 0.1  # no trip through float32
    assert mx.array([2**40 + 1], dtype=mx.float64).item() == 2**40 + 1
    assert mx.array([1, 2.5], dtype=mx.bool_).tolist() == [True, True]
    assert mx.array(2**64 - 1, dtype=mx.uint64).item() == 2**64 - 1
    assert mx.array(mx.arange(3), dtype=mx.float32).dtype == mx.float32
    assert mx.array(np.arange(3.0), dtype=mx.float64).dtype == mx.float64
    assert mx.array([1, 2], mx.float16).dtype == mx.float16


@pytest.mark.parametrize("name", [n for n in ALL if n != "bfloat16"])
@pytest.mark.parametrize("view", ["plain", "transposed", "reversed", "fortran", "big_endian"])
def test_from_numpy(name, view, rng):
    x = (rng.standard_normal((3, 4)) * 5).astype(NP[name])
    x = {
        "plain": x,
        "transposed": x.T,
        "reversed": x[::-1, ::-2],
        "fortran": np.asfortranarray(x),
        "big_endian": x.astype(x.dtype.newbyteorder(">")),
    }[view]
    a = mx.array(x)
    want = "float32" if name == "float64" else name
    assert name_of(a.dtype) == want
    np.testing.assert_array_equal(to_np(a), x.astype(NP[want]))


def test_from_numpy_unsupported():
    with pytest.raises(ValueError, match=r"\[array\] Unsupported numpy dtype"):
        mx.array(np.array(["a", "b"]))


# ---------------------------------------------------------------------------------------
# Properties and conversions
# ---------------------------------------------------------------------------------------


def test_properties():
    a = mx.zeros((2, 3), mx.int16)
    assert a.shape == (2, 3) and isinstance(a.shape, tuple)
    assert (a.ndim, a.size, a.nbytes, a.itemsize, a.dtype) == (2, 6, 12, 2, mx.int16)
    assert a.T.shape == (3, 2) and mx.array(3).T.shape == ()
    assert len(a) == 2
    with pytest.raises(TypeError):
        len(mx.array(1))


@pytest.mark.parametrize("name", ALL)
def test_tolist_and_item(name, rng):
    a, x = make(name, (2, 3), rng)
    values = a.tolist()
    py_type = bool if name == "bool_" else int if name in INTS else float
    assert all(type(v) is py_type for row in values for v in row)
    np.testing.assert_array_equal(np.array(values, dtype=np.float64), x.astype(np.float64))
    item = a[1, 2].item()
    assert type(item) is py_type and item == values[1][2]
    assert a[0, 0].tolist() == values[0][0]  # 0-d: a scalar
    assert mx.zeros((2, 0), dt(name)).tolist() == [[], []]


def test_item_errors_and_scalars():
    with pytest.raises(ValueError, match=r"\[item\]"):
        mx.arange(6).item()
    assert mx.array([[3]]).item() == 3
    assert mx.array(1.5, dtype=mx.float16).item() == 1.5
    assert type(mx.array(1, dtype=mx.uint64).item()) is int
    assert mx.array(2**64 - 1, dtype=mx.uint64).item() == 2**64 - 1
    assert mx.array([1.5], dtype=mx.bfloat16).tolist() == [1.5]


def test_python_number_protocols():
    assert bool(mx.array([3])) is True and bool(mx.array(0.0)) is False
    assert float(mx.array([3])) == 3.0 and int(mx.array(3.7)) == 3 and int(mx.array(-3.7)) == -3
    assert int(mx.array(True)) == 1 and int(mx.array(2**40)) == 2**40
    for fn in (bool, float, int):
        with pytest.raises(ValueError, match="size-1"):
            fn(mx.array([1, 2]))
    with pytest.raises(ValueError):
        int(mx.array(float("nan")))


@pytest.mark.parametrize("name", [n for n in ALL if n != "bfloat16"])
@pytest.mark.parametrize("shape", [(), (4,), (2, 3), (2, 0)], ids=str)
def test_numpy_conversion(name, shape, rng):
    a, x = make(name, shape, rng, special=True)
    for y in (np.array(a), np.asarray(a)):
        assert y.dtype == NP[name] and y.shape == shape
        np.testing.assert_array_equal(y, x)
    # Views convert in logical order.
    if len(shape) == 2:
        np.testing.assert_array_equal(np.array(a.T), x.T)
        np.testing.assert_array_equal(np.array(a[::-1, ::2]), x[::-1, ::2])
    np.testing.assert_array_equal(np.array(a, dtype=np.float64), x.astype(np.float64))
    y = np.array(a, copy=True)
    y[...] = 0  # a fresh, writable copy


def test_numpy_bfloat16_raises_like_mlx():
    with pytest.raises(ValueError, match=r"\[__array__\].*bfloat16"):
        np.array(mx.array([1.0], dtype=mx.bfloat16))
    np.testing.assert_array_equal(to_np(mx.array([1.5], dtype=mx.bfloat16)), [1.5])


def test_iteration():
    a = mx.arange(6).reshape(2, 3)
    rows = list(a)
    assert len(rows) == 2 and rows[1].tolist() == [3, 4, 5]
    assert [r.item() for r in mx.arange(3)] == [0, 1, 2]
    assert list(mx.zeros((0, 2))) == []
    with pytest.raises(TypeError):
        iter(mx.array(3))


def test_immutable_and_hashable():
    a = mx.arange(3)
    b = a[...]
    a[0] = 1  # rebinds `a` to a new array; the data `b` holds stay as they were
    assert a.tolist() == [1, 1, 2] and b.tolist() == [0, 1, 2]
    assert hash(a) == hash(a)
    assert copy.copy(a) is not a and copy.deepcopy(a).tolist() == a.tolist()


# ---------------------------------------------------------------------------------------
# Indexing
# ---------------------------------------------------------------------------------------

INDICES = [
    1, -1, (0, 2), (-1, -2, -3), slice(None), slice(1, 3), slice(None, None, -1),
    slice(None, None, 2), slice(None, None, -2), slice(3, 0, -1), slice(-2, None),
    slice(10, 20), slice(-10, 2), slice(None, -10, -1), slice(0, 0),
    (slice(None), 1), (Ellipsis, 0), (0, Ellipsis), (Ellipsis, None), (None, Ellipsis, None),
    (None,), (1, None, slice(None, None, -1)), (Ellipsis,), (slice(1, None, 2), Ellipsis, slice(None, None, -3)),
    (np.int64(1), slice(None)), (slice(None, None, 2**62),), (slice(2**70, None),),
    (slice(None, None, -(2**62)),), (slice(-(2**70), 2**70),),
]  # fmt: skip


@pytest.mark.parametrize("index", INDICES, ids=repr)
@pytest.mark.parametrize("view", ["plain", "transposed"])
def test_getitem(index, view):
    x = np.arange(4 * 5 * 6, dtype=np.int32).reshape(4, 5, 6)
    a = mx.array(x)
    if view == "transposed":
        x, a = x.transpose(2, 0, 1)[::-1], a.transpose(2, 0, 1)[::-1]
    out = a[index]
    np.testing.assert_array_equal(np.array(out), x[index])


def test_getitem_0d_and_chained():
    a = mx.array(3)
    assert a[None].tolist() == [3] and a[...].item() == 3
    b = mx.arange(24).reshape(2, 3, 4)
    assert b[1][2][3].item() == 23 and b[:, ::-1][0, 0].tolist() == [8, 9, 10, 11]


@pytest.mark.parametrize(
    "index,exc,pattern",
    [
        (5, IndexError, r"\[index\].*out of bounds"),
        (-6, IndexError, r"\[index\].*out of bounds"),
        ((0, 9), IndexError, r"\[index\].*out of bounds"),
        (2**70, IndexError, r"\[index\]"),
        ((0, 0, 0), ValueError, r"\[index\] Too many indices"),
        ((Ellipsis, Ellipsis), ValueError, r"\[index\].*ellipsis"),
        (slice(None, None, 0), ValueError, r"step cannot be zero"),
        (1.5, ValueError, r"\[__getitem__\] Cannot index"),
        ("x", ValueError, r"\[__getitem__\] Cannot index"),
        ([1.0], ValueError, r"Indices must be integral"),
        ([True, False], ValueError, r"boolean"),
        (True, ValueError, r"\[__getitem__\] Cannot index"),
    ],
    ids=repr,
)
def test_getitem_errors(index, exc, pattern):
    with pytest.raises(exc, match=pattern):
        mx.zeros((5, 3))[index]


def test_slice_bounds_must_be_ints():
    with pytest.raises(TypeError):
        mx.zeros((5,))[1.5:]


# ---------------------------------------------------------------------------------------
# repr: strings printed by MLX 0.32.4 for the same arrays
# ---------------------------------------------------------------------------------------

REPRS = [
    (lambda: mx.array([[1.5, 2], [3, 4]]), "array([[1.5, 2],\n       [3, 4]], dtype=float32)"),
    (lambda: mx.array(3), "array(3, dtype=int32)"),
    (lambda: mx.array([True, False]), "array([True, False], dtype=bool)"),
    (lambda: mx.array([]), "array([], dtype=float32)"),
    (lambda: mx.array([float("nan"), float("inf"), -float("inf"), 1.0]), "array([nan, inf, -inf, 1], dtype=float32)"),
    (lambda: -mx.array(float("nan")), "array(-nan, dtype=float32)"),
    (lambda: mx.arange(6), "array([0, 1, 2, 3, 4, 5], dtype=int32)"),
    (lambda: mx.arange(7), "array([0, 1, 2, ..., 4, 5, 6], dtype=int32)"),
    (lambda: mx.arange(100), "array([0, 1, 2, ..., 97, 98, 99], dtype=int32)"),
    (lambda: mx.arange(12).reshape(3, 4), "array([[0, 1, 2, 3],\n       [4, 5, 6, 7],\n       [8, 9, 10, 11]], dtype=int32)"),
    (lambda: mx.arange(2000).reshape(100, 20), "array([[0, 1, 2, ..., 17, 18, 19],\n       [20, 21, 22, ..., 37, 38, 39],\n       [40, 41, 42, ..., 57, 58, 59],\n       ...,\n       [1940, 1941, 1942, ..., 1957, 1958, 1959],\n       [1960, 1961, 1962, ..., 1977, 1978, 1979],\n       [1980, 1981, 1982, ..., 1997, 1998, 1999]], dtype=int32)"),
    (lambda: mx.arange(2002).reshape(1001, 2), "array([[0, 1],\n       [2, 3],\n       [4, 5],\n       ...,\n       [1996, 1997],\n       [1998, 1999],\n       [2000, 2001]], dtype=int32)"),
    (lambda: mx.arange(8 * 2 * 8).reshape(8, 2, 8), "array([[[0, 1, 2, ..., 5, 6, 7],\n        [8, 9, 10, ..., 13, 14, 15]],\n       [[16, 17, 18, ..., 21, 22, 23],\n        [24, 25, 26, ..., 29, 30, 31]],\n       [[32, 33, 34, ..., 37, 38, 39],\n        [40, 41, 42, ..., 45, 46, 47]],\n       ...,\n       [[80, 81, 82, ..., 85, 86, 87],\n        [88, 89, 90, ..., 93, 94, 95]],\n       [[96, 97, 98, ..., 101, 102, 103],\n        [104, 105, 106, ..., 109, 110, 111]],\n       [[112, 113, 114, ..., 117, 118, 119],\n        [120, 121, 122, ..., 125, 126, 127]]], dtype=int32)"),
    (lambda: mx.arange(24).reshape(2, 3, 4), "array([[[0, 1, 2, 3],\n        [4, 5, 6, 7],\n        [8, 9, 10, 11]],\n       [[12, 13, 14, 15],\n        [16, 17, 18, 19],\n        [20, 21, 22, 23]]], dtype=int32)"),
    (lambda: mx.arange(24.0).reshape(2, 3, 4) / 7, "array([[[0, 0.142857, 0.285714, 0.428571],\n        [0.571429, 0.714286, 0.857143, 1],\n        [1.14286, 1.28571, 1.42857, 1.57143]],\n       [[1.71429, 1.85714, 2, 2.14286],\n        [2.28571, 2.42857, 2.57143, 2.71429],\n        [2.85714, 3, 3.14286, 3.28571]]], dtype=float32)"),
    (lambda: mx.array(1e10), "array(1e+10, dtype=float32)"),
    (lambda: mx.array(123456.7), "array(123457, dtype=float32)"),
    (lambda: mx.array([123456.5], dtype=mx.float64), "array([123456], dtype=float64)"),
    (lambda: mx.array(999999.5), "array(1e+06, dtype=float32)"),
    (lambda: mx.array([1e-5, 1.0]), "array([1e-05, 1], dtype=float32)"),
    (lambda: mx.array(0.00001234567), "array(1.23457e-05, dtype=float32)"),
    (lambda: mx.array([123456789.0]), "array([1.23457e+08], dtype=float32)"),
    (lambda: mx.array([0.1, 0.25]), "array([0.1, 0.25], dtype=float32)"),
    (lambda: mx.array(-0.0), "array(-0, dtype=float32)"),
    (lambda: mx.array([1e100], dtype=mx.float64), "array([1e+100], dtype=float64)"),
    (lambda: mx.array(1 / 3, dtype=mx.float64), "array(0.333333, dtype=float64)"),
    (lambda: mx.array([1.0 / 3], dtype=mx.bfloat16), "array([0.333984], dtype=bfloat16)"),
    (lambda: mx.array([65504, 1e-7], dtype=mx.float16), "array([65504, 1.19209e-07], dtype=float16)"),
    (lambda: mx.array([0.5, 1e16], dtype=mx.float16), "array([0.5, inf], dtype=float16)"),
    (lambda: mx.array([-1, 2, 300], dtype=mx.int16), "array([-1, 2, 300], dtype=int16)"),
    (lambda: mx.array([200], dtype=mx.uint8), "array([200], dtype=uint8)"),
    (lambda: mx.array(2**63 - 1, dtype=mx.int64), "array(9223372036854775807, dtype=int64)"),
    (lambda: mx.array([1, 2], dtype=mx.uint64), "array([1, 2], dtype=uint64)"),
    (lambda: mx.zeros((2, 0)), "array([[],\n       []], dtype=float32)"),
    (lambda: mx.zeros((0, 3)), "array([], dtype=float32)"),
    (lambda: mx.zeros((1, 0, 2)), "array([[]], dtype=float32)"),
    (lambda: mx.zeros((2, 3, 0)), "array([[[],\n        [],\n        []],\n       [[],\n        [],\n        []]], dtype=float32)"),
    (lambda: mx.zeros((1, 1, 1)), "array([[[0]]], dtype=float32)"),
    (lambda: mx.array(True), "array(True, dtype=bool)"),
    (lambda: mx.array([[True] * 8] * 8), "array([[True, True, True, ..., True, True, True],\n       [True, True, True, ..., True, True, True],\n       [True, True, True, ..., True, True, True],\n       ...,\n       [True, True, True, ..., True, True, True],\n       [True, True, True, ..., True, True, True],\n       [True, True, True, ..., True, True, True]], dtype=bool)"),
    (lambda: mx.arange(6).reshape(2, 3).T, "array([[0, 3],\n       [1, 4],\n       [2, 5]], dtype=int32)"),
    (lambda: mx.arange(6)[::-2], "array([5, 3, 1], dtype=int32)"),
]  # fmt: skip


@pytest.mark.cpu  # MLX prints the CPU's NaN sign
@pytest.mark.parametrize("make_array,expected", REPRS, ids=[r[1][:40] for r in REPRS])
def test_repr_matches_mlx(make_array, expected):
    a = make_array()
    assert repr(a) == expected
    assert str(a) == expected
