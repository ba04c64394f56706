"""Free functions against numpy: elementwise ops, reductions, shape ops, creation, matmul.

One parametrize row per op; every op runs over all dtypes it accepts, several shapes
(0-d, 1-d, 2-d/3-d, empty, broadcasting pairs) and view inputs (transposed, negative-step
slices). Float inputs include NaN and +-inf.
"""

import math
import statistics
import warnings

import kiln.core as mx
import numpy as np
import pytest
from conftest import (
    ALL,
    FLOATS,
    INTS,
    NP,
    PAIRS,
    RTOL,
    SHAPES,
    assert_matches,
    dt,
    is_float,
    looser,
    make,
    name_of,
    to_np,
    view_variants,
)

# MLX's promotion table (read off mlx.core 0.32.4), rows/columns in ORDER.
ORDER = ALL
_SHORT = {
    "b": "bool_", "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64", "f16": "float16",
    "bf16": "bfloat16", "f32": "float32", "f64": "float64",
}  # fmt: skip
_TABLE = """
   b   u8  u16  u32  u64   i8  i16  i32  i64  f16 bf16  f32  f64
  u8   u8  u16  u32  u64  i16  i16  i32  i64  f16 bf16  f32  f64
 u16  u16  u16  u32  u64  i32  i32  i32  i64  f16 bf16  f32  f64
 u32  u32  u32  u32  u64  i64  i64  i64  i64  f16 bf16  f32  f64
 u64  u64  u64  u64  u64  f32  f32  f32  f32  f16 bf16  f32  f64
  i8  i16  i32  i64  f32   i8  i16  i32  i64  f16 bf16  f32  f64
 i16  i16  i32  i64  f32  i16  i16  i32  i64  f16 bf16  f32  f64
 i32  i32  i32  i64  f32  i32  i32  i32  i64  f16 bf16  f32  f64
 i64  i64  i64  i64  f32  i64  i64  i64  i64  f16 bf16  f32  f64
 f16  f16  f16  f16  f16  f16  f16  f16  f16  f16  f32  f32  f64
bf16 bf16 bf16 bf16 bf16 bf16 bf16 bf16 bf16  f32 bf16  f32  f64
 f32  f32  f32  f32  f32  f32  f32  f32  f32  f32  f32  f32  f64
 f64  f64  f64  f64  f64  f64  f64  f64  f64  f64  f64  f64  f64
"""
PROMOTE = {
    (ORDER[i], ORDER[j]): _SHORT[cell]
    for i, row in enumerate(_TABLE.split("\n")[1:-1])
    for j, cell in enumerate(row.split())
}


def float_of(name):
    """The dtype float-only math computes in: floats keep theirs, the rest float32."""
    return name if is_float(name) else "float32"


# ---------------------------------------------------------------------------------------
# Unary ops
# ---------------------------------------------------------------------------------------


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _erfinv(x):
    normal = statistics.NormalDist()

    def one(v):
        if np.isnan(v) or abs(v) > 1:
            return np.nan
        if abs(v) == 1:
            return math.copysign(np.inf, v)
        return normal.inv_cdf((v + 1) / 2) / math.sqrt(2)

    return np.vectorize(one, otypes=[np.float64])(x)


# (name, numpy reference, float math?, input options, tolerance factor)
UNARY = [
    ("negative", np.negative, False, {}, 1),
    ("abs", np.abs, False, {}, 1),
    ("exp", np.exp, True, {"high": 6}, 2),
    ("log", np.log, True, {}, 2),
    ("sqrt", np.sqrt, True, {}, 1),
    ("sin", np.sin, True, {}, 2),
    ("tanh", np.tanh, True, {}, 2),
    ("sigmoid", lambda x: 1 / (1 + np.exp(-x)), True, {}, 2),
    ("erf", _erf, True, {"high": 3}, 4),
    ("erfinv", _erfinv, True, {"low": -1, "high": 1}, 20),
]


# The GPU's bounds, on top of the CPU's (its math functions differ by an ulp or two, and
# half results are rounded from float32 math that differs there).
GPU_TOL = {"float16": 2e-3, "bfloat16": 2e-2, "float32": 1e-5}


