"""Matrix products (addmm, outer, inner, tensordot, einsum) and mx.linalg against numpy.

Decompositions are checked through what defines them (U S Vt = A, Q R = A, L L^T = A,
A V = V diag(w)) rather than signs, which are not unique. Inputs include batches, empty
matrices and views (transposed, negative-step)."""

import kiln.core as mx
import numpy as np
import pytest
from conftest import assert_matches, dt, to_np

F = ["float32", "float64"]
TOL = {"float16": 5e-3, "bfloat16": 3e-2, "float32": 2e-4, "float64": 1e-10}


def arr(x, dtype="float32"):
    return mx.array(np.asarray(x), dtype=dt(dtype))


def close(got, want, dtype="float32", tol=None):
    t = TOL[dtype] if tol is None else tol
    assert_matches(got, np.asarray(want), dtype, rtol=t, atol=t)


def close_np(got, want, tol):
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def randn(rng, shape, dtype="float32"):
    """Random values and their numpy twin at the dtype's precision."""
    a = arr(rng.standard_normal(shape), dtype)
    return a, to_np(a).astype(np.float64)


def variants(x, dtype="float32"):
    """A matrix stack as a plain array, a transposed view and a negative-step view."""
    yield "plain", arr(x, dtype), x
    xt = np.ascontiguousarray(np.swapaxes(x, -1, -2))
    yield "transposed", mx.swapaxes(arr(xt, dtype), -1, -2) if hasattr(mx, "swapaxes") else mx.transpose(
        arr(xt, dtype), list(range(x.ndim - 2)) + [x.ndim - 1, x.ndim - 2]
    ), x
    rev = np.ascontiguousarray(x[..., ::-1, :])
    yield "reversed", arr(rev, dtype)[..., ::-1, :], x


def spd(rng, n, batch=()):
    m = rng.standard_normal(batch + (n, n))
    return m @ np.swapaxes(m, -1, -2) + n * np.eye(n)


def swap(x):
    return np.swapaxes(x, -1, -2)


# ---------------------------------------------------------------------------------------
# Products
# ---------------------------------------------------------------------------------------

ADDMM = [
    ((2, 3), (3, 4), (2, 4)),
    ((2, 3), (3, 4), (4,)),
    ((2, 3), (3, 4), ()),
    ((5, 2, 3), (3, 4), (1, 4)),
    ((5, 2, 3), (5, 3, 4), (5, 2, 4)),
    ((3,), (3, 4), (4,)),
    ((2, 3), (3,), (2,)),
    ((3,), (3,), ()),
    ((2, 0), (0, 3), (2, 3)),
]


@pytest.mark.parametrize("sa,sb,sc", ADDMM)
@pytest.mark.parametrize("alpha,beta", [(1.0, 1.0), (2.0, 0.5), (-1.0, 0.0)])
def test_addmm(sa, sb, sc, alpha, beta, rng):
    (a, x), (b, y), (c, z) = randn(rng, sa), randn(rng, sb), randn(rng, sc)
    close(mx.addmm(c, a, b, alpha=alpha, beta=beta), alpha * (x @ y) + beta * z)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_addmm_dtypes(dtype, rng):
    (a, x), (b, y), (c, z) = randn(rng, (3, 4), dtype), randn(rng, (4, 2), dtype), randn(rng, (3, 2), dtype)
    out = mx.addmm(c, a, b, 0.5, 2.0)
    assert out.dtype == dt(dtype)
    close(out, 0.5 * (x @ y) + 2 * z, dtype, tol=TOL[dtype] * 10)


def test_addmm_promotion_and_errors():
    i = mx.ones((2, 2), dtype=mx.int32)
    f = mx.ones((2, 2))
    assert mx.addmm(i, f, f).dtype == mx.float32
    assert mx.addmm(mx.ones((2, 2), dtype=mx.float64), f, f).dtype == mx.float64
    with pytest.raises(ValueError, match="real floating point"):
        mx.addmm(i, i, i)
    with pytest.raises(ValueError, match="broadcast"):
        mx.addmm(mx.ones((3, 2)), f, f)
    with pytest.raises(ValueError, match="must broadcast to the output shape"):
        mx.addmm(mx.ones((4, 2, 2)), f, f)


