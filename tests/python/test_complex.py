"""complex64 end to end against numpy (complex64 arithmetic as the oracle): construction
from Python complex numbers and numpy, conversions back, repr, astype to and from every
dtype, promotion, elementwise ops (and which ones raise, as MLX), reductions, matmul,
movement (copy kernels with 8-byte elements) and strided views."""

import kiln.core as mx
import numpy as np
import pytest
from conftest import ALL, NP, dt, looser

C = np.complex64


def rand_c(rng, shape):
    re = rng.standard_normal(shape).astype(np.float32)
    im = rng.standard_normal(shape).astype(np.float32)
    return (re + 1j * im).astype(C)


def close(got, want, rtol=2e-5, atol=2e-6):
    got = np.asarray(got)
    assert got.dtype == np.asarray(want).dtype, (got.dtype, np.asarray(want).dtype)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)


# ---- dtype ------------------------------------------------------------------------------


def test_dtype_object():
    assert mx.complex64.size == 8
    assert str(mx.complex64) == "kiln.core.complex64"
    assert mx.issubdtype(mx.complex64, mx.complexfloating)
    assert mx.issubdtype(mx.complex64, mx.inexact)
    assert mx.issubdtype(mx.complex64, mx.number)
    assert not mx.issubdtype(mx.complex64, mx.floating)
    assert not mx.issubdtype(mx.float32, mx.complexfloating)
    f = mx.finfo(mx.complex64)
    assert f.dtype == mx.float32 and f.bits == 32
    assert f.eps == np.finfo(np.float32).eps and f.max == np.finfo(np.float32).max


@pytest.mark.parametrize("other", ALL)
def test_promotion_complex_wins(other):
    a = mx.zeros((2,), dtype=mx.complex64)
    b = mx.zeros((2,), dtype=dt(other))
    assert (a + b).dtype == mx.complex64
    assert (b + a).dtype == mx.complex64


def test_weak_scalars(device):
    assert (mx.array([1, 2]) * 1j).dtype == mx.complex64
    assert (mx.array([1.0], dtype=mx.float16) + 1j).dtype == mx.complex64
    assert (mx.array([1 + 1j]) * 2.5).dtype == mx.complex64
    assert (mx.array([1 + 1j]) + 2).dtype == mx.complex64
    close(mx.array([1 + 2j]) * 2.5, np.array([2.5 + 5j], dtype=C))


# ---- construction and conversion ---------------------------------------------------------


def test_python_scalars_and_lists():
    a = mx.array(1 + 2j)
    assert a.dtype == mx.complex64 and a.shape == ()
    assert a.item() == 1 + 2j and isinstance(a.item(), complex)
    b = mx.array([1, 2.5, 3j])
    assert b.dtype == mx.complex64
    assert b.tolist() == [1 + 0j, 2.5 + 0j, 3j]
    assert mx.array([[1j, 2], [3, 4]]).shape == (2, 2)
    assert mx.array([True, 1j]).dtype == mx.complex64
    assert mx.array(2, dtype=mx.complex64).item() == 2 + 0j


@pytest.mark.parametrize("np_dtype", [np.complex64, np.complex128])
@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 3)])
def test_numpy_round_trip(np_dtype, shape):
    rng = np.random.default_rng(0)
    x = rand_c(rng, shape).astype(np_dtype)
    a = mx.array(x)
    assert a.dtype == mx.complex64 and a.shape == shape
    back = np.array(a)
    assert back.dtype == np.complex64 and back.shape == shape
    np.testing.assert_array_equal(back, x.astype(np.complex64))


def test_numpy_strided_input(device):
    x = rand_c(np.random.default_rng(1), (4, 5))
    for view in [x.T, x[::-1, ::2]]:
        np.testing.assert_array_equal(np.array(mx.array(view)), view)
    # to a real dtype: the real part, as MLX
    assert np.array(mx.array(x, dtype=mx.float32)).tolist() == x.real.tolist()