@pytest.mark.parametrize("op", UNARY, ids=[u[0] for u in UNARY])
@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_unary(op, name, shape, rng, device):
    fname, ref, float_math, options, tol = op
    fn = getattr(mx, fname)
    if fname == "negative" and name == "bool_":
        with pytest.raises(ValueError, match=r"\[negative\]"):
            fn(mx.zeros(shape, mx.bool_))
        return
    if fname == "erfinv" and not is_float(name):
        options = {"low": -1, "high": 1}
    for kind, a, x in view_variants(name, shape, rng, special=True, **options):
        if fname == "erfinv" and is_float(name):
            # Uniform in (-1, 1) plus the edges and one value outside the domain.
            x = rng.uniform(-1, 1, shape)
            if x.size >= 3:
                x.reshape(-1)[:3] = [1.0, -1.0, 1.5]
            a = mx.array(x, dtype=dt(name))
            x = to_np(a)
        out = fn(a)
        want = float_of(name) if float_math else name
        assert name_of(out.dtype) == want, kind
        with np.errstate(all="ignore"):
            expected = ref(x.astype(np.float64)) if float_math else ref(x)
        rtol = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 2e-6, "float64": 1e-13}.get(want, 0)
        rtol = looser(device, rtol * tol, rtol * tol + GPU_TOL.get(want, 0) * 4)
        assert_matches(out, expected, want, rtol=rtol, atol=rtol)


def test_unary_accepts_python_scalars():
    assert mx.exp(1).dtype == mx.float32
    assert mx.abs(-2).item() == 2
    np.testing.assert_allclose(mx.sqrt(2.0).item(), math.sqrt(2), rtol=1e-6)
    assert mx.negative(mx.array(2, dtype=mx.uint8)).item() == 254


# ---------------------------------------------------------------------------------------
# Binary ops
# ---------------------------------------------------------------------------------------


def _int_power(a, b):
    # MLX: square-and-multiply, any negative exponent gives 0.
    return np.where(b < 0, 0, np.power(a, np.maximum(b, 0)))


BOOL_RULES = {  # bool op bool stays bool in MLX
    "add": np.logical_or,
    "subtract": np.logical_xor,
    "multiply": np.logical_and,
    "maximum": np.logical_or,
    "minimum": np.logical_and,
    "power": lambda a, b: a | ~b,
}

# (name, numpy reference, result: "promote" | "float" | "bool", input options)
BINARY = [
    ("add", np.add, "promote", {}),
    ("subtract", np.subtract, "promote", {}),
    ("multiply", np.multiply, "promote", {}),
    ("divide", np.divide, "float", {}),
    ("maximum", np.maximum, "promote", {}),
    ("minimum", np.minimum, "promote", {}),
    ("power", np.power, "promote", {"low": -3, "high": 3}),
    ("equal", np.equal, "bool", {"low": -2, "high": 2}),
    ("not_equal", np.not_equal, "bool", {"low": -2, "high": 2}),
    ("less", np.less, "bool", {"low": -2, "high": 2}),
    ("less_equal", np.less_equal, "bool", {"low": -2, "high": 2}),
    ("greater", np.greater, "bool", {"low": -2, "high": 2}),
    ("greater_equal", np.greater_equal, "bool", {"low": -2, "high": 2}),
]


def binary_expected(fname, ref, result, x, y, na, nb):
    """numpy's answer computed in the dtype the op computes in."""
    compute = PROMOTE[(na, nb)]
    if result == "float":
        compute = float_of(compute)
    xs, ys = x.astype(NP[compute]), y.astype(NP[compute])
    with np.errstate(all="ignore"):
        if compute == "bool_" and fname in BOOL_RULES:
            return BOOL_RULES[fname](xs, ys), compute
        if fname == "power" and compute in INTS:
            return _int_power(xs, ys), compute
        out = ref(xs, ys)
    return out, ("bool_" if result == "bool" else compute)


def check_binary(op, na, nb, sa, sb, rng, views=False, device=None):
    fname, ref, result, options = op
    fn = getattr(mx, fname)
    left = (
        list(view_variants(na, sa, rng, special=True, **options))
        if views
        else [("plain",) + make(na, sa, rng, special=True, **options)]
    )
    for kind, a, x in left:
        b, y = make(nb, sb, rng, special=True, **options)
        if fname == "power" and nb in INTS and not is_float(PROMOTE[(na, nb)]):
            b, y = make(nb, sb, rng, low=-1, high=3)  # mostly non-negative exponents
        expected, want = binary_expected(fname, ref, result, x, y, na, nb)
        out = fn(a, b)
        assert name_of(out.dtype) == want, (kind, out.dtype, want)
        if want in GPU_TOL:
            rtol = 1e-2 if want in ("float16", "bfloat16") else 1e-5
            rtol = rtol if fname == "power" else RTOL[want]
            gpu = looser(device, rtol, rtol + GPU_TOL[want] * 4)
            assert_matches(out, expected, want, rtol=gpu, atol=looser(device, None, gpu))
        else:
            assert_matches(out, expected, want)


@pytest.mark.parametrize("op", BINARY, ids=[b[0] for b in BINARY])
@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("shapes", PAIRS, ids=str)
def test_binary_same_dtype(op, name, shapes, rng, device):
    check_binary(op, name, name, *shapes, rng, views=True, device=device)


