"""Math ops against numpy: rounding, trigonometry, logs, logical and bitwise ops, shifts,
floor division and remainder, and the compositions (isnan family, nan_to_num, round with
decimals, clip, isclose/allclose/array_equal, divmod, stop_gradient), plus the Python
operators and array methods. Edge cases follow MLX 0.32 (values checked on mlx.core).
"""

import math

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
from test_ops import GPU_TOL, PROMOTE, float_of

# ---------------------------------------------------------------------------------------
# Unary ops
# ---------------------------------------------------------------------------------------


def _sign(x):
    # MLX: NaN gives 0; bool is the identity.
    if x.dtype == np.bool_:
        return x
    return np.where(np.isnan(x), 0, np.sign(x)) if x.dtype.kind == "f" else np.sign(x)


def _as_float(f):
    """A predicate on float64 values (integers and bool have no NaN or inf)."""
    return lambda x: f(x.astype(np.float64))


# (name, numpy reference, result: "float" | "same" | "bool", input options, tolerance factor)
UNARY = [
    ("sign", _sign, "same", {}, 1),
    ("square", lambda x: x & x if x.dtype == np.bool_ else np.square(x), "same", {}, 1),
    ("rsqrt", lambda x: 1 / np.sqrt(x), "float", {}, 2),
    ("reciprocal", lambda x: 1 / x, "float", {}, 1),
    ("expm1", np.expm1, "float", {"high": 6}, 2),
    ("log1p", np.log1p, "float", {}, 2),
    ("log2", np.log2, "float", {}, 2),
    ("log10", np.log10, "float", {}, 2),
    ("cos", np.cos, "float", {}, 2),
    ("tan", np.tan, "float", {}, 4),
    ("arcsin", np.arcsin, "float", {"low": -1, "high": 1}, 2),
    ("arccos", np.arccos, "float", {"low": -1, "high": 1}, 2),
    ("arctan", np.arctan, "float", {}, 2),
    ("sinh", np.sinh, "float", {"high": 6}, 2),
    ("cosh", np.cosh, "float", {"high": 6}, 2),
    ("arcsinh", np.arcsinh, "float", {}, 2),
    ("arccosh", np.arccosh, "float", {}, 2),
    ("arctanh", np.arctanh, "float", {"low": -1, "high": 1}, 4),
    ("floor", np.floor, "same", {}, 1),
    ("ceil", np.ceil, "same", {}, 1),
    ("round", np.round, "same", {}, 1),
    ("logical_not", np.logical_not, "bool", {}, 1),
    ("isnan", _as_float(np.isnan), "bool", {}, 1),
    ("isinf", _as_float(np.isinf), "bool", {}, 1),
    ("isfinite", _as_float(np.isfinite), "bool", {}, 1),
    ("isposinf", _as_float(np.isposinf), "bool", {}, 1),
    ("isneginf", _as_float(np.isneginf), "bool", {}, 1),
    ("stop_gradient", lambda x: x, "same", {}, 1),
]

TOL = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 2e-6, "float64": 1e-13}