def test_repr():
    a = mx.array([1 + 2j, 3 - 4j, 0.5j])
    assert repr(a) == "array([1+2j, 3-4j, 0+0.5j], dtype=complex64)"
    assert repr(mx.array(1 + 2j)) == "array(1+2j, dtype=complex64)"
    b = mx.array([[1 + 2j, 3 - 4.25j], [1e10j, float("nan") + 1j]])
    assert repr(b) == "array([[1+2j, 3-4.25j],\n       [0+1e+10j, nan+1j]], dtype=complex64)"
    assert repr(mx.array([complex(float("inf"), -float("inf"))])) == (
        "array([inf-infj], dtype=complex64)"
    )
    # MLX's sign rule: `-` only when the imaginary part is < 0
    odd = mx.array([complex(1, float("nan")), complex(0, -0.0)])
    assert repr(odd) == "array([1+nanj, 0+-0j], dtype=complex64)"


@pytest.mark.parametrize("to", ALL)
def test_astype_from_complex(to, device):
    x = np.array([1.7 + 2j, -3.5 - 4j, 0.5j, 0j, 100.25 + 1j], dtype=C)
    got = mx.array(x).astype(dt(to))
    if to == "bool_":
        want = x != 0
    elif to == "bfloat16":
        got = got.astype(mx.float32)
        want = x.real.astype(np.float32)
        np.testing.assert_allclose(np.array(got), want, rtol=1e-2)
        return
    else:
        want = x.real.astype(np.float32).astype(NP[to])
    np.testing.assert_array_equal(np.array(got), want)


@pytest.mark.parametrize("frm", ALL)
def test_astype_to_complex(frm, device):
    vals = [0, 1, 2, 3] if frm != "bool_" else [True, False, True, True]
    a = mx.array(vals, dtype=dt(frm))
    got = np.array(a.astype(mx.complex64))
    np.testing.assert_array_equal(got, np.array(vals, dtype=np.float32).astype(C))


def test_creation(device):
    np.testing.assert_array_equal(np.array(mx.zeros((2, 3), dtype=mx.complex64)), np.zeros((2, 3), C))
    np.testing.assert_array_equal(np.array(mx.ones((2,), dtype=mx.complex64)), np.ones(2, C))
    f = mx.full((2,), 1 + 2j)
    assert f.dtype == mx.complex64 and f.tolist() == [1 + 2j, 1 + 2j]
    assert mx.full((2,), 3, dtype=mx.complex64).tolist() == [3 + 0j, 3 + 0j]
    assert mx.arange(3, dtype=mx.complex64).tolist() == [0j, 1 + 0j, 2 + 0j]


def test_view(device):
    x = mx.array([1 + 2j, 3 + 4j])
    np.testing.assert_array_equal(np.array(mx.view(x, mx.float32)), [1, 2, 3, 4])
    y = mx.view(mx.array([1.0, 2, 3, 4]), mx.complex64)
    assert y.tolist() == [1 + 2j, 3 + 4j]


# ---- elementwise ---------------------------------------------------------------------------

UNARY = [
    ("negative", np.negative),
    ("exp", np.exp),
    ("log", np.log),
    ("log2", np.log2),
    ("log10", np.log10),
    ("log1p", np.log1p),
    ("sqrt", np.sqrt),
    ("sin", np.sin),
    ("cos", np.cos),
    ("tan", np.tan),
    ("sinh", np.sinh),
    ("cosh", np.cosh),
    ("tanh", np.tanh),
    ("arcsin", np.arcsin),
    ("arccos", np.arccos),
    ("arctan", np.arctan),
    ("arcsinh", np.arcsinh),
    ("arccosh", np.arccosh),
    ("arctanh", np.arctanh),
    ("square", np.square),
    ("reciprocal", np.reciprocal),
    ("rsqrt", lambda z: 1 / np.sqrt(z)),
    ("conj", np.conj),
    ("conjugate", np.conjugate),
    ("sign", lambda z: np.where(z == 0, 0, z / np.abs(z)).astype(C)),
    ("round", lambda z: (np.round(z.real) + 1j * np.round(z.imag)).astype(C)),
]