@pytest.mark.parametrize("op", BINARY, ids=[b[0] for b in BINARY])
@pytest.mark.parametrize("na", ALL)
@pytest.mark.parametrize("nb", ALL)
def test_binary_promotion(op, na, nb, rng):
    check_binary(op, na, nb, (3, 1), (4,), rng)


# Shapes of more than one GPU block with a tail (the GPU's vectorised and unrolled
# elementwise kernels), float dtypes: every unary op of the GPU tests, and binary ops on a
# (5, 1, 33) x (4, 33) broadcast.
ROW_UNARY = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "sin": np.sin, "cos": np.cos,
    "tanh": np.tanh, "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "erf": _erf, "abs": np.abs,
    "negative": np.negative, "floor": np.floor, "ceil": np.ceil, "round": np.round,
    "rsqrt": lambda x: 1 / np.sqrt(x), "log1p": np.log1p, "expm1": np.expm1,
    "square": np.square, "sign": np.sign, "arctan": np.arctan,
}  # fmt: skip
ROW_FLOATS = ["float32", "float16", "bfloat16"]


def uniform(rng, shape, name, lo=-3.0, hi=3.0):
    a = mx.array(rng.uniform(lo, hi, size=shape).astype(np.float32)).astype(dt(name))
    return a, to_np(a).astype(np.float64)


@pytest.mark.parametrize("fname", list(ROW_UNARY))
@pytest.mark.parametrize("name", ROW_FLOATS)
def test_unary_rows_of_blocks(fname, name, rng, device):
    lo = 0.1 if fname in ("log", "sqrt", "rsqrt", "log1p") else -3.0
    a, x = uniform(rng, (37, 129), name, lo=lo)
    tol = RTOL[name] * 4
    tol = looser(device, tol, tol + GPU_TOL[name] * 4)
    assert_matches(getattr(mx, fname)(a), ROW_UNARY[fname](x), name, rtol=tol, atol=tol)


ROW_BINARY = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "maximum": np.maximum, "minimum": np.minimum, "power": np.power,
    "logaddexp": np.logaddexp, "arctan2": np.arctan2,
    # MLX: floor(a / b) and a - b * floor(a / b), computed in float32 for half floats.
    "floor_divide": lambda x, y: np.floor((x.astype(np.float32) / y.astype(np.float32))),
    "remainder": lambda x, y: np.remainder(x.astype(np.float32), y.astype(np.float32)),
}  # fmt: skip


@pytest.mark.parametrize("fname", list(ROW_BINARY))
@pytest.mark.parametrize("name", ROW_FLOATS)
def test_binary_broadcast_rows(fname, name, rng, device):
    a, x = uniform(rng, (5, 1, 33), name, lo=0.5)
    b, y = uniform(rng, (4, 33), name, lo=0.5)
    tol = RTOL[name] * 4
    tol = looser(device, tol, tol + GPU_TOL[name] * 4)
    assert_matches(getattr(mx, fname)(a, b), ROW_BINARY[fname](x, y), name, rtol=tol, atol=tol)


def test_nan_inf_and_casts(device):
    values = [np.nan, np.inf, -np.inf, 3.7, -2.5, 1e20, -0.0]
    x = mx.array(values, dtype=mx.float32)
    xn = np.array(values, dtype=np.float32)
    np.testing.assert_array_equal(np.array(mx.maximum(x, 0.0)), np.maximum(xn, np.float32(0)))
    np.testing.assert_array_equal(np.array(mx.isnan(x)), np.isnan(xn))
    with np.errstate(over="ignore"):
        np.testing.assert_allclose(np.array(mx.exp(x)), np.exp(xn.astype(np.float64)), rtol=2e-6)
    # Out-of-range float to integer: x86's conversion (INT_MIN), as numpy gives here.
    np.testing.assert_array_equal(np.array(x.astype(mx.int32)),
                                  [-(2**31), -(2**31), -(2**31), 3, -2, -(2**31), 0])
    np.testing.assert_array_equal(np.array(x.astype(mx.uint8)), [0, 0, 0, 3, 254, 0, 0])
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(np.array(x.astype(mx.float16)), xn.astype(np.float16))
    assert to_np(x.astype(mx.bfloat16)).tolist()[3:6] == [3.703125, -2.5, 9.972771014849226e19]
    got = to_np(x.astype(mx.bfloat16))
    np.testing.assert_array_equal(got[:3], xn[:3])
    assert np.signbit(got[6]) and got[6] == 0


def test_strided_views_and_where(rng, device):
    x, xn = uniform(rng, (8, 6, 10), "float32")
    y, yn = uniform(rng, (10, 6), "float32")
    out = x[::-2, :, 1::3] * y.T[None, :, 1::3] + x.transpose(0, 2, 1)[1::2, 1::3, :].swapaxes(1, 2)
    want = xn[::-2, :, 1::3] * yn.T[None, :, 1::3] + xn.transpose(0, 2, 1)[1::2, 1::3, :].swapaxes(1, 2)
    assert_matches(out, want, "float32", rtol=1e-5, atol=1e-5)
    assert_matches(mx.where(x > 0, x, y.T[None]), np.where(xn > 0, xn, yn.T[None]), "float32")


