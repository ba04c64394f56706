"""complex64 end to end against numpy (complex64 arithmetic as the oracle): construction
from Python complex numbers and numpy, conversions back, repr, astype to and from every
dtype, promotion, elementwise ops (and which ones raise, as MLX), reductions, matmul,
movement (copy kernels with 8-byte elements) and strided views."""

import kiln.core as mx
import numpy as np
import pytest
from conftest import ALL, NP, dt

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


def test_weak_scalars():
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


def test_numpy_strided_input():
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
def test_astype_from_complex(to):
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
def test_astype_to_complex(frm):
    vals = [0, 1, 2, 3] if frm != "bool_" else [True, False, True, True]
    a = mx.array(vals, dtype=dt(frm))
    got = np.array(a.astype(mx.complex64))
    np.testing.assert_array_equal(got, np.array(vals, dtype=np.float32).astype(C))


def test_creation():
    np.testing.assert_array_equal(np.array(mx.zeros((2, 3), dtype=mx.complex64)), np.zeros((2, 3), C))
    np.testing.assert_array_equal(np.array(mx.ones((2,), dtype=mx.complex64)), np.ones(2, C))
    f = mx.full((2,), 1 + 2j)
    assert f.dtype == mx.complex64 and f.tolist() == [1 + 2j, 1 + 2j]
    assert mx.full((2,), 3, dtype=mx.complex64).tolist() == [3 + 0j, 3 + 0j]
    assert mx.arange(3, dtype=mx.complex64).tolist() == [0j, 1 + 0j, 2 + 0j]


def test_view():
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
def test_unary(name, ref, shape):
    x = rand_c(np.random.default_rng(2), shape)
    with np.errstate(all="ignore"):
        want = ref(x).astype(C)
    close(getattr(mx, name)(mx.array(x)), want, rtol=1e-4, atol=1e-5)


def test_parts_and_abs():
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
def test_binary(name, ref, sa, sb):
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
        close(got, want.astype(C), rtol=1e-4, atol=1e-5)


def test_operators_and_mixed_dtypes():
    x = rand_c(np.random.default_rng(5), (4,))
    r = np.arange(4, dtype=np.float32) + 1
    a, b = mx.array(x), mx.array(r)
    close(a + b, (x + r).astype(C))
    close(b - a, (r - x).astype(C))
    close(a * b, (x * r).astype(C))
    close(b / a, (r / x).astype(C), rtol=1e-5)
    close(-a, -x)
    close(a**2, (x**2).astype(C), rtol=1e-5)


def test_division_special_values():
    got = np.array(mx.array([1 + 0j]) / mx.array([0j]))
    assert np.isinf(got.real[0]) and np.isnan(got.imag[0])
    big = mx.array([3e38 + 3e38j]) / mx.array([3e38 + 3e38j])
    assert big.tolist() == [1 + 0j]


def test_lexicographic_order():
    a = mx.array([1 + 5j, 1 + 1j, 2 - 1j])
    b = mx.array([2 - 1j, 1 + 2j, 2 - 1j])
    assert mx.less(a, b).tolist() == [True, True, False]
    assert mx.greater_equal(a, b).tolist() == [False, False, True]
    assert mx.maximum(a, b).tolist() == [2 - 1j, 1 + 2j, 2 - 1j]
    assert mx.sort(mx.array([2 + 0j, 1 + 3j, 1 + 1j])).tolist() == [1 + 1j, 1 + 3j, 2 + 0j]


def test_isnan_isinf_isfinite():
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
def test_reductions(axis):
    x = rand_c(np.random.default_rng(6), (3, 5))
    a = mx.array(x)
    close(mx.sum(a, axis=axis), np.sum(x, axis=axis).astype(C), rtol=1e-5, atol=1e-5)
    close(mx.prod(a, axis=axis), np.prod(x, axis=axis).astype(C), rtol=1e-4, atol=1e-4)
    close(mx.mean(a, axis=axis), np.mean(x, axis=axis).astype(C), rtol=1e-5, atol=1e-5)
    close(mx.cumsum(a, axis=0), np.cumsum(x, axis=0).astype(C), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("sa,sb", [((2, 3), (3, 4)), ((2, 2, 3), (2, 3, 1)), ((3,), (3, 2)), ((0, 3), (3, 2))])
def test_matmul(sa, sb):
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


def test_compositions_on_magnitudes():
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


def test_movement_and_indexing():
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