@pytest.mark.parametrize("name,ref", UNARY, ids=[u[0] for u in UNARY])
@pytest.mark.parametrize("shape", [(), (0,), (7,), (3, 4)])
def test_unary(name, ref, shape, device):
    x = rand_c(np.random.default_rng(2), shape)
    with np.errstate(all="ignore"):
        want = ref(x).astype(C)
    tol = looser(device, 1e-4, 2e-4)
    close(getattr(mx, name)(mx.array(x)), want, rtol=tol, atol=tol / 10)


def test_parts_and_abs(device):
    x = rand_c(np.random.default_rng(3), (3, 4))
    a = mx.array(x)
    close(mx.real(a), x.real)
    close(mx.imag(a), x.imag)
    close(a.real, x.real)
    close(a.imag, x.imag)
    close(a.conj(), np.conj(x))
    close(mx.abs(a), np.abs(x))
    assert mx.abs(a).dtype == mx.float32
    # no overflow in |z| for large parts
    assert mx.abs(mx.array([3e30 + 4e30j])).item() == pytest.approx(5e30, rel=1e-6)
    # real dtypes: real/conj are the identity, imag is zeros of the dtype
    i = mx.array([1, 2])
    assert mx.real(i).dtype == mx.int32 and mx.real(i).tolist() == [1, 2]
    assert mx.imag(i).dtype == mx.int32 and mx.imag(i).tolist() == [0, 0]
    assert mx.conj(i).tolist() == [1, 2]


BINARY = [
    ("add", np.add),
    ("subtract", np.subtract),
    ("multiply", np.multiply),
    ("divide", np.divide),
    ("power", np.power),
    ("equal", np.equal),
    ("not_equal", np.not_equal),
]


@pytest.mark.parametrize("name,ref", BINARY, ids=[b[0] for b in BINARY])
@pytest.mark.parametrize("sa,sb", [((), ()), ((3, 4), (3, 4)), ((3, 1), (4,)), ((0, 2), (2,))])
def test_binary(name, ref, sa, sb, device):
    rng = np.random.default_rng(4)
    x, y = rand_c(rng, sa), rand_c(rng, sb)
    if name in ("equal", "not_equal") and x.size and y.size:
        y = np.broadcast_to(y, np.broadcast_shapes(sa, sb)).copy()
        y.flat[::2] = np.broadcast_to(x, y.shape).flat[::2]
    with np.errstate(all="ignore"):
        want = ref(x, y)
    got = getattr(mx, name)(mx.array(x), mx.array(y))
    if want.dtype == np.bool_:
        np.testing.assert_array_equal(np.array(got), want)
    else:
        tol = looser(device, 1e-4, 2e-4 if name != "power" else 1e-3)
        close(got, want.astype(C), rtol=tol, atol=tol / 10)


def test_operators_and_mixed_dtypes(device):
    x = rand_c(np.random.default_rng(5), (4,))
    r = np.arange(4, dtype=np.float32) + 1
    a, b = mx.array(x), mx.array(r)
    close(a + b, (x + r).astype(C))
    close(b - a, (r - x).astype(C))
    close(a * b, (x * r).astype(C))
    close(b / a, (r / x).astype(C), rtol=1e-5)
    close(-a, -x)
    close(a**2, (x**2).astype(C), rtol=1e-5)


def test_division_special_values(device):
    got = np.array(mx.array([1 + 0j]) / mx.array([0j]))
    assert np.isinf(got.real[0]) and np.isnan(got.imag[0])
    big = mx.array([3e38 + 3e38j]) / mx.array([3e38 + 3e38j])
    assert big.tolist() == [1 + 0j]


def test_lexicographic_order(device):
    a = mx.array([1 + 5j, 1 + 1j, 2 - 1j])
    b = mx.array([2 - 1j, 1 + 2j, 2 - 1j])
    assert mx.less(a, b).tolist() == [True, True, False]
    assert mx.greater_equal(a, b).tolist() == [False, False, True]
    assert mx.maximum(a, b).tolist() == [2 - 1j, 1 + 2j, 2 - 1j]
    assert mx.sort(mx.array([2 + 0j, 1 + 3j, 1 + 1j])).tolist() == [1 + 1j, 1 + 3j, 2 + 0j]