def test_binary_shape_mismatch():
    with pytest.raises(ValueError, match=r"\[add\].*broadcast"):
        mx.add(mx.zeros((2,)), mx.zeros((3,)))


def test_integer_wraparound():
    a = mx.array([100, -100], dtype=mx.int8)
    assert (a + a).tolist() == [-56, 56]
    assert (mx.array([0], dtype=mx.uint8) - 1).tolist() == [255]


def test_integer_power_negative_exponent_is_zero():
    a = mx.array([2, 3, 1], dtype=mx.int32)
    assert (a ** mx.array([-1, 2, -2], dtype=mx.int32)).tolist() == [0, 9, 0]


# Weak Python scalars: (array dtype, scalar, result dtype or None for an overflow error),
# verified against MLX.
WEAK = [
    ("bool_", True, "bool_"), ("bool_", 1, "int32"), ("bool_", 1.5, "float32"),
    ("uint8", 1, "uint8"), ("uint8", -1, None), ("uint8", 300, None), ("uint8", 1.5, "float32"),
    ("uint16", 300, "uint16"), ("uint32", 2**33, None), ("uint64", 2**40, "uint64"),
    ("int8", 1, "int8"), ("int8", -1, "int8"), ("int8", 300, None), ("int8", 2**31, None),
    ("int8", 1.5, "float32"), ("int16", 300, "int16"), ("int32", 2**40, None),
    ("int64", 2**40, "int64"), ("float16", 2**40, "float16"), ("float16", 1.5, "float16"),
    ("bfloat16", 1, "bfloat16"), ("float32", True, "float32"), ("float64", 1.5, "float64"),
]  # fmt: skip


@pytest.mark.parametrize("name,scalar,want", WEAK)
@pytest.mark.parametrize("side", ["left", "right"])
def test_weak_scalars(name, scalar, want, side, rng):
    a, x = make(name, (4,), rng, low=0, high=5)
    if want is None:
        with pytest.raises(ValueError, match="would result in overflow"):
            a + scalar if side == "right" else scalar + a
        return
    out = a + scalar if side == "right" else scalar + a
    assert name_of(out.dtype) == want
    with np.errstate(all="ignore"):
        expected = np.logical_or(x, scalar) if want == "bool_" else x.astype(np.float64) + scalar
        expected = np.asarray(expected).astype(NP[want])
    assert_matches(out, expected, want)


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize(
    "fname,pyop",
    [
        ("add", lambda a, b: a + b),
        ("subtract", lambda a, b: a - b),
        ("multiply", lambda a, b: a * b),
        ("divide", lambda a, b: a / b),
        ("power", lambda a, b: a**b),
        ("equal", lambda a, b: a == b),
        ("not_equal", lambda a, b: a != b),
        ("less", lambda a, b: a < b),
        ("less_equal", lambda a, b: a <= b),
        ("greater", lambda a, b: a > b),
        ("greater_equal", lambda a, b: a >= b),
        ("maximum", None),
        ("minimum", None),
    ],
)
def test_operators_and_functions_with_scalars(fname, pyop, side, rng):
    a, x = make("int8", (5,), rng, low=1, high=3)
    s = 2
    args = (a, s) if side == "right" else (s, a)
    nargs = (x, np.int8(s)) if side == "right" else (np.int8(s), x)
    out = getattr(mx, fname)(*args)
    if pyop is not None:
        assert to_np(pyop(*args)).tolist() == to_np(out).tolist()
    ref = {"divide": np.true_divide, "power": np.power}.get(fname, getattr(np, fname, None))
    with np.errstate(all="ignore"):
        expected = ref(*(v.astype(np.float32) if fname == "divide" else v for v in nargs))
    assert_matches(out, np.asarray(expected))
    # MLX's dtypes: int8 with a Python int stays int8; divide is float32.
    want = {"divide": "float32"}.get(
        fname,
        "bool_"
        if fname in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal")
        else "int8",
    )
    assert name_of(out.dtype) == want


def test_two_python_scalars():
    assert mx.add(1, 2.5).dtype == mx.float32
    assert mx.add(1, 2).dtype == mx.int32
    assert mx.add(True, 1).dtype == mx.int32
    assert mx.add(True, False).dtype == mx.bool_
    assert mx.add(1, 2.5).item() == 3.5