@pytest.mark.parametrize("dtype", ["int32", "float32", "float16", "bool_"])
@pytest.mark.parametrize("sa,sb", [((3,), (4,)), ((2, 2), (3,)), ((), (3,)), ((0,), (2,))])
def test_outer(dtype, sa, sb, rng):
    x = (rng.standard_normal(sa) * 3).astype(np.float64)
    y = (rng.standard_normal(sb) * 3).astype(np.float64)
    a, b = mx.array(x).astype(dt(dtype)), mx.array(y).astype(dt(dtype))
    out = mx.outer(a, b)
    assert out.dtype == dt(dtype)
    assert_matches(out, np.outer(to_np(a), to_np(b)), rtol=TOL.get(dtype, 0), atol=TOL.get(dtype, 0))


@pytest.mark.parametrize("sa,sb", [((3,), (3,)), ((2, 3), (4, 3)), ((2, 1, 3), (3,)), ((), (2, 3)), ((2, 0), (3, 0))])
def test_inner(sa, sb, rng):
    (a, x), (b, y) = randn(rng, sa), randn(rng, sb)
    close(mx.inner(a, b), np.inner(x, y))


def test_inner_errors():
    with pytest.raises(ValueError, match="same last dimension"):
        mx.inner(mx.ones((2, 3)), mx.ones((3, 2)))
    with pytest.raises(ValueError):
        mx.inner(mx.array([1, 2]), mx.array([3, 4]))  # integer contraction, as MLX


TENSORDOT = [
    ((2, 3, 4), (3, 4, 5), 2),
    ((2, 3, 4), (4, 5), 1),
    ((2, 3), (4, 5), 0),
    ((3, 4), (3, 4), 2),
    ((2, 3, 4), (4, 2, 5), [[0, 2], [1, 0]]),
    ((2, 3, 4), (4, 2, 5), ([2], [0])),
    ((2, 3, 4), (4, 2, 5), [[-1], [0]]),
    ((2, 3, 4), (4, 2, 5), [2, 0]),
    ((2, 0, 4), (4, 3), 1),
    ((2, 0), (0, 3), 1),
]


@pytest.mark.parametrize("sa,sb,axes", TENSORDOT)
def test_tensordot(sa, sb, axes, rng):
    (a, x), (b, y) = randn(rng, sa), randn(rng, sb)
    np_axes = axes if isinstance(axes, int) else tuple(axes)
    close(mx.tensordot(a, b, axes=axes), np.tensordot(x, y, axes=np_axes))


def test_tensordot_default_and_views(rng):
    x = rng.standard_normal((4, 3, 2)).astype(np.float32)
    y = rng.standard_normal((3, 2, 5)).astype(np.float32)
    a = mx.array(np.ascontiguousarray(x.transpose(2, 1, 0))).transpose(2, 1, 0)
    b = mx.array(y[::-1].copy())[::-1]
    close(mx.tensordot(a, b), np.tensordot(x, y))


@pytest.mark.parametrize(
    "axes,exc,text",
    [
        (-1, ValueError, "greater or equal"),
        (3, ValueError, "less than"),
        ([[0], [0]], ValueError, "same shape"),
        ([[0, 1], [0]], ValueError, "same size"),
        ([[5], [0]], IndexError, "out of bounds"),
        ([[0, 0], [0, 1]], ValueError, "Repeated"),
    ],
)
def test_tensordot_errors(axes, exc, text):
    with pytest.raises(exc, match=text):
        mx.tensordot(mx.ones((2, 3)), mx.ones((3, 2)), axes=axes)