def test_isnan_isinf_isfinite(device):
    nan, inf = float("nan"), float("inf")
    a = mx.array([complex(inf, 1), complex(1, -inf), complex(nan, 0), 1 + 1j])
    assert mx.isnan(a).tolist() == [False, False, True, False]
    assert mx.isinf(a).tolist() == [True, True, False, False]
    assert mx.isfinite(a).tolist() == [False, False, False, True]


@pytest.mark.parametrize(
    "fn",
    ["sigmoid", "erf", "erfinv", "floor", "ceil", "expm1", "nan_to_num"],
)
def test_unsupported_unary_raise_value_error(fn):
    with pytest.raises(ValueError):
        getattr(mx, fn)(mx.array([1 + 1j]))


def test_unsupported_binary_raise():
    a = mx.array([1 + 1j])
    for fn in ["remainder", "arctan2", "divmod"]:
        with pytest.raises(ValueError):
            getattr(mx, fn)(a, a)
    for fn in ["bitwise_and", "left_shift"]:
        with pytest.raises(RuntimeError):
            getattr(mx, fn)(a, a)
    with pytest.raises(ValueError):
        mx.bitwise_invert(a)


# ---- reductions, matmul, movement -----------------------------------------------------


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_reductions(axis, device):
    x = rand_c(np.random.default_rng(6), (3, 5))
    a = mx.array(x)
    close(mx.sum(a, axis=axis), np.sum(x, axis=axis).astype(C), rtol=1e-5, atol=1e-5)
    close(mx.prod(a, axis=axis), np.prod(x, axis=axis).astype(C), rtol=1e-4, atol=1e-4)
    close(mx.mean(a, axis=axis), np.mean(x, axis=axis).astype(C), rtol=1e-5, atol=1e-5)
    close(mx.cumsum(a, axis=0), np.cumsum(x, axis=0).astype(C), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("sa,sb", [((2, 3), (3, 4)), ((2, 2, 3), (2, 3, 1)), ((3,), (3, 2)), ((0, 3), (3, 2))])
def test_matmul(sa, sb, device):
    rng = np.random.default_rng(7)
    x, y = rand_c(rng, sa), rand_c(rng, sb)
    close(mx.array(x) @ mx.array(y), (x @ y).astype(C), rtol=1e-4, atol=1e-5)
    # transposed view, and a real operand promoted
    xt = np.ascontiguousarray(x.swapaxes(-1, -2)) if x.ndim >= 2 else x
    if x.ndim >= 2:
        a = mx.swapaxes(mx.array(xt), -1, -2)
        close(a @ mx.array(y), (x @ y).astype(C), rtol=1e-4, atol=1e-5)
    r = rng.standard_normal(sb).astype(np.float32)
    close(mx.array(x) @ mx.array(r), (x @ r).astype(C), rtol=1e-4, atol=1e-5)


def test_compositions_on_magnitudes(device):
    x = rand_c(np.random.default_rng(10), (3, 4))
    a = mx.array(x)
    v = mx.var(a, axis=1)
    assert v.dtype == mx.float32
    close(v, np.var(x, axis=1).astype(np.float32), rtol=1e-5, atol=1e-6)
    close(mx.std(a), np.float32(np.std(x)), rtol=1e-5)
    n = mx.linalg.norm(a)
    assert n.dtype == mx.float32
    close(n, np.float32(np.linalg.norm(x)), rtol=1e-5)
    close(mx.linalg.norm(a, ord=1, axis=1), np.linalg.norm(x, ord=1, axis=1).astype(np.float32), rtol=1e-5)
    c = rand_c(np.random.default_rng(11), (3, 3))
    got = mx.addmm(mx.array(c), a[:, :2], mx.array(x[:2, :3]), alpha=2.0, beta=0.5)
    close(got, (2 * (x[:, :2] @ x[:2, :3]) + 0.5 * c).astype(C), rtol=1e-4, atol=1e-5)


def test_movement_and_indexing(device):
    x = rand_c(np.random.default_rng(8), (4, 5))
    a = mx.array(x)
    np.testing.assert_array_equal(np.array(a.T), x.T)
    np.testing.assert_array_equal(np.array(a[::-1, 1::2]), x[::-1, 1::2])
    np.testing.assert_array_equal(np.array(a[mx.array([2, 0, 2])]), x[[2, 0, 2]])
    np.testing.assert_array_equal(np.array(mx.reshape(a.T, (5, 4))), x.T.reshape(5, 4))
    np.testing.assert_array_equal(
        np.array(mx.concatenate([a, mx.array([[1.0] * 5])])),
        np.concatenate([x, np.ones((1, 5), C)]),
    )
    cond = np.arange(20).reshape(4, 5) % 3 == 0
    np.testing.assert_array_equal(np.array(mx.where(mx.array(cond), a, 0)), np.where(cond, x, 0))
    b = mx.array(x)
    b[1, 2] = 7 - 7j
    y = x.copy()
    y[1, 2] = 7 - 7j
    np.testing.assert_array_equal(np.array(b), y)
    np.testing.assert_array_equal(np.array(mx.flatten(a[:, ::-2])), x[:, ::-2].ravel())


def test_save_load(tmp_path):
    x = rand_c(np.random.default_rng(9), (3, 2))
    f = str(tmp_path / "c.npy")
    mx.save(f, mx.array(x))
    np.testing.assert_array_equal(np.load(f), x)
    np.testing.assert_array_equal(np.array(mx.load(f)), x)
    g = str(tmp_path / "c.npz")
    mx.savez(g, a=mx.array(x))
    np.testing.assert_array_equal(np.array(mx.load(g)["a"]), x)
    h = str(tmp_path / "c.safetensors")
    mx.save_safetensors(h, {"a": mx.array(x)})
    np.testing.assert_array_equal(np.array(mx.load(h)["a"]), x)


# ---- the GPU's kernels over blocks of values, views, mixed programs, reductions ----------

CRNG = np.random.default_rng(11)


def crand(shape, lo=-2.0, hi=2.0):
    re = CRNG.uniform(lo, hi, size=shape).astype(np.float32)
    im = CRNG.uniform(lo, hi, size=shape).astype(np.float32)
    return (re + 1j * im).astype(C)


def parts(x):
    x = np.asarray(x)
    return np.stack([x.real, x.imag]) if np.iscomplexobj(x) else x


def close_parts(got, want, rtol=2e-5, atol=2e-6):
    """Real and imaginary parts compared separately (NaN and infinities in place)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape,
                                                                  got.dtype, want.dtype)
    if got.dtype == np.bool_ or np.issubdtype(got.dtype, np.integer):
        np.testing.assert_array_equal(got, want)
        return
    np.testing.assert_allclose(parts(got), parts(want), rtol=rtol, atol=atol, equal_nan=True)


ROW_UNARY = dict(UNARY)
ROW_UNARY.update({"abs": np.abs, "real": np.real, "imag": np.imag})


@pytest.mark.parametrize("name", sorted(ROW_UNARY))
def test_unary_rows(name, device):
    x = crand((33, 65))
    got = np.array(getattr(mx, name)(mx.array(x)))
    want = ROW_UNARY[name](x.astype(np.complex128) if name not in ("sign", "round") else x)
    np.testing.assert_allclose(parts(got), parts(np.asarray(want).astype(got.dtype)), rtol=2e-4,
                               atol=2e-5)


ROW_BINARY = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "power": np.power, "floor_divide": np.divide,  # MLX: plain division on complex
    "maximum": np.maximum, "minimum": np.minimum,  # numpy's complex order is MLX's
    "logaddexp": None,  # checked through exp (the logs' branches may differ by 2 pi i)
    "equal": np.equal, "not_equal": np.not_equal, "less": np.less, "less_equal": np.less_equal,
    "greater": np.greater, "greater_equal": np.greater_equal,
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(ROW_BINARY))
def test_binary_rows(name, device):
    a, b = crand((17, 40)), crand((17, 40))
    b[0, :5] = a[0, :5]  # equal pairs
    b[1, :5] = a[1, :5].real + 1j * (a[1, :5].imag + 1)  # equal real parts
    got = np.array(getattr(mx, name)(mx.array(a), mx.array(b)))
    if name == "logaddexp":
        want = np.exp(a.astype(np.complex128)) + np.exp(b.astype(np.complex128))
        np.testing.assert_allclose(np.exp(got.astype(np.complex128)), want, rtol=2e-4, atol=2e-5)
        return
    want = np.asarray(ROW_BINARY[name](a.astype(np.complex128), b.astype(np.complex128)))
    if want.dtype != np.bool_:
        want = want.astype(C)
    # power is exp(b log a): an ulp of exp / log / sincos amplified where b log a is large.
    tol = 1e-3 if name == "power" else 2e-4
    close_parts(got, want, rtol=tol, atol=2e-5)


def test_division_edge_cases(device):
    """Annex G: x / 0 is infinite, finite / inf is zero, huge parts do not overflow."""
    a = np.array([1 + 0j, 1 + 1j, 3e38 + 3e38j, 0j, np.inf + 1j], dtype=C)
    b = np.array([0j, np.inf + 0j, 3e38 + 3e38j, 0j, 2 + 1j], dtype=C)
    got = np.array(mx.divide(mx.array(a), mx.array(b)))
    want = np.array([complex(np.inf, np.nan), 0j, 1 + 0j, complex(np.nan, np.nan),
                     complex(np.inf, -np.inf)], dtype=C)
    np.testing.assert_array_equal(parts(got), parts(want))


MIXED = [
    lambda r: (crand((3, 1, 5)), r.standard_normal((4, 5)).astype(np.float32)),
    lambda r: (r.integers(-5, 5, (4, 5)).astype(np.int32), crand((5,))),
    lambda r: (crand(()), r.standard_normal((2, 3)).astype(np.float16)),
    lambda r: (crand((2, 3)), np.array(True)),
]


@pytest.mark.parametrize("make", range(len(MIXED)), ids=["float32", "int32", "float16", "bool"])
@pytest.mark.parametrize("name", ["add", "multiply", "divide", "subtract", "equal", "less"])
def test_mixed_dtypes_and_broadcasting(make, name, device):
    a, b = MIXED[make](np.random.default_rng(make))
    got = np.array(getattr(mx, name)(mx.array(a), mx.array(b)))
    want = np.asarray(getattr(np, name)(np.asarray(a).astype(C), np.asarray(b).astype(C)))
    close_parts(got, want if want.dtype == np.bool_ else want.astype(C))


def test_scalars_and_python_complex(device):
    x = crand((4, 6))
    a = mx.array(x)
    close_parts(np.array(a * (1 + 2j) - 3), (x * np.complex64(1 + 2j) - 3).astype(C))
    close_parts(np.array(2.5 / a + 1j), (np.float32(2.5) / x + np.complex64(1j)).astype(C))
    r = np.random.default_rng(1).standard_normal((5,)).astype(np.float32)
    close_parts(np.array(mx.array(r) * 1j + mx.array(r)), (r * np.complex64(1j) + r).astype(C))


CAST_DTYPES = ["bool_", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
               "float16", "bfloat16", "float32"]  # fmt: skip


@pytest.mark.parametrize("name", CAST_DTYPES)
def test_astype_to_and_from_complex_of_large_and_nan_parts(name, device):
    z = crand((7, 9), lo=-100, hi=100)
    z[0, :4] = [0j, 1j, np.nan + 0j, 0.5 + 0j]
    cast = mx.array(z).astype(dt(name))
    real = z.real.astype(np.float32)
    with np.errstate(invalid="ignore"):
        if name == "bool_":
            want = z != 0
        elif name in ("float16", "float32"):
            want = real.astype(NP[name])
        elif name == "bfloat16":
            want = np.array(mx.array(real).astype(mx.bfloat16).astype(mx.float32), np.float32)
        else:
            # x86's conversions: to int32 directly (NaN and overflow give INT_MIN), narrower
            # and unsigned types through int64, truncated.
            want = real.astype(np.int32) if name == "int32" else \
                real.astype(np.int64).astype(NP[name])
    got = np.array(cast.astype(mx.float32) if name == "bfloat16" else cast)
    np.testing.assert_array_equal(got, want)
    back = np.array(cast.astype(mx.complex64))
    np.testing.assert_array_equal(back, got.astype(np.float32).astype(C))


PARTS_VALUES = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, np.inf, -np.inf, np.nan]
SPECIAL = np.array([complex(r, i) for r in PARTS_VALUES for i in PARTS_VALUES], dtype=C)


def test_isnan_isinf_isfinite_and_where_of_special_values(device):
    z = SPECIAL.reshape(9, 9)
    for name in ["isnan", "isinf", "isfinite"]:
        np.testing.assert_array_equal(np.array(getattr(mx, name)(mx.array(z))), getattr(np, name)(z))
    m = np.random.default_rng(2).random((9, 9)) < 0.5
    other = crand((9, 9))
    np.testing.assert_array_equal(parts(np.array(mx.where(mx.array(m), mx.array(z), mx.array(other)))),
                                  parts(np.where(m, z, other)))
    np.testing.assert_array_equal(parts(np.array(mx.where(mx.array(m), mx.array(z), 2.0))),
                                  parts(np.where(m, z, np.complex64(2.0))))


@pytest.mark.parametrize("view", ["transpose", "reverse", "step", "broadcast"])
def test_strided_inputs(view, device):
    z, w = crand((6, 10)), crand((10, 6))
    take = {
        "transpose": lambda z, w: (z.T, w),
        "reverse": lambda z, w: (z[::-1, ::-2], w[::-2, ::-1].T),
        "step": lambda z, w: (z[1::2, 2:8], w[2:8, 1::2].T),
        "broadcast": lambda z, w: (mx.broadcast_to(z[:1], (6, 10)).T if isinstance(z, mx.array)
                                   else np.broadcast_to(z[:1], (6, 10)).T, w),
    }[view]
    a, b = take(mx.array(z), mx.array(w))
    x, y = (v.astype(np.complex128) for v in take(z, w))
    close_parts(np.array(mx.exp(a) * b + mx.sqrt(b)), (np.exp(x) * y + np.sqrt(y)).astype(C),
                rtol=2e-5, atol=2e-5)
    close_parts(np.array(mx.abs(a)), np.abs(x).astype(np.float32))
    close_parts(np.array(mx.real(b) + mx.imag(a)), (y.real + x.imag).astype(np.float32))


def test_empty_and_zero_dim(device):
    for shape in [(0,), (0, 4), (3, 0, 2), ()]:
        z = crand(shape)
        a = mx.array(z)
        close_parts(np.array(mx.exp(a) + a * 1j), (np.exp(z) + z * np.complex64(1j)).astype(C))
        close_parts(np.array(mx.abs(a)), np.abs(z))
        s = mx.sum(a, axis=0) if z.ndim else mx.sum(a)
        close_parts(np.array(s), np.asarray(np.sum(z, axis=0) if z.ndim else np.sum(z)).astype(C))


@pytest.mark.parametrize("axis", [None, 0, 1, 2, (0, 2), (1, 2)], ids=str)
@pytest.mark.parametrize("name", ["sum", "prod", "max", "min", "mean"])
def test_reductions_of_a_batch(name, axis, device):
    z = crand((5, 37, 9), lo=-1, hi=1)
    got = np.array(getattr(mx, name)(mx.array(z), axis=axis))
    want = getattr(np, name)(z.astype(np.complex128), axis=axis).astype(C)  # numpy's order is MLX's
    close_parts(got, want, rtol=1e-3, atol=1e-4)


def test_long_reductions_use_partials(device):
    z = crand((3, 70000), lo=-1, hi=1)
    w = z.astype(np.complex128)
    a = mx.array(z)
    close_parts(np.array(mx.sum(a, axis=1)), w.sum(axis=1).astype(C), rtol=1e-4, atol=1e-3)
    close_parts(np.array(mx.sum(a.T, axis=1)), w.T.sum(axis=1).astype(C), rtol=1e-4, atol=1e-3)
    close_parts(np.array(mx.sum(a)), np.asarray(w.sum()).astype(C), rtol=1e-4, atol=1e-2)


def test_reductions_with_nan_components(device):
    z = crand((4, 8))
    z[1, 3] = complex(np.nan, 1)
    z[2, 5] = complex(1, np.inf)
    for name in ["sum", "prod", "max", "min"]:
        got = np.array(getattr(mx, name)(mx.array(z), axis=1))
        with np.errstate(invalid="ignore"):
            want = getattr(np, name)(z.astype(np.complex128), axis=1).astype(C)
        close_parts(got, want, rtol=1e-5)


def test_indexing_and_data_movement(device):
    z = crand((8, 6))
    a = mx.array(z)
    idx = np.random.default_rng(4).integers(0, 8, (5,)).astype(np.int32)
    close_parts(np.array(a[mx.array(idx)]), z[idx])
    close_parts(np.array(mx.take(a, mx.array(idx % 6), axis=1)), np.take(z, idx % 6, axis=1))
    close_parts(np.array(mx.concatenate([a, a[::-1] * 1j], axis=1)),
                np.concatenate([z, z[::-1] * np.complex64(1j)], axis=1))
    close_parts(np.array(mx.pad(a, ((1, 2), (0, 1)))), np.pad(z, ((1, 2), (0, 1))))
    close_parts(np.array(a.reshape(3, 16).T.reshape(-1)), z.reshape(3, 16).T.reshape(-1))
    b = a * 1
    b[2:5, ::2] = mx.array(1 + 1j)
    y = z.copy()
    y[2:5, ::2] = 1 + 1j
    close_parts(np.array(b), y)
    rows = np.array([0, 3, 3, 7], dtype=np.int32)
    v = crand((4, 6))
    for op, ufunc in [("add", np.add), ("multiply", np.multiply), ("maximum", np.maximum)]:
        want = z.copy()
        ufunc.at(want, rows, v)
        got = getattr(a.at[mx.array(rows)], op)(mx.array(v))
        close_parts(np.array(got), want, rtol=1e-5)
    mask = np.random.default_rng(5).random((8, 6)) < 0.4
    close_parts(np.array(mx.where(mx.array(mask), a, 0)), np.where(mask, z, np.complex64(0)))
    np.testing.assert_array_equal(np.array(a.view(mx.float32)), z.view(np.float32))


def test_compiled_mixed_complex_and_real(device):
    """A program mixing complex and real values (one fused kernel on the GPU) equals numpy on
    every call (lazy, direct, then a captured graph and its replays on the GPU)."""

    def f(z, x):
        w = mx.exp(z * 0.5) * x + (1 - 2j)
        r = mx.abs(w) + mx.real(w) * x
        return mx.where(r > 1, w, mx.conjugate(w)), r, mx.sum(w * w, axis=0)

    def ref(z, x):
        z, x = z.astype(np.complex128), x.astype(np.float64)
        w = np.exp(z * 0.5) * x + (1 - 2j)
        r = np.abs(w) + w.real * x
        return np.where(r > 1, w, np.conjugate(w)).astype(C), r.astype(np.float32), \
            np.sum(w * w, axis=0).astype(C)

    compiled = mx.compile(f)
    rng = np.random.default_rng(6)
    for _ in range(4):
        z, x = crand((16, 12)), rng.standard_normal((12,)).astype(np.float32)
        got = compiled(mx.array(z), mx.array(x))
        for g, w in zip(got, ref(z, x)):
            close_parts(np.array(g), w, rtol=1e-4, atol=1e-4)