def test_operands_lists_and_numpy():
    a = mx.array([1, 2], dtype=mx.int8)
    assert (a + np.array([1, 1], dtype=np.int8)).dtype == mx.int8
    assert (a + np.int64(1)).dtype == mx.int8  # numpy scalars are weak, as in MLX
    assert (a + np.float64(1)).dtype == mx.float32
    assert mx.add(a, [1, 2]).tolist() == [2, 4]


def test_unsupported_operands():
    a = mx.zeros((2,))
    for bad in [None, object()]:
        with pytest.raises(TypeError):
            a + bad
    with pytest.raises(ValueError, match="Cannot perform addition on an mlx.core.array and str"):
        a + "a"
    with pytest.raises(TypeError):
        a @ 2
    with pytest.raises(TypeError, match=r"\[add\]"):
        mx.add(a, "x")


# ---------------------------------------------------------------------------------------
# where
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize(
    "shapes",
    [
        ((), (), ()),
        ((4,), (4,), (4,)),
        ((3, 1), (4,), (3, 4)),
        ((2, 3), (), (3,)),
        ((0,), (0,), ()),
    ],
    ids=str,
)
def test_where(name, shapes, rng, device):
    sc, sx, sy = shapes
    c, cn = make("bool_", sc, rng)
    for kind, x, xn in view_variants(name, sx, rng, special=True):
        y, yn = make(name, sy, rng, special=True)
        out = mx.where(c, x, y)
        assert out.dtype == dt(name), kind
        assert_matches(out, np.where(cn, xn, yn), name)


def test_where_scalars_and_promotion():
    c = mx.array([True, False])
    assert mx.where(c, 1, 2.5).dtype == mx.float32
    assert mx.where(c, 1, 2.5).tolist() == [1.0, 2.5]
    assert mx.where(c, mx.array([1, 2], dtype=mx.int8), 2).dtype == mx.int8
    assert mx.where(1, 2, 3).item() == 2
    assert (
        mx.where(c, mx.array([1, 2], dtype=mx.uint8), mx.array([1, 2], dtype=mx.int8)).dtype
        == mx.int16
    )


# ---------------------------------------------------------------------------------------
# Reductions
# ---------------------------------------------------------------------------------------

SUM_DTYPE = {
    "bool_": "int32",
    "int8": "int32",
    "int16": "int32",
    "uint8": "uint32",
    "uint16": "uint32",
}

# (name, numpy reference, result dtype rule)
REDUCTIONS = [
    ("sum", np.sum, lambda n: SUM_DTYPE.get(n, n)),
    ("prod", np.prod, lambda n: SUM_DTYPE.get(n, n)),
    ("max", np.max, lambda n: n),
    ("min", np.min, lambda n: n),
    ("mean", np.mean, float_of),
]

AXES = [
    ((), None), ((5,), None), ((5,), 0), ((5,), -1), ((3, 4), 1), ((3, 4), -2), ((3, 4), (0, 1)),
    ((2, 3, 4), (0, 2)), ((2, 3, 4), [1]), ((2, 3, 4), None), ((2, 0, 3), 0), ((2, 0, 3), 1),
]  # fmt: skip

# Accumulating in low precision loses more than one rounding.
REDUCE_TOL = {"float16": 1e-2, "bfloat16": 6e-2, "float32": 1e-5, "float64": 1e-12}


def reduce_reference(fname, ref, x, axis, keepdims, want):
    axis = tuple(axis) if isinstance(axis, list) else axis
    if want in INTS:
        wide = np.uint64 if want.startswith("u") else np.int64
        return ref(x.astype(wide), axis=axis, keepdims=keepdims).astype(NP[want])
    if want == "bool_":
        return ref(x, axis=axis, keepdims=keepdims)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # mean of an empty slice is nan
        return ref(x.astype(np.float64), axis=axis, keepdims=keepdims)