@pytest.mark.parametrize("op", UNARY, ids=[u[0] for u in UNARY])
@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_unary(op, name, shape, rng, device):
    fname, ref, result, options, tol = op
    fn = getattr(mx, fname)
    for kind, a, x in view_variants(name, shape, rng, special=True, **options):
        out = fn(a)
        want = {"float": float_of(name), "same": name, "bool": "bool_"}[result]
        assert name_of(out.dtype) == want, kind
        with np.errstate(all="ignore"):
            expected = ref(x.astype(np.float64)) if result == "float" else ref(x)
        rtol = TOL.get(want, 0) * tol
        rtol = looser(device, rtol, rtol + GPU_TOL.get(want, 0) * 4)
        assert_matches(out, np.asarray(expected), want, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("name", INTS + ["bool_"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_bitwise_invert(name, shape, rng):
    for kind, a, x in view_variants(name, shape, rng):
        out = mx.bitwise_invert(a)
        assert out.dtype == dt(name), kind
        assert_matches(out, np.invert(x), name)
        assert_matches(~a, np.invert(x), name)


@pytest.mark.parametrize("name", FLOATS)
def test_bitwise_invert_rejects_floats(name):
    a = mx.zeros((2,), dt(name))
    with pytest.raises(ValueError, match=r"\[bitwise_invert\] Bitwise inverse"):
        mx.bitwise_invert(a)
    with pytest.raises(ValueError, match="Floating point types not allowed with bitwise inversion"):
        ~a


def test_unary_edges_as_mlx():
    # sign: NaN and -0 give 0; unsigned gives 0/1; bool is the identity.
    s = mx.sign(mx.array([-0.0, 0.0, np.nan, -3.0, -np.inf]))
    assert s.tolist() == [0.0, 0.0, 0.0, -1.0, -1.0]
    assert mx.sign(mx.array([0, 3], dtype=mx.uint8)).tolist() == [0, 1]
    assert mx.sign(mx.array([True, False])).dtype == mx.bool_
    # floor/ceil/round keep integer and bool dtypes.
    for f in (mx.floor, mx.ceil, mx.round):
        assert f(mx.array([1, 2], dtype=mx.int8)).dtype == mx.int8
        assert f(mx.array([True])).dtype == mx.bool_
    # round is half to even.
    r = mx.round(mx.array([0.5, 1.5, 2.5, -0.5, -2.5]))
    assert r.tolist() == [0.0, 2.0, 2.0, -0.0, -2.0]
    assert mx.square(mx.array([200], dtype=mx.uint8)).tolist() == [64]
    assert mx.reciprocal(mx.array([4], dtype=mx.float16)).dtype == mx.float16
    assert mx.logical_not(mx.array([1.0, 0.0, np.nan])).tolist() == [False, True, False]
    assert mx.isnan(3).item() is False and mx.isnan(float("nan")).item() is True
    assert mx.arccosh(mx.array([-100.0, 0.5, 1.0])).tolist()[2] == 0.0
    assert all(math.isnan(v) for v in mx.arccosh(mx.array([-100.0, 0.5])).tolist())


# ---------------------------------------------------------------------------------------
# Binary ops
# ---------------------------------------------------------------------------------------


def _acc(compute):
    """The numpy dtype a float op computes in: half types in float32, as kiln and MLX."""
    return np.float64 if compute == "float64" else np.float32


def _floor_divide(x, y, compute):
    if compute == "bool_":
        return x & y
    if compute in INTS:
        safe = np.where(y == 0, 1, y).astype(y.dtype)
        return np.where(y == 0, 0, np.floor_divide(x, safe))
    acc = _acc(compute)
    return np.floor(x.astype(acc) / y.astype(acc))  # MLX: floor(a / b), not numpy's rule


def _remainder(x, y, compute):
    if compute == "bool_":
        return x & ~y
    if compute in INTS:
        safe = np.where(y == 0, 1, y).astype(y.dtype)
        return np.where(y == 0, x, np.remainder(x, safe))
    acc = _acc(compute)
    return np.remainder(x.astype(acc), y.astype(acc))


def _shift(left):
    """x86's shift as MLX's CPU build does it: narrow types shift as int32, the count
    modulo the (promoted) width."""

    def ref(x, y, compute):
        if compute == "bool_":
            x, y, compute = x.astype(np.uint8), y.astype(np.uint8), "uint8"
        size = np.dtype(NP[compute]).itemsize
        if size == 8:
            count = (y.astype(np.int64) & 63).astype(x.dtype)
            return np.left_shift(x, count) if left else np.right_shift(x, count)
        wide = x.astype(np.int64)
        if compute == "uint32":
            wide = wide & 0xFFFFFFFF
        count = y.astype(np.int64) & 31
        out = (wide << count) if left else (wide >> count)
        return out.astype(NP[compute])  # truncates (wraps) like C's conversion

    return ref


def _lift(f):
    return lambda x, y, compute: f(x, y)


# (name, reference(x, y, compute dtype), result: "promote" | "float" | "bool" | "int",
#  input options)
BINARY = [
    ("floor_divide", _floor_divide, "promote", {"low": -5, "high": 5}),
    ("remainder", _remainder, "promote", {"low": -5, "high": 5}),
    ("logaddexp", _lift(np.logaddexp), "float", {}),
    ("arctan2", _lift(np.arctan2), "float", {}),
    ("logical_and", _lift(np.logical_and), "bool", {"low": -1, "high": 1}),
    ("logical_or", _lift(np.logical_or), "bool", {"low": -1, "high": 1}),
    ("bitwise_and", _lift(np.bitwise_and), "int", {"low": -50, "high": 50}),
    ("bitwise_or", _lift(np.bitwise_or), "int", {"low": -50, "high": 50}),
    ("bitwise_xor", _lift(np.bitwise_xor), "int", {"low": -50, "high": 50}),
    ("left_shift", _shift(True), "int", {"low": -3, "high": 40}),
    ("right_shift", _shift(False), "int", {"low": -3, "high": 40}),
]


def check_binary(op, na, nb, sa, sb, rng, views=False, device=None):
    fname, ref, result, options = op
    fn = getattr(mx, fname)
    compute = PROMOTE[(na, nb)]
    if result == "float":
        compute = float_of(compute)
    if result == "int" and is_float(compute):
        a, _ = make(na, sa, rng, **options)
        b, _ = make(nb, sb, rng, **options)
        with pytest.raises(RuntimeError, match=rf"\[{fname}\] Only allowed on integer"):
            fn(a, b)
        return
    left = (
        list(view_variants(na, sa, rng, special=True, **options))
        if views
        else [("plain",) + make(na, sa, rng, special=True, **options)]
    )
    for kind, a, x in left:
        b, y = make(nb, sb, rng, special=True, **options)
        out = fn(a, b)
        if result == "bool":
            want = "bool_"
        elif result == "int" and compute == "bool_" and "shift" in fname:
            want = "uint8"
        else:
            want = compute
        assert name_of(out.dtype) == want, (kind, out.dtype, want)
        xs, ys = x.astype(NP[compute]), y.astype(NP[compute])
        if result == "float":  # float math: the reference in float64
            xs, ys = xs.astype(np.float64), ys.astype(np.float64)
        with np.errstate(all="ignore"):
            expected = np.asarray(ref(xs, ys, compute))
        if want in GPU_TOL:
            tol = looser(device, None, RTOL[want] + GPU_TOL[want] * 4)
            assert_matches(out, expected.astype(np.float64), want, rtol=tol, atol=tol)
        elif want in FLOATS:
            assert_matches(out, expected.astype(np.float64), want)
        else:
            assert_matches(out, expected.astype(NP[want]), want)


@pytest.mark.parametrize("op", BINARY, ids=[b[0] for b in BINARY])
@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("shapes", PAIRS, ids=str)
def test_binary_same_dtype(op, name, shapes, rng, device):
    check_binary(op, name, name, *shapes, rng, views=True, device=device)


# One op per dtype rule is enough for the full promotion table.
PROMOTION_OPS = [b for b in BINARY if b[0] in ("floor_divide", "remainder", "logaddexp", "logical_and", "bitwise_xor", "right_shift")]


@pytest.mark.parametrize("op", PROMOTION_OPS, ids=[b[0] for b in PROMOTION_OPS])
@pytest.mark.parametrize("na", ALL)
@pytest.mark.parametrize("nb", ALL)
def test_binary_promotion(op, na, nb, rng):
    check_binary(op, na, nb, (3, 1), (4,), rng)


# Verified on mlx.core 0.32 (integer division never traps; INT_MIN // -1 wraps as numpy,
# where MLX itself crashes with SIGFPE).
INT_EDGES = [
    ("floor_divide", "int32", [5, -5, 7, -(2**31), -(2**31)], [0, 0, 0, -1, 1], [0, 0, 0, -(2**31), -(2**31)]),
    ("remainder", "int32", [5, -5, 7, -(2**31)], [0, 0, 0, -1], [5, -5, 7, 0]),
    ("remainder", "int32", [5, -5, 5, -5], [3, 3, -3, -3], [2, 1, -1, -2]),
    ("floor_divide", "int32", [5, -5, 5, -5], [3, 3, -3, -3], [1, -2, -2, 1]),
    ("floor_divide", "uint8", [5, 250], [0, 7], [0, 35]),
    ("remainder", "int64", [-7], [2**62], [2**62 - 7]),
    ("floor_divide", "int8", [-128, -128], [-1, 3], [-128, -43]),
    ("left_shift", "int32", [1] * 5, [31, 32, 33, -1, 100], [-(2**31), 1, 2, -(2**31), 16]),
    ("right_shift", "int32", [-8] * 6, [1, 31, 32, 33, -1, 100], [-4, -1, -8, -4, -1, -1]),
    ("left_shift", "uint8", [1] * 3, [7, 8, 9], [128, 0, 0]),
    ("right_shift", "uint8", [200] * 3, [7, 8, 9], [1, 0, 0]),
    ("right_shift", "int8", [-1] * 3, [7, 8, 9], [-1, -1, -1]),
    ("left_shift", "int8", [1] * 4, [7, 8, 9, 100], [-128, 0, 0, 16]),
    ("left_shift", "int64", [1] * 3, [63, 64, 65], [-(2**63), 1, 2]),
    ("left_shift", "int16", [1] * 3, [15, 16, 17], [-(2**15), 0, 0]),
    ("left_shift", "uint32", [1] * 3, [31, 32, 33], [2**31, 1, 2]),
]  # fmt: skip


@pytest.mark.parametrize("fname,name,a,b,want", INT_EDGES, ids=str)
def test_integer_edges_as_mlx(fname, name, a, b, want, device):
    out = getattr(mx, fname)(mx.array(a, dtype=dt(name)), mx.array(b, dtype=dt(name)))
    assert out.dtype == dt(name)
    assert out.tolist() == want


def test_float_edges_as_mlx():
    inf = float("inf")
    q = mx.array([1.0, -1.0, 0.0, float("nan")]) // 0
    assert q.tolist()[:2] == [inf, -inf] and all(math.isnan(v) for v in q.tolist()[2:])
    assert all(math.isnan(v) for v in (mx.array([1.0, -1.0, 0.0]) % 0.0).tolist())
    r = mx.array([1.0, -1.0, 0.0, 3.0, -3.0]) % mx.array([inf, inf, inf, -inf, -inf])
    assert r.tolist() == [1.0, inf, 0.0, -inf, -3.0]
    assert (mx.array([1.0]) // 0.1).item() == 10.0  # floor(a / b), not numpy's 9
    d = mx.array([-1.0, 3.0, 1.0, -3.0]) // mx.array([inf, -inf, inf, -inf])
    assert d.tolist() == [0.0, 0.0, 0.0, 0.0]
    assert (mx.array([5.0], dtype=mx.float16) % mx.array([0.3], dtype=mx.float16)).item() == 0.19921875
    assert (mx.array([5.0], dtype=mx.bfloat16) // mx.array([0.3], dtype=mx.bfloat16)).item() == 16
    la = mx.logaddexp(mx.array([inf, -inf, inf, float("nan")]), mx.array([inf, -inf, -inf, 1.0]))
    assert la.tolist()[:3] == [inf, -inf, inf] and math.isnan(la.tolist()[3])
    assert mx.logaddexp(mx.array([1000.0], dtype=mx.float16), 1000.0).item() == 1000.5
    at = mx.arctan2(mx.array([0.0, -0.0, 0.0, -0.0]), mx.array([-0.0, -0.0, 0.0, 0.0])).tolist()
    assert at[:2] == [pytest.approx(math.pi), pytest.approx(-math.pi)]
    assert math.copysign(1, at[2]) == 1 and math.copysign(1, at[3]) == -1


def test_bool_semantics_as_mlx():
    t, f = mx.array([True, False]), mx.array([True, True])
    assert (t // f).dtype == mx.bool_ and (t // f).tolist() == [True, False]
    assert (t % f).tolist() == [False, False]
    assert (mx.array([True]) << mx.array([True])).tolist() == [2]
    assert (mx.array([True]) << mx.array([True])).dtype == mx.uint8
    assert mx.right_shift(mx.array([True]), mx.array([False])).dtype == mx.uint8
    assert (mx.array([True]) & mx.array([True])).dtype == mx.bool_
    assert (mx.array([True]) ^ 1).dtype == mx.int32
    assert mx.bitwise_and(mx.array([True]), 3).tolist() == [1]
    assert mx.logical_and(1, 0).item() is False
    assert mx.logical_and(mx.array([1, 0]), 2.5).tolist() == [True, False]


def test_binary_dtypes_and_errors():
    assert mx.bitwise_and(mx.array([3], dtype=mx.uint8), mx.array([-1], dtype=mx.int8)).dtype == mx.int16
    assert (mx.array([7], dtype=mx.int32) // 2.0).dtype == mx.float32
    assert (mx.array([-5], dtype=mx.int8) // mx.array([2], dtype=mx.uint8)).tolist() == [-3]
    assert (mx.array([7], dtype=mx.uint32) // mx.array([-2], dtype=mx.int32)).dtype == mx.int64
    assert mx.left_shift(mx.array([1], dtype=mx.uint8), 3).dtype == mx.uint8
    with pytest.raises(ValueError, match="would result in overflow"):
        mx.left_shift(mx.array([1], dtype=mx.uint8), 300)
    with pytest.raises(RuntimeError, match=r"\[left_shift\] Only allowed on integer"):
        mx.left_shift(mx.array([1.0]), 3)
    with pytest.raises(RuntimeError, match=r"\[bitwise_xor\]"):
        mx.bitwise_xor(mx.array([1], dtype=mx.uint64), mx.array([1], dtype=mx.int64))
    with pytest.raises(ValueError, match=r"\[floor_divide\].*broadcast"):
        mx.floor_divide(mx.zeros((2,)), mx.zeros((3,)))
    with pytest.raises(TypeError, match=r"\[remainder\]"):
        mx.remainder(mx.zeros((2,)), "x")


# ---------------------------------------------------------------------------------------
# Python operators
# ---------------------------------------------------------------------------------------

OPERATORS = [
    ("floor_divide", lambda a, b: a // b),
    ("remainder", lambda a, b: a % b),
    ("bitwise_and", lambda a, b: a & b),
    ("bitwise_or", lambda a, b: a | b),
    ("bitwise_xor", lambda a, b: a ^ b),
    ("left_shift", lambda a, b: a << b),
    ("right_shift", lambda a, b: a >> b),
]


@pytest.mark.parametrize("fname,pyop", OPERATORS, ids=[o[0] for o in OPERATORS])
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("other", ["scalar", "array", "numpy", "list"])
def test_operators(fname, pyop, side, other, rng):
    if other == "numpy" and side == "right":
        pytest.skip("numpy's own operator handles `ndarray op array` (as with MLX)")
    a, x = make("int8", (5,), rng, low=-20, high=20)
    if other == "scalar":
        b, y = 3, np.int8(3)
    elif other == "array":
        b, y = make("int8", (5,), rng, low=1, high=6)
    elif other == "numpy":
        y = rng.integers(1, 6, size=5).astype(np.int8)
        b = y
    else:
        y = np.array([1, 2, 3, 4, 5], dtype=np.int32)
        b = y.tolist()
    args = (a, b) if side == "left" else (b, a)
    if other == "list":
        # As MLX: operators take no lists (the functions do); a reflected bitwise operator
        # leaves it to the list, which has none (TypeError).
        bitwise_reflected = side == "right" and fname not in ("floor_divide", "remainder")
        with pytest.raises(TypeError if bitwise_reflected else ValueError):
            pyop(*args)
        return
    out = pyop(*args)
    expected = getattr(mx, fname)(*args)
    assert out.dtype == expected.dtype
    assert out.tolist() == expected.tolist()
    # MLX's dtype: int8 with a Python int stays int8.
    if other == "scalar":
        assert out.dtype == mx.int8


def test_divmod_operator_and_function():
    a = mx.array([7, -7, 5], dtype=mx.int16)
    q, r = divmod(a, 2)
    assert q.tolist() == [3, -4, 2] and r.tolist() == [1, 1, 1] and q.dtype == mx.int16
    q, r = divmod(17, a)
    assert q.tolist() == [2, -3, 3] and r.tolist() == [3, -4, 2]
    out = mx.divmod(mx.array([7.5]), 2)
    assert isinstance(out, list) and [v.tolist() for v in out] == [[3.0], [1.5]]
    assert [v.item() for v in mx.divmod(7, 2)] == [3, 1]
    with pytest.raises(TypeError):
        divmod(a, "x")


def test_operator_errors_as_mlx():
    a = mx.array([1])
    for pyop, what in [
        (lambda: a & 2.0, "bitwise and"),
        (lambda: a | 2.0, "bitwise or"),
        (lambda: 2.0 ^ a, "bitwise xor"),
        (lambda: a << 2.0, "left shift"),
        (lambda: a >> mx.array([1.0]), "right shift"),
    ]:
        with pytest.raises(ValueError, match=f"Floating point types not allowed with {what}"):
            pyop()
    for bad in [None, object()]:  # (MLX: a ValueError for object(); kiln lets its
        with pytest.raises(TypeError):  # reflected operator try, as Python objects do)
            a & bad
        with pytest.raises(TypeError):
            a // bad
    with pytest.raises(ValueError, match="Cannot perform bitwise and on an mlx.core.array and str"):
        a & "a"
    with pytest.raises(ValueError, match="floor division"):
        a // "a"
    with pytest.raises(RuntimeError, match=r"\[bitwise_xor\]"):
        mx.array([1], dtype=mx.uint64) ^ mx.array([1], dtype=mx.int64)


# ---------------------------------------------------------------------------------------
# round with decimals, nan_to_num, clip
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FLOATS)
@pytest.mark.parametrize("decimals", [-2, -1, 1, 2, 3])
def test_round_decimals(name, decimals, rng):
    # float16 overflows at x * 10^3 past 65.5: keep its values small.
    high = 30 if name == "float16" else 300
    for kind, a, x in view_variants(name, (3, 4), rng, high=high, special=True):
        out = mx.round(a, decimals)
        assert out.dtype == dt(name), kind
        expected = np.round(x.astype(np.float64), decimals)
        # Scaling rounds in the dtype, so ties may land either way: one unit of 10^-d.
        unit = 10.0**-decimals
        tol = {"float16": 4e-3, "bfloat16": 2e-2}.get(name, 1e-6)
        got = to_np(out).astype(np.float64)
        close = np.isclose(got, expected, rtol=tol, atol=tol, equal_nan=True)
        with np.errstate(invalid="ignore"):
            tie = np.abs(np.abs(got - expected) - unit) <= tol * np.abs(expected) + 1e-9
        assert np.all(close | tie), (kind, got, expected)
        assert_matches(a.round(decimals), got, name, rtol=0, atol=0)


def test_round_as_mlx():
    x = mx.array([0.5, 1.5, 2.5, -0.5, -2.5, 1.25, 2.675])
    assert mx.round(x, 1).tolist() == pytest.approx([0.5, 1.5, 2.5, -0.5, -2.5, 1.2, 2.7])
    assert mx.round(x, 2).tolist()[5:] == pytest.approx([1.25, 2.68])
    assert mx.round(mx.array([1234.5, 1250, 1350]), -2).tolist() == [1200, 1200, 1400]
    assert mx.round(mx.array([1234.5, 1250, 1350], dtype=mx.float16), -2).tolist() == [1200, 1200, 1400]
    i = mx.array([15, 25, -15], dtype=mx.int32)
    assert mx.round(i, -1).tolist() == [20, 20, -20] and mx.round(i, -1).dtype == mx.int32
    assert mx.round(i, 1).tolist() == [15, 25, -15]
    assert mx.round(mx.array([250], dtype=mx.uint8), -2).tolist() == [200]
    assert mx.round(3.456, 1).item() == pytest.approx(3.5)
    assert all(math.isnan(v) for v in mx.round(mx.array([1.5, 1.5]), 400).tolist())
    assert mx.array([2.25]).round(1).item() == pytest.approx(2.2)
    with pytest.raises(TypeError):
        mx.round(mx.array([1.5]), 1.5)


@pytest.mark.parametrize("name", ALL)
def test_round_integers_exact(name, rng):
    if is_float(name):
        return
    a, x = make(name, (20,), rng, low=-200, high=200)
    for d in (-2, -1, 0, 2):
        expected = np.round(x.astype(np.float64), d).astype(NP[name])
        assert_matches(mx.round(a, d), expected, name)


@pytest.mark.parametrize("name", FLOATS)
def test_nan_to_num(name):
    x = np.array([np.nan, np.inf, -np.inf, 1.5, -2.0])
    a = mx.array(x, dtype=dt(name))
    big = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38, "float32": float(np.finfo(np.float32).max), "float64": float(np.finfo(np.float64).max)}[name]
    out = mx.nan_to_num(a)
    assert out.dtype == dt(name)
    assert to_np(out).astype(np.float64).tolist() == [0.0, big, -big, 1.5, -2.0]
    out = mx.nan_to_num(a, 5, 6, -7)
    assert to_np(out).tolist() == [5.0, 6.0, -7.0, 1.5, -2.0]
    out = mx.nan_to_num(a, nan=1.0, neginf=-3)
    assert to_np(out).astype(np.float64).tolist() == [1.0, big, -3.0, 1.5, -2.0]
    assert math.isnan(mx.nan_to_num(a, nan=float("nan")).tolist()[0])
    # A view: reversed.
    assert to_np(mx.nan_to_num(a[::-1], 0.0, 1.0, -1.0)).tolist() == [-2.0, 1.5, -1.0, 1.0, 0.0]


def test_nan_to_num_other_dtypes_and_overflow():
    assert mx.nan_to_num(mx.array([1, 2]), 5).tolist() == [1, 2]
    assert mx.nan_to_num(mx.array([True]), 5).dtype == mx.bool_
    assert mx.nan_to_num(3.0).item() == 3.0
    h = mx.nan_to_num(mx.array([np.nan, np.inf], dtype=mx.float16), 70000.0)
    assert h.tolist() == [float("inf"), 65504.0]
    with pytest.raises(TypeError):
        mx.nan_to_num(mx.array([np.nan]), nan=None)


CLIP = [
    ("int32", 2, 6, "int32"),
    ("int32", 2.5, 6, "float32"),
    ("int32", None, 4, "int32"),
    ("int32", 2, None, "int32"),
    ("uint8", 3, 200, "uint8"),
    ("int8", 6, 2, "int8"),
    ("float16", -1.5, 2.5, "float16"),
    ("bfloat16", -1, 1, "bfloat16"),
    ("float32", -1.5, 2.5, "float32"),
    ("float64", -1, None, "float64"),
    ("bool_", False, True, "bool_"),
    ("bool_", 0, 1, "int32"),
]


@pytest.mark.parametrize("name,lo,hi,want", CLIP, ids=str)
def test_clip_scalars(name, lo, hi, want, rng):
    for kind, a, x in view_variants(name, (3, 4), rng, special=True):
        out = mx.clip(a, lo, hi)
        assert name_of(out.dtype) == want, kind
        expected = x.astype(np.float64)
        if lo is not None:
            expected = np.where(np.isnan(expected), expected, np.maximum(expected, lo))
        if hi is not None:
            expected = np.where(np.isnan(expected), expected, np.minimum(expected, hi))
        assert_matches(out, expected.astype(NP[want]) if not is_float(want) else expected, want)


@pytest.mark.parametrize("name", ALL)
def test_clip_arrays(name, rng):
    a, x = make(name, (3, 4), rng, special=True)
    lo, lx = make(name, (4,), rng)
    hi, hx = make(name, (3, 1), rng, low=5, high=12)
    out = mx.clip(a, lo, hi)
    assert out.dtype == dt(name)
    if name == "bool_":
        expected = (x | lx) & hx
    else:
        with np.errstate(invalid="ignore"):
            expected = np.minimum(np.maximum(x, lx), hx)  # numpy's maximum also keeps NaN
    assert_matches(out, expected, name)


def test_clip_as_mlx():
    a = mx.array([1, 5, 9])
    assert mx.clip(a, mx.array([2.0, 3, 4]), 4).dtype == mx.float32
    assert mx.clip(a, mx.array([[2], [3]]), 4).tolist() == [[2, 4, 4], [3, 4, 4]]
    assert mx.clip(mx.array([1, 5, 9], dtype=mx.int8), mx.array(2, dtype=mx.int32), 4).dtype == mx.int32
    assert mx.clip(a, a_min=2, a_max=None).tolist() == [2, 5, 9]
    c = mx.clip(mx.array([1.0, float("nan"), 9.0]), 2, 4).tolist()
    assert c[0] == 2 and math.isnan(c[1]) and c[2] == 4
    with pytest.raises(ValueError, match=r"\[clip\] At most one of a_min and a_max may be None"):
        mx.clip(a, None, None)
    with pytest.raises(ValueError, match="would result in overflow"):
        mx.clip(mx.array([1], dtype=mx.uint8), -1, 6)
    with pytest.raises(ValueError, match=r"broadcast"):
        mx.clip(a, mx.array([1, 2]), None)
    with pytest.raises(TypeError, match=r"\[clip\]"):
        mx.clip(a, "x", None)


# ---------------------------------------------------------------------------------------
# isclose, allclose, array_equal
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("na", ALL)
@pytest.mark.parametrize("nb", ["float32", "int32", "float16", "uint8", "bool_", "float64"])
@pytest.mark.parametrize("equal_nan", [False, True])
def test_isclose(na, nb, equal_nan, rng):
    a, x = make(na, (3, 4), rng, low=0, high=5, special=True)
    y = x.astype(np.float64).copy()
    y[::2] = y[::2] * (1 + 3e-6)  # within rtol of float32 computation
    y[1, 1:] = y[1, 1:] + 0.5  # clearly apart
    if nb == "bool_":
        y = np.abs(y) > 1
    b = mx.array(y, dtype=dt(nb))
    yb = to_np(b)
    out = mx.isclose(a, b, equal_nan=equal_nan)
    assert out.dtype == mx.bool_
    compute = PROMOTE[(na, nb)]
    # Compared as kiln does, after promotion (inf converts to int32 as INT_MIN, say).
    with np.errstate(over="ignore"):
        xc, yc = (v.astype(NP[compute]).astype(np.float64) for v in (x, yb))
    expected = np.isclose(xc, yc, equal_nan=equal_nan)
    if compute in ("float16", "bfloat16"):
        # Computed in the half type, where 3e-6 is below resolution: only compare the
        # clearly-apart and special entries.
        mask = np.zeros_like(expected)
        mask[1, 1:] = True
        mask |= ~np.isfinite(x.astype(np.float64))
        np.testing.assert_array_equal(to_np(out)[mask], expected[mask])
    else:
        np.testing.assert_array_equal(to_np(out), expected)
    np.testing.assert_array_equal(
        np.asarray(mx.allclose(a, b, equal_nan=equal_nan)), np.all(to_np(out))
    )


def test_isclose_edges():
    inf, nan = float("inf"), float("nan")
    a = mx.array([1.0, nan, inf, inf, -inf])
    b = mx.array([1.0 + 1e-6, nan, inf, -inf, -inf])
    assert mx.isclose(a, b).tolist() == [True, False, True, False, True]
    assert mx.isclose(a, b, equal_nan=True).tolist() == [True, True, True, False, True]
    # Unsigned differences do not wrap (MLX's formula would: 1 - 2 is 255 in uint8).
    u = mx.isclose(mx.array([1, 2], dtype=mx.uint8), mx.array([2, 2], dtype=mx.uint8), atol=1)
    assert u.tolist() == [True, True]
    assert mx.isclose(mx.array([2**62], dtype=mx.int64), mx.array([2**62 + 1], dtype=mx.int64), rtol=0, atol=0).item() is False
    assert mx.isclose(mx.array([1.0, 2]), mx.array([1.0, 2]), rtol=-1).tolist() == [False, False]
    assert mx.isclose(mx.array([1.0, 2.0]), mx.array([[1.0], [2.0]])).shape == (2, 2)
    assert mx.allclose(mx.array([]), mx.array([])).item() is True
    assert mx.allclose(mx.array([1.0]), mx.array([1.0, 2.0])).item() is False
    assert mx.allclose(mx.array([1.0, nan]), mx.array([1.0, nan]), equal_nan=True).item() is True
    with pytest.raises(ValueError, match=r"broadcast"):
        mx.isclose(mx.array([1.0, 2]), mx.array([1.0, 2, 3]))
    with pytest.raises(ValueError, match=r"broadcast"):
        mx.allclose(mx.array([1.0, 2]), mx.array([1.0, 2, 3]))


def test_array_equal():
    nan = float("nan")
    assert mx.array_equal(mx.array([1, 2]), mx.array([1.0, 2.0])).item() is True
    assert mx.array_equal(mx.array([1, 2]), mx.array([1, 2, 3])).item() is False
    assert mx.array_equal(mx.array([1, 2]), mx.array([[1, 2]])).item() is False
    assert mx.array_equal(mx.array([1, nan]), mx.array([1, nan])).item() is False
    assert mx.array_equal(mx.array([1, nan]), mx.array([1, nan]), equal_nan=True).item() is True
    assert mx.array_equal(1, 1.0).item() is True
    assert mx.array_equal(mx.array([]), mx.array([])).item() is True
    assert mx.array_equal(mx.zeros((0, 3)), mx.zeros((3, 0))).item() is False
    assert mx.array_equal(mx.array([True]), mx.array([1])).item() is True
    x = mx.arange(12).reshape(3, 4)
    assert mx.array_equal(x.T, mx.array(np.arange(12).reshape(3, 4).T)).item() is True
    assert mx.array_equal(x[::-1], x).item() is False
    assert mx.array_equal(x, x).dtype == mx.bool_ and mx.array_equal(x, x).shape == ()
    with pytest.raises(TypeError):
        mx.array_equal(x, x, True)


# ---------------------------------------------------------------------------------------
# Methods and stop_gradient
# ---------------------------------------------------------------------------------------

METHODS = ["square", "cos", "log1p", "log2", "log10", "reciprocal", "rsqrt"]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("name", ["float32", "int32", "float16"])
def test_methods_match_functions(method, name, rng):
    for kind, a, x in view_variants(name, (3, 4), rng, low=1, high=9):
        out = getattr(a, method)()
        expected = getattr(mx, method)(a)
        assert out.dtype == expected.dtype, kind
        np.testing.assert_array_equal(to_np(out), to_np(expected))


def test_stop_gradient_is_identity_on_views():
    x = mx.arange(12).reshape(3, 4)
    for v, ref in [(x, np.arange(12).reshape(3, 4))]:
        for view, rv in [(v.T, ref.T), (v[::-1, ::2], ref[::-1, ::2]), (v, ref)]:
            out = mx.stop_gradient(view)
            assert out.dtype == view.dtype and out.shape == view.shape
            np.testing.assert_array_equal(to_np(out), rv)
    assert mx.stop_gradient(mx.array(2.5)).item() == 2.5