EINSUM = [
    ("ij,jk", [(2, 3), (3, 4)]),
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("ij,jk->ki", [(2, 3), (3, 4)]),
    ("ij->ji", [(2, 3)]),
    ("ji", [(2, 3)]),
    ("ij->", [(2, 3)]),
    ("ij->j", [(2, 3)]),
    ("ii", [(3, 3)]),
    ("ii->i", [(3, 3)]),
    ("iij->j", [(3, 3, 2)]),
    ("iii->i", [(2, 2, 2)]),
    ("ii,ii->i", [(3, 3), (3, 3)]),
    ("i,i", [(4,), (4,)]),
    ("i,i->i", [(4,), (4,)]),
    ("i,j", [(2,), (3,)]),
    ("i,j->ji", [(2,), (3,)]),
    ("bij,bjk->bik", [(5, 2, 3), (5, 3, 4)]),
    ("bij,bkj->bik", [(5, 2, 3), (5, 4, 3)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("ij,jk,kl", [(2, 3), (3, 4), (4, 2)]),
    ("abc,cd,bd->a", [(2, 3, 4), (4, 5), (3, 5)]),
    ("...ij,...jk->...ik", [(5, 2, 3), (3, 4)]),
    ("...ij,...jk", [(5, 1, 2, 3), (7, 3, 4)]),
    ("i...->...", [(2, 3)]),
    ("i...", [(2, 3)]),
    ("...", [(2, 3)]),
    ("ij,ij->ij", [(1, 3), (2, 3)]),
    ("ij,jk->ik", [(2, 1), (3, 4)]),
    (",i", [(), (2,)]),
    ("->", [()]),
    ("iJ,Jk", [(2, 3), (3, 4)]),
    (" i j , j k -> i k ", [(2, 3), (3, 4)]),
    ("ij,jk", [(2, 0), (0, 4)]),
    ("ijk,ikl->jl", [(3, 2, 4), (3, 4, 5)]),
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
]


@pytest.mark.parametrize("spec,shapes", EINSUM)
def test_einsum(spec, shapes, rng):
    ops = [randn(rng, s) for s in shapes]
    got = mx.einsum(spec, *[a for a, _ in ops])
    want = np.einsum(spec.replace(" ", ""), *[x for _, x in ops])
    close(got, want, tol=1e-4)


def test_einsum_ints_and_views(rng):
    a = mx.array([[1, 2], [3, 4]])
    assert mx.einsum("ij->ji", a).dtype == mx.int32
    np.testing.assert_array_equal(np.asarray(mx.einsum("ij->", a)), 10)
    np.testing.assert_array_equal(np.asarray(mx.einsum("i,j", a[0], a[1])), [[3, 4], [6, 8]])
    np.testing.assert_array_equal(np.asarray(mx.einsum("ii->i", a)), [1, 4])
    with pytest.raises(ValueError):
        mx.einsum("i,i", a[0], a[1])  # an integer contraction goes through matmul, as MLX
    # Ellipsis axes missing from an explicit output are summed (MLX; numpy refuses).
    y = rng.standard_normal((2, 4, 3)).astype(np.float32)
    close(mx.einsum("...i->i", mx.array(y)), y.sum(axis=(0, 1)), tol=1e-5)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    v = mx.array(x)[::-1].T
    close(mx.einsum("ij,jk->ik", v, mx.array(x)), x[::-1].T @ x, tol=1e-4)
    close(mx.einsum("ii->i", mx.array(x)[1:, :]), np.diag(x[1:]), tol=0)
    assert mx.einsum("ij,jk", mx.ones((2, 3), dtype=mx.float16), mx.ones((3, 4))).dtype == mx.float32


@pytest.mark.parametrize(
    "spec,shapes,text",
    [
        ("ij,jk", [(2, 3)], "Number of operands"),
        ("ij,jk", [(2, 3), (2, 3)], "Cannot broadcast"),
        ("i2,jk", [(2, 3), (3, 4)], "letters"),
        ("ij->iz", [(2, 3)], "'z'"),
        ("ijk", [(2, 3)], "Invalid number of subscripts"),
        ("ij->ii", [(3, 3)], "Repeat"),
        ("i->i->i", [(2,)], "letters"),
        ("ii", [(2, 3)], "dimension"),
    ],
)
def test_einsum_errors(spec, shapes, text):
    with pytest.raises(ValueError, match=text):
        mx.einsum(spec, *[mx.ones(s) for s in shapes])


# ---------------------------------------------------------------------------------------
# Norms
# ---------------------------------------------------------------------------------------

VECTOR_ORDS = [None, 2, 1, np.inf, -np.inf, 0, 3, 0.5, -1, -2.0]


@pytest.mark.parametrize("ord", VECTOR_ORDS)
@pytest.mark.parametrize("shape,axis", [((5,), None), ((3, 4), 1), ((3, 4), -2), ((2, 3, 4), 1)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_vector_norm(ord, shape, axis, keepdims, rng):
    a, x = randn(rng, shape)
    got = mx.linalg.norm(a, ord=ord, axis=axis, keepdims=keepdims)
    want = np.linalg.norm(x, ord=ord, axis=axis, keepdims=keepdims)
    close(got, want, tol=1e-4)


MATRIX_ORDS = [None, "fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf]


@pytest.mark.parametrize("ord", MATRIX_ORDS)
@pytest.mark.parametrize("shape,axis", [((3, 4), None), ((4, 3), (1, 0)), ((2, 3, 4), (0, 2)), ((2, 3, 4), (-1, -2))])
@pytest.mark.parametrize("keepdims", [False, True])
def test_matrix_norm(ord, shape, axis, keepdims, rng):
    a, x = randn(rng, shape)
    got = mx.linalg.norm(a, ord=ord, axis=axis, keepdims=keepdims)
    want = np.linalg.norm(x, ord=ord, axis=axis, keepdims=keepdims)
    close(got, want, tol=1e-4)


def test_norm_defaults_dtypes_and_special(rng):
    a, x = randn(rng, (2, 3, 4))
    close(mx.linalg.norm(a), np.linalg.norm(x.ravel()))
    assert mx.linalg.norm(a, keepdims=True).shape == (1, 1, 1)
    close(mx.linalg.norm(a, axis=(0, 1)), np.linalg.norm(x, axis=(0, 1)))
    close(mx.linalg.norm(mx.array(-3.0)), 3.0)
    assert mx.linalg.norm(mx.array([3, 4])).dtype == mx.float32
    close(mx.linalg.norm(mx.array([3, -4]), ord=np.inf), 4.0)
    close(mx.linalg.norm(mx.array([[1, 2], [3, 4]]), ord=2), np.linalg.norm([[1, 2], [3, 4]], 2))
    h = mx.linalg.norm(mx.array([3, -4], dtype=mx.float16))
    assert h.dtype == mx.float16 and float(h) == 5.0
    d = mx.linalg.norm(mx.array([[1.0, 2], [3, 4]], dtype=mx.float64), ord="nuc")
    assert d.dtype == mx.float64
    close(d, np.linalg.norm([[1.0, 2], [3, 4]], "nuc"), "float64")
    assert np.isnan(float(mx.linalg.norm(mx.array([np.nan, 1.0]))))
    assert float(mx.linalg.norm(mx.array([np.inf, 1.0]))) == np.inf
    assert float(mx.linalg.norm(mx.zeros((0,)))) == 0.0
    close(mx.linalg.norm(mx.array([1.0, 2.0]), ord=-0.0), 2.0)  # -0.0 counts nonzeros
    v = mx.array(np.arange(8.0, dtype=np.float32))[::-2]
    close(mx.linalg.norm(v, ord=3), np.linalg.norm(np.arange(8.0)[::-2], 3))


@pytest.mark.parametrize(
    "shape,kw,exc,text",
    [
        ((4,), {"ord": "fro"}, ValueError, "only supported for matrices"),
        ((2, 3, 4), {"ord": "nuc"}, ValueError, "only supported for matrices"),
        ((2, 3), {"ord": "nuc", "axis": 0}, ValueError, "only supported for matrices"),
        ((2, 3, 4), {"ord": 2}, ValueError, "too many axes"),
        ((2, 3, 4), {"axis": (0, 1, 2)}, ValueError, "too many axes"),
        ((), {"ord": 1}, ValueError, "too many axes"),
        ((2, 3), {"ord": 0}, ValueError, "Invalid ord 0"),
        ((2, 3), {"ord": 1.5}, ValueError, "Invalid ord 1.5"),
        ((2, 3), {"ord": "bad"}, ValueError, "Invalid ord value 'bad'"),
        ((2, 3, 4), {"axis": (1, 1)}, ValueError, "Duplicate"),
        ((2, 3, 4), {"axis": 3}, IndexError, "out of bounds"),
        ((0,), {"ord": np.inf}, ValueError, "size 0"),
    ],
)
def test_norm_errors(shape, kw, exc, text):
    with pytest.raises(exc, match=text):
        mx.linalg.norm(mx.ones(shape), **kw)


# ---------------------------------------------------------------------------------------
# Factorisations and solvers
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", F)
@pytest.mark.parametrize("shape", [(1, 1), (3, 3), (4, 5, 5), (2, 3, 2, 2)])
def test_inv(dtype, shape, rng):
    x = rng.standard_normal(shape) + 3 * np.eye(shape[-1])
    for _, a, xv in variants(x, dtype):
        got = mx.linalg.inv(a)
        assert got.dtype == dt(dtype)
        close(got, np.linalg.inv(xv), dtype, tol=1e-4 if dtype == "float32" else 1e-9)


def test_inv_empty_and_singular():
    assert mx.linalg.inv(mx.zeros((0, 0))).shape == (0, 0)
    assert mx.linalg.inv(mx.zeros((3, 0, 0))).shape == (3, 0, 0)
    assert mx.linalg.inv(mx.zeros((0, 2, 2))).shape == (0, 2, 2)
    with pytest.raises(RuntimeError, match="singular"):
        mx.eval(mx.linalg.inv(mx.zeros((3, 3))))
    n = mx.linalg.inv(mx.array([[np.nan, 1.0], [1.0, 2.0]]))
    assert np.all(np.isnan(np.asarray(n)))


@pytest.mark.parametrize("dtype", F)
@pytest.mark.parametrize("shape", [(3, 3), (4, 3), (3, 5), (2, 4, 3), (2, 2, 1, 4), (1, 1)])
def test_svd(dtype, shape, rng):
    x = rng.standard_normal(shape)
    tol = 1e-4 if dtype == "float32" else 1e-9
    for _, a, xv in variants(x, dtype):
        u, s, vt = mx.linalg.svd(a)
        m, n = shape[-2:]
        k = min(m, n)
        assert (u.shape, s.shape, vt.shape) == (shape[:-2] + (m, m), shape[:-2] + (k,), shape[:-2] + (n, n))
        un, sn, vtn = to_np(u), to_np(s), to_np(vt)
        close(s, np.linalg.svd(xv, compute_uv=False), dtype, tol)
        close_np((un[..., :k] * sn[..., None, :]) @ vtn[..., :k, :], xv, tol)
        close_np(swap(un) @ un, np.broadcast_to(np.eye(m), un.shape), tol)
        close_np(vtn @ swap(vtn), np.broadcast_to(np.eye(n), vtn.shape), tol)
        s_only = mx.linalg.svd(a, compute_uv=False)
        assert isinstance(s_only, mx.array)
        close(s_only, sn, dtype, tol)


def test_svd_empty_and_nan():
    u, s, vt = mx.linalg.svd(mx.zeros((0, 3)))
    assert (u.shape, s.shape, vt.shape) == ((0, 0), (0,), (3, 3))
    np.testing.assert_array_equal(np.asarray(vt), np.eye(3))
    with pytest.raises(RuntimeError, match="converge"):
        mx.eval(mx.linalg.svd(mx.array([[np.nan, 1.0], [1.0, 2.0]]))[1])


@pytest.mark.parametrize("dtype", F)
@pytest.mark.parametrize("shape", [(3, 3), (5, 3), (3, 5), (2, 4, 3), (1, 1)])
def test_qr(dtype, shape, rng):
    x = rng.standard_normal(shape)
    tol = 1e-4 if dtype == "float32" else 1e-9
    for _, a, xv in variants(x, dtype):
        q, r = mx.linalg.qr(a)
        m, n = shape[-2:]
        k = min(m, n)
        assert q.shape == shape[:-2] + (m, k) and r.shape == shape[:-2] + (k, n)
        qn, rn = to_np(q), to_np(r)
        close_np(qn @ rn, xv, tol)
        close_np(swap(qn) @ qn, np.broadcast_to(np.eye(k), shape[:-2] + (k, k)), tol)
        assert np.all(np.tril(rn, -1) == 0)


@pytest.mark.parametrize("dtype", F)
@pytest.mark.parametrize("batch", [(), (3,), (2, 2)])
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky(dtype, batch, upper, rng):
    x = spd(rng, 4, batch)
    tol = 1e-4 if dtype == "float32" else 1e-9
    # Garbage in the unread (upper) triangle must not matter.
    junk = x + np.triu(rng.standard_normal(x.shape) * 100, 1)
    f = to_np(mx.linalg.cholesky(arr(junk, dtype), upper=upper))
    lo = swap(f) if upper else f
    assert np.all(np.triu(lo, 1) == 0)
    close_np(lo @ swap(lo), x, tol * 10)
    close_np(lo, np.linalg.cholesky(x), tol * 10)


def test_cholesky_not_positive_definite():
    out = np.asarray(mx.linalg.cholesky(mx.array([[1.0, 2.0], [2.0, 1.0]])))
    assert np.all(np.isnan(out))


@pytest.mark.parametrize("dtype", F)
@pytest.mark.parametrize("batch", [(), (3,)])
def test_eigh(dtype, batch, rng):
    x = rng.standard_normal(batch + (4, 4))
    sym = x + swap(x)
    tol = 1e-4 if dtype == "float32" else 1e-9
    for uplo, source in [("L", np.tril(x) + swap(np.tril(x, -1))), ("U", np.triu(x) + swap(np.triu(x, 1)))]:
        w, v = mx.linalg.eigh(arr(x, dtype), UPLO=uplo)
        wn, vn = to_np(w), to_np(v)
        close(w, np.linalg.eigvalsh(source), dtype, tol * 10)
        close_np(source @ vn, vn * wn[..., None, :], tol * 10)
        close(mx.linalg.eigvalsh(arr(x, dtype), UPLO=uplo), np.linalg.eigvalsh(source), dtype, tol * 10)
    close(mx.linalg.eigvalsh(arr(sym, dtype)), np.linalg.eigvalsh(sym), dtype, tol * 10)
    with pytest.raises(ValueError, match="UPLO"):
        mx.linalg.eigh(arr(sym), UPLO="X")


@pytest.mark.parametrize("dtype", F)
@pytest.mark.parametrize(
    "sa,sb",
    [((3, 3), (3,)), ((3, 3), (3, 2)), ((4, 3, 3), (3, 2)), ((4, 3, 3), (3,)), ((3, 3), (4, 3, 1)),
     ((2, 1, 3, 3), (5, 3, 2)), ((0, 2, 2), (2,)), ((2, 2), (2, 0))],
)
def test_solve(dtype, sa, sb, rng):
    x = rng.standard_normal(sa) + 3 * np.eye(sa[-1])
    y = rng.standard_normal(sb)
    got = mx.linalg.solve(arr(x, dtype), arr(y, dtype))
    want = np.linalg.solve(x, y[..., None])[..., 0] if len(sb) == 1 else np.linalg.solve(x, y)
    close(got, want, dtype, 1e-4 if dtype == "float32" else 1e-9)


def test_solve_promotion_and_errors():
    a = mx.array([[2.0, 0.0], [0.0, 4.0]])
    out = mx.linalg.solve(a.astype(mx.float64), mx.array([2.0, 4.0]))
    assert out.dtype == mx.float64
    np.testing.assert_allclose(np.asarray(out), [1.0, 1.0])
    assert mx.linalg.solve(a, mx.array([2, 4])).dtype == mx.float32
    with pytest.raises(RuntimeError, match="singular"):
        mx.eval(mx.linalg.solve(mx.zeros((2, 2)), mx.ones((2,))))
    with pytest.raises(ValueError, match="promote to float32 or float64"):
        mx.linalg.solve(a.astype(mx.float16), mx.ones((2,), dtype=mx.float16))
    with pytest.raises(ValueError, match=">= 1 dimensions"):
        mx.linalg.solve(a, mx.array(1.0))
    with pytest.raises(ValueError, match=">= 2 dimensions"):
        mx.linalg.solve(mx.ones((2,)), mx.ones((2,)))
    with pytest.raises(ValueError, match="square"):
        mx.linalg.solve(mx.ones((2, 3)), mx.ones((2,)))
    with pytest.raises(ValueError, match="must match"):
        mx.linalg.solve(a, mx.ones((3,)))


@pytest.mark.parametrize("dtype", F)
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("sb", [(4,), (4, 3), (2, 4, 3)])
def test_solve_triangular_and_tri_inv(dtype, upper, sb, rng):
    x = rng.standard_normal((2, 4, 4)) + 4 * np.eye(4)
    tri = np.triu(x) if upper else np.tril(x)
    y = rng.standard_normal(sb)
    tol = 1e-4 if dtype == "float32" else 1e-9
    got = mx.linalg.solve_triangular(arr(x, dtype), arr(y, dtype), upper=upper)
    want = np.linalg.solve(tri, y[..., None])[..., 0] if len(sb) == 1 else np.linalg.solve(tri, y)
    close(got, want, dtype, tol)
    close(mx.linalg.tri_inv(arr(x, dtype), upper=upper), np.linalg.inv(tri), dtype, tol)
    with pytest.raises(RuntimeError, match="singular"):
        mx.eval(mx.linalg.tri_inv(mx.zeros((2, 2)), upper=upper))


@pytest.mark.parametrize("dtype", F)
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_inv(dtype, upper, rng):
    x = spd(rng, 4, (3,))
    f = mx.linalg.cholesky(arr(x, dtype), upper=upper)
    close(mx.linalg.cholesky_inv(f, upper=upper), np.linalg.inv(x), dtype, 1e-3 if dtype == "float32" else 1e-9)


@pytest.mark.parametrize("dtype", F)
@pytest.mark.parametrize("shape", [(3, 3), (4, 2), (2, 5), (3, 4, 2), (0, 3), (2, 0, 3)])
def test_pinv(dtype, shape, rng):
    x = rng.standard_normal(shape)
    got = mx.linalg.pinv(arr(x, dtype))
    close(got, np.linalg.pinv(x) if x.size else np.zeros(shape[:-2] + shape[::-1][:2]), dtype,
          1e-4 if dtype == "float32" else 1e-9)


def test_pinv_rank_deficient():
    close(mx.linalg.pinv(mx.ones((2, 3))), np.linalg.pinv(np.ones((2, 3))))
    # MLX's cutoff: singular values at most 10 * max(m, n) * eps * max(S) count as zero.
    x = np.diag([1.0, 1e-6]).astype(np.float32)
    close(mx.linalg.pinv(mx.array(x)), np.diag([1.0, 0.0]))
    x = np.diag([1.0, 5e-6]).astype(np.float32)
    close(mx.linalg.pinv(mx.array(x)), np.diag([1.0, 2e5]), tol=1e-2)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32", "bool_"])
@pytest.mark.parametrize("shape", [(1, 1), (3, 3), (4, 2, 2), (0, 0), (2, 0, 0)])
def test_det_slogdet(dtype, shape, rng):
    x = (rng.standard_normal(shape) * 3).round() if dtype in ("int32", "bool_") else rng.standard_normal(shape)
    a = mx.array(x).astype(dt(dtype))
    xv = to_np(a).astype(np.float64)
    out_dtype = dtype if dtype.startswith("float") else "float32"
    d = mx.linalg.det(a)
    assert d.dtype == dt(out_dtype)
    tol = {"float16": 1e-2, "float32": 1e-4, "float64": 1e-9}[out_dtype]
    close(d, np.linalg.det(xv), out_dtype, tol)
    sign, logdet = mx.linalg.slogdet(a)
    ws, wl = np.linalg.slogdet(xv)
    close(sign, ws, out_dtype, tol)
    close(logdet, wl, out_dtype, tol)


def test_det_exact_and_singular():
    assert float(mx.linalg.det(mx.array([[1, 2], [4, 5]]))) == -3.0
    assert float(mx.linalg.det(mx.zeros((3, 3)))) == 0.0
    s, l = mx.linalg.slogdet(mx.zeros((3, 3)))
    assert float(s) == 0.0 and float(l) == -np.inf
    s, l = mx.linalg.slogdet(mx.array(-np.eye(3, dtype=np.float32)))
    assert float(s) == -1.0 and float(l) == 0.0
    with pytest.raises(ValueError, match=">= 2 dimensions"):
        mx.linalg.det(mx.ones((2,)))
    with pytest.raises(ValueError, match="square"):
        mx.linalg.slogdet(mx.ones((2, 3)))


CROSS = [
    ((3,), (3,), -1),
    ((4, 3), (3,), -1),
    ((2, 1, 3), (5, 3), -1),
    ((3, 2), (3, 2), 0),
    ((2,), (2,), -1),
    ((3,), (2,), -1),
    ((4, 2), (4, 3), 1),
]


@pytest.mark.parametrize("sa,sb,axis", CROSS)
@pytest.mark.parametrize("dtype", ["float32", "int32", "float16"])
def test_cross(sa, sb, axis, dtype, rng):
    a = mx.array((rng.standard_normal(sa) * 4).round()).astype(dt(dtype))
    b = mx.array((rng.standard_normal(sb) * 4).round()).astype(dt(dtype))
    pad = lambda x: np.concatenate([x, np.zeros_like(np.take(x, [0], axis=axis))], axis=axis) if x.shape[axis] == 2 else x  # noqa: E731
    want = np.cross(pad(to_np(a)), pad(to_np(b)), axis=axis)
    got = mx.linalg.cross(a, b, axis=axis)
    assert got.dtype == dt(dtype)
    assert_matches(got, want, rtol=TOL.get(dtype, 0), atol=TOL.get(dtype, 0))


def test_cross_errors():
    with pytest.raises(ValueError, match="size 2 or 3"):
        mx.linalg.cross(mx.ones((4,)), mx.ones((4,)))
    with pytest.raises(IndexError):
        mx.linalg.cross(mx.ones((3,)), mx.ones((3,)), axis=1)
    with pytest.raises(ValueError, match="broadcast"):
        mx.linalg.cross(mx.ones((4, 3)), mx.ones((2, 3)))


FLOAT_ONLY = [
    ("inv", lambda a: mx.linalg.inv(a)),
    ("tri_inv", lambda a: mx.linalg.tri_inv(a)),
    ("cholesky", lambda a: mx.linalg.cholesky(a)),
    ("cholesky_inv", lambda a: mx.linalg.cholesky_inv(a)),
    ("qr", lambda a: mx.linalg.qr(a)),
    ("svd", lambda a: mx.linalg.svd(a)),
    ("eigh", lambda a: mx.linalg.eigh(a)),
    ("eigvalsh", lambda a: mx.linalg.eigvalsh(a)),
    ("pinv", lambda a: mx.linalg.pinv(a)),
]


@pytest.mark.parametrize("name,f", FLOAT_ONLY)
def test_linalg_input_errors(name, f):
    for dtype in ["int32", "float16", "bfloat16", "bool_"]:
        # svd and eigh also take complex64, and their message says so (as MLX's).
        with pytest.raises(ValueError, match="float32(,| or) float64"):
            f(mx.ones((2, 2), dtype=dt(dtype)))
    with pytest.raises(ValueError, match=">= 2 dimensions"):
        f(mx.ones((3,)))
    if name not in ("qr", "svd", "pinv"):
        with pytest.raises(ValueError, match="square"):
            f(mx.ones((2, 3)))


def test_linalg_submodule():
    import kiln.core.linalg as la

    assert la is mx.linalg
    assert la.norm is mx.linalg.norm
    assert "svd" in la.__all__


@pytest.mark.parametrize("dtype", F)
@pytest.mark.parametrize("shape", [(3, 3), (4, 3), (3, 5), (2, 4, 4), (1, 1), (0, 0), (2, 0, 3)])
def test_lu(dtype, shape, rng):
    x = rng.standard_normal(shape)
    tol = 1e-4 if dtype == "float32" else 1e-9
    for _, a, xv in variants(x, dtype):
        p, l, u = mx.linalg.lu(a)
        m, n = shape[-2:]
        k = min(m, n)
        assert p.dtype == mx.uint32 and p.shape == shape[:-2] + (m,)
        assert l.shape == shape[:-2] + (m, k) and u.shape == shape[:-2] + (k, n)
        pn, ln, un = np.asarray(p), to_np(l), to_np(u)
        assert np.all(np.triu(ln, 1) == 0) and np.all(np.tril(un, -1) == 0)
        if k:
            assert np.all(np.diagonal(ln, axis1=-2, axis2=-1) == 1)
            assert np.all(np.abs(ln) <= 1 + 1e-6)  # partial pivoting
        close_np(np.take_along_axis(ln, pn[..., None].astype(np.int64), axis=-2) @ un, xv, tol)
        packed, piv = mx.linalg.lu_factor(a)
        assert packed.shape == shape and piv.shape == shape[:-2] + (k,) and piv.dtype == mx.uint32
        close_np(np.tril(to_np(packed), -1)[..., :k] + np.eye(m, k), ln, tol)
        close_np(np.triu(to_np(packed))[..., :k, :], un, tol)


def test_lu_pivots_and_singular():
    # LAPACK's row swaps; a zero column leaves L's column zero (no NaN), as MLX.
    packed, piv = mx.linalg.lu_factor(mx.array([[1.0, 2.0], [3.0, 4.0]]))
    np.testing.assert_array_equal(np.asarray(piv), [1, 1])
    np.testing.assert_allclose(np.asarray(packed), [[3, 4], [1 / 3, 2 / 3]], rtol=1e-6)
    p, l, u = mx.linalg.lu(mx.zeros((3, 3)))
    np.testing.assert_array_equal(np.asarray(p), [0, 1, 2])
    np.testing.assert_array_equal(np.asarray(l), np.eye(3))
    np.testing.assert_array_equal(np.asarray(u), np.zeros((3, 3)))
    with pytest.raises(ValueError, match="float32 or float64"):
        mx.linalg.lu(mx.ones((2, 2), dtype=mx.int32))
    with pytest.raises(ValueError, match=">= 2 dimensions"):
        mx.linalg.lu_factor(mx.ones((2,)))


@pytest.mark.parametrize("scale", [1e30, 1e-30, 1e-40])
def test_svd_eigh_extreme_scales(scale):
    # Squares of these overflow or underflow float32: the kernels rescale first.
    x = np.array([[3.0, 1.0], [1.0, 2.0]])
    a = mx.array((x * scale).astype(np.float32))
    want_s = np.linalg.svd(x, compute_uv=False) * scale
    np.testing.assert_allclose(np.asarray(mx.linalg.svd(a, compute_uv=False)), want_s, rtol=1e-3)
    u, s, vt = (np.asarray(t, np.float64) for t in mx.linalg.svd(a))
    np.testing.assert_allclose((u * s) @ vt / scale, x, rtol=1e-3, atol=1e-3)
    w, v = mx.linalg.eigh(a)
    np.testing.assert_allclose(np.asarray(w), np.linalg.eigvalsh(x) * scale, rtol=1e-3)
    np.testing.assert_allclose(np.abs(np.asarray(v).T @ np.asarray(v)), np.eye(2), atol=1e-5)