@pytest.mark.parametrize("op", REDUCTIONS, ids=[r[0] for r in REDUCTIONS])
@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("shape,axis", AXES, ids=str)
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions(op, name, shape, axis, keepdims, rng, device):
    fname, ref, rule = op
    # A reduction over no axes (0-d input) returns its input, dtype included, as in MLX.
    want = rule(name) if shape or fname == "mean" else name
    reduced = range(len(shape)) if axis is None else np.atleast_1d(axis)
    empty_axis = any(shape[a] == 0 for a in reduced)
    options = {"low": -2, "high": 2} if fname == "prod" else {}
    for kind, a, x in view_variants(name, shape, rng, **options):
        if fname == "prod" and is_float(name):
            x = 1 + 0.1 * rng.standard_normal(shape)
            a = mx.array(x, dtype=dt(name))
            x = to_np(a)
        if fname in ("max", "min") and empty_axis:
            with pytest.raises(ValueError, match=rf"\[{fname}\]"):
                getattr(mx, fname)(a, axis=axis, keepdims=keepdims)
            continue
        out = getattr(mx, fname)(a, axis=axis, keepdims=keepdims)
        assert name_of(out.dtype) == want, kind
        expected = reduce_reference(fname, ref, x, axis, keepdims, want)
        tol = REDUCE_TOL.get(want)
        if want in GPU_TOL:  # the GPU's accumulation order
            tol = looser(device, tol, tol + GPU_TOL[want] * 8)
        assert_matches(out, np.asarray(expected), want, rtol=tol, atol=tol)
        # The method spelling agrees.
        method = getattr(a, fname)(axis=axis, keepdims=keepdims)
        assert_matches(method, np.asarray(expected), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("name", FLOATS)
def test_reductions_nan_and_inf(name, device):
    a = mx.array([1.0, np.nan, 3.0], dtype=dt(name))
    assert np.isnan(mx.sum(a).item()) and np.isnan(mx.max(a).item()) and np.isnan(mx.min(a).item())
    assert np.isnan(mx.mean(a).item())
    b = mx.array([1.0, np.inf, -2.0], dtype=dt(name))
    assert mx.max(b).item() == np.inf and mx.sum(b).item() == np.inf and mx.min(b).item() == -2
    assert mx.argmax(a).item() == 1 and mx.argmin(a).item() == 1  # NaN wins, as numpy


def test_reduction_errors():
    with pytest.raises(IndexError, match=r"\[sum\]"):
        mx.sum(mx.arange(3), axis=3)
    with pytest.raises(ValueError, match=r"\[sum\]"):
        mx.sum(mx.arange(3), axis=[0, 0])
    with pytest.raises(ValueError, match=r"\[argmax\]"):
        mx.argmax(mx.array([]))


@pytest.mark.parametrize("fname", ["argmax", "argmin"])
@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize(
    "shape,axis",
    [
        ((), None),
        ((7,), None),
        ((7,), 0),
        ((3, 4), 1),
        ((3, 4), -2),
        ((2, 3, 4), 2),
        ((2, 3, 4), None),
    ],
    ids=str,
)
@pytest.mark.parametrize("keepdims", [False, True])
def test_arg_reductions(fname, name, shape, axis, keepdims, rng, device):
    for kind, a, x in view_variants(name, shape, rng, low=-3, high=3):
        out = getattr(mx, fname)(a, axis=axis, keepdims=keepdims)
        assert out.dtype == mx.uint32
        expected = getattr(np, fname)(x, axis=axis, keepdims=keepdims)
        if axis is None and keepdims:
            expected = np.reshape(expected, (1,) * len(shape))
        assert_matches(out, np.asarray(expected), "uint32")
        assert_matches(getattr(a, fname)(axis, keepdims), np.asarray(expected), "uint32")


# ---------------------------------------------------------------------------------------
# Shape ops, astype, concatenate
# ---------------------------------------------------------------------------------------

SHAPE_OPS = [
    ("reshape", lambda m, a: m.reshape(a, (6, 4)), lambda x: x.reshape(6, 4)),
    ("reshape_infer", lambda m, a: m.reshape(a, (-1, 3)), lambda x: x.reshape(-1, 3)),
    ("transpose", lambda m, a: m.transpose(a), lambda x: x.T),
    ("transpose_axes", lambda m, a: m.transpose(a, [1, 0, 2]), lambda x: x.transpose(1, 0, 2)),
    ("broadcast_to", lambda m, a: m.broadcast_to(a[:, :1], (2, 3, 4)), lambda x: np.broadcast_to(x[:, :1], (2, 3, 4))),
    ("expand_dims", lambda m, a: m.expand_dims(a, (0, -1)), lambda x: np.expand_dims(x, (0, -1))),
    ("squeeze", lambda m, a: m.squeeze(a[:, :1, None]), lambda x: np.squeeze(x[:, :1, None])),
    ("squeeze_axis", lambda m, a: m.squeeze(a[:1], 0), lambda x: np.squeeze(x[:1], 0)),
    ("concatenate", lambda m, a: m.concatenate([a, a[::-1]], axis=1), lambda x: np.concatenate([x, x[::-1]], axis=1)),
    ("concatenate_flat", lambda m, a: m.concatenate([a, a], axis=None), lambda x: np.concatenate([x, x], axis=None)),
]  # fmt: skip


@pytest.mark.parametrize("op", SHAPE_OPS, ids=[s[0] for s in SHAPE_OPS])
@pytest.mark.parametrize("name", ALL)
def test_shape_ops(op, name, rng):
    _, kiln_fn, np_fn = op
    for kind, a, x in view_variants(name, (2, 3, 4), rng, special=True):
        out = kiln_fn(mx, a)
        assert out.dtype == dt(name), kind
        assert_matches(out, np_fn(x), name, rtol=0, atol=0)


def test_shape_op_errors():
    with pytest.raises(ValueError, match=r"\[reshape\]"):
        mx.arange(6).reshape(4, 2)
    with pytest.raises(ValueError, match=r"\[reshape\]"):
        mx.reshape(mx.arange(6), (-1, -1))
    with pytest.raises(ValueError, match=r"\[transpose\]"):
        mx.transpose(mx.zeros((2, 3)), [0])
    with pytest.raises(ValueError, match=r"\[squeeze\]"):
        mx.squeeze(mx.zeros((2, 3)), 0)
    with pytest.raises(IndexError, match=r"\[expand_dims\]"):
        mx.expand_dims(mx.zeros((2, 3)), 5)
    with pytest.raises(ValueError, match=r"\[broadcast_to\]"):
        mx.broadcast_to(mx.zeros((2, 3)), (3, 3))
    with pytest.raises(ValueError, match=r"\[concatenate\]"):
        mx.concatenate([])
    with pytest.raises(ValueError, match=r"\[concatenate\]"):
        mx.concatenate([mx.zeros((2, 3)), mx.zeros((3, 3))], axis=1)
    with pytest.raises(ValueError, match=r"\[zeros\]"):
        mx.zeros((-1,))


def test_concatenate_promotes():
    out = mx.concatenate([mx.array([1]), mx.array([2.5])])
    assert out.dtype == mx.float32 and out.tolist() == [1.0, 2.5]
    out = mx.concatenate([mx.array([1], dtype=mx.uint8), mx.array([-1], dtype=mx.int8)])
    assert out.dtype == mx.int16 and out.tolist() == [1, -1]


@pytest.mark.parametrize("src", ALL)
@pytest.mark.parametrize("dst", ALL)
def test_astype(src, dst, rng):
    # Values in [0, 10]: representable in every dtype, so C casts and numpy agree.
    for kind, a, x in view_variants(src, (3, 4), rng, low=0, high=10):
        if is_float(src):
            x = np.abs(x)
            a = mx.array(x, dtype=dt(src))
            x = to_np(a)
        out = a.astype(dt(dst))
        assert out.dtype == dt(dst)
        assert_matches(out, x.astype(NP[dst]), dst)
        assert_matches(mx.astype(a, dt(dst)), x.astype(NP[dst]), dst)


@pytest.mark.parametrize("src", FLOATS)
@pytest.mark.parametrize("dst", FLOATS)
def test_astype_float_specials(src, dst):
    a = mx.array([np.nan, np.inf, -np.inf, -0.0, 1.5], dtype=dt(src))
    assert_matches(a.astype(dt(dst)), np.array([np.nan, np.inf, -np.inf, -0.0, 1.5]), dst)


def test_astype_to_bool_and_wrapping():
    assert mx.array([0.0, 0.5, np.nan, -1]).astype(mx.bool_).tolist() == [False, True, True, True]
    assert mx.array([300, -1]).astype(mx.uint8).tolist() == [44, 255]
    assert mx.array([1.7, -1.7]).astype(mx.int32).tolist() == [1, -1]


# ---------------------------------------------------------------------------------------
# matmul
# ---------------------------------------------------------------------------------------

MATMUL_SHAPES = [
    ((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)), ((2, 3, 4), (4, 5)),
    ((2, 1, 3, 4), (5, 4, 2)), ((1, 4), (4, 1)), ((0, 4), (4, 3)), ((3, 0), (0, 2)),
    # The GPU's: through cuBLAS, batched, broadcast batches, a 1 x 1 result.
    ((64, 32), (32, 48)), ((3, 17, 5), (3, 5, 9)), ((2, 1, 8, 4), (1, 3, 4, 6)), ((1, 7), (7, 1)),
]  # fmt: skip
MATMUL_TOL = {"float16": 1e-2, "bfloat16": 5e-2, "float32": 1e-5, "float64": 1e-12}


@pytest.mark.parametrize("name", FLOATS)
@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES, ids=str)
def test_matmul(name, sa, sb, rng, device):
    for kind, a, x in view_variants(name, sa, rng, high=3):
        b, y = make(name, sb, rng, high=3)
        expected = x.astype(np.float64) @ y.astype(np.float64)
        out = mx.matmul(a, b)
        assert out.dtype == dt(name), kind
        tol = looser(device, MATMUL_TOL[name], 1e-4 if name == "float32" else None)
        assert_matches(out, expected, name, rtol=tol, atol=tol * 4)
        assert_matches(a @ b, expected, name, rtol=tol, atol=tol * 4)


def test_matmul_promotes_and_rejects():
    a = mx.ones((2, 3), mx.float16)
    assert (a @ mx.ones((3, 2), mx.bfloat16)).dtype == mx.float32
    with pytest.raises(ValueError, match=r"\[matmul\]"):
        mx.arange(6).reshape(2, 3) @ mx.arange(6).reshape(3, 2)
    with pytest.raises(ValueError, match=r"\[matmul\]"):
        mx.matmul(mx.zeros((2, 3)), mx.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"\[matmul\]"):
        mx.matmul(mx.zeros(()), mx.zeros((2, 3)))


# ---------------------------------------------------------------------------------------
# Creation
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("shape", [(), 3, (2, 3), [2, 0]], ids=str)
def test_zeros_ones_full(name, shape):
    np_shape = (shape,) if isinstance(shape, int) else tuple(shape)
    for fn, value in [(mx.zeros, 0), (mx.ones, 1)]:
        out = fn(shape, dt(name))
        assert out.dtype == dt(name) and out.shape == np_shape
        assert_matches(out, np.full(np_shape, value, NP[name]), name)
    out = mx.full(shape, 1, dt(name))
    assert out.dtype == dt(name)
    assert_matches(out, np.full(np_shape, 1, NP[name]), name)


def test_creation_defaults():
    assert mx.zeros((2,)).dtype == mx.float32 and mx.ones(2).dtype == mx.float32
    assert mx.full(3, 2).dtype == mx.int32 and mx.full(3, 2).tolist() == [2, 2, 2]
    assert mx.full((2,), 2.5).dtype == mx.float32
    assert mx.full((2,), True).dtype == mx.bool_
    out = mx.full((2, 2), mx.array([1, 2]))
    assert out.tolist() == [[1, 2], [1, 2]] and out.dtype == mx.int32
    assert mx.full((2, 2), mx.array([1, 2]), mx.float16).dtype == mx.float16


ARANGE = [
    ((5,), {}, np.arange(5), "int32"),
    ((5.0,), {}, np.arange(5.0), "float32"),
    ((0, 1, 0.25), {}, np.arange(0, 1, 0.25), "float32"),
    ((0, 10, 3), {}, np.arange(0, 10, 3), "int32"),
    ((10,), {"step": 3}, np.arange(0, 10, 3), "int32"),
    ((), {"start": 1, "stop": 4}, np.arange(1, 4), "int32"),
    ((0, 10, 3, mx.float32), {}, np.arange(0, 10, 3), "float32"),
    ((10,), {"dtype": mx.float16}, np.arange(10), "float16"),
    ((5, 1), {}, np.arange(5, 1), "int32"),
    ((5, 1, -1), {}, np.arange(5, 1, -1), "int32"),
    ((-3, 3), {"dtype": mx.int8}, np.arange(-3, 3), "int8"),
    ((2, 9, 2), {"dtype": mx.uint64}, np.arange(2, 9, 2), "uint64"),
    ((1.5,), {"dtype": mx.float64}, np.arange(1.5), "float64"),
]  # fmt: skip


@pytest.mark.parametrize("args,kwargs,expected,want", ARANGE, ids=str)
def test_arange(args, kwargs, expected, want, device):
    out = mx.arange(*args, **kwargs)
    assert name_of(out.dtype) == want
    assert_matches(out, expected, want)


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16", "int32", "uint8", "int64",
                                  "int16"])
def test_arange_of_every_gpu_dtype(name, device):
    # start + i * step in float64, then rounded to the dtype (integers wrap, as numpy).
    step = 0.7 if is_float(name) else 3
    out = mx.arange(-3, 40, step, dtype=dt(name))
    assert out.dtype == dt(name)
    want = np.arange(-3, 40, step).astype(np.float32 if is_float(name) else NP[name])
    if is_float(name):
        want = to_np(mx.array(want).astype(dt(name)))
    np.testing.assert_array_equal(to_np(out), want)


def test_arange_errors():
    with pytest.raises(ValueError, match=r"\[arange\]"):
        mx.arange(0, 5, 0)
    with pytest.raises(ValueError, match=r"\[arange\]"):
        mx.arange(3, dtype=mx.bool_)
    with pytest.raises(TypeError, match=r"\[arange\]"):
        mx.arange("a")


def test_large_contiguous_inputs_use_the_threaded_path():
    # Above the parallel threshold (2^15 elements) contiguous loops are split over threads.
    a = np.random.default_rng(1).standard_normal(100_003).astype(np.float32)
    b = np.random.default_rng(2).standard_normal(100_003).astype(np.float32)
    x, y = mx.array(a), mx.array(b)
    np.testing.assert_allclose(np.array(mx.exp(x)), np.exp(a), rtol=1e-6)
    np.testing.assert_allclose(np.array(x * y + 1), a * b + 1, rtol=1e-6)
    np.testing.assert_array_equal(np.array(x < y), a < b)
    np.testing.assert_array_equal(np.array(x.astype(mx.int32)), a.astype(np.int32))
