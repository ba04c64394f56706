"""complex64 products, orders and scans on the GPU: matmul and addmm through cuBLAS
(CUDA_C_32F; square, tall, 1xN, vectors, batched, broadcast and folded batches, transposed,
reversed and head-split views, empty and k = 0), sort / argsort / partition / argpartition
(lexicographic, ties, NaN and inf components, short rows in shared memory and long ones in
global memory), argmax / argmin (keepdims, ties, NaN), cumsum / cumprod / cummax / cummin
(every axis, reverse and inclusive flags, multi-tile rows), the same inside mx.compile, and
the switch that sends complex work back to the CPU. Each GPU result is compared with the
same op on mx.cpu and with numpy.

Skipped (with the reason) where no GPU is available; run on the GPU machine with
`python -m pytest tests/python/test_gpu_complex_linalg.py`."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kiln.core as mx

pytestmark = pytest.mark.skipif(
    not mx.is_available(mx.gpu), reason="no GPU is available on this machine"
)

RNG = np.random.default_rng(23)
NAN, INF = np.nan, np.inf


def crand(shape, lo=-2.0, hi=2.0):
    re = RNG.uniform(lo, hi, size=shape).astype(np.float32)
    im = RNG.uniform(lo, hi, size=shape).astype(np.float32)
    return (re + 1j * im).astype(np.complex64)


def ties(shape):
    """Few distinct values (many exact ties, -0.0 among the zeros)."""
    parts = np.array([-1.0, -0.0, 0.0, 1.0, 2.0], dtype=np.float32)
    re = RNG.choice(parts, size=shape)
    im = RNG.choice(parts[1:4], size=shape)
    return (re + 1j * im).astype(np.complex64)


def run(fn, *args, device):
    with mx.stream(device):
        out = fn(*[mx.array(a) if isinstance(a, np.ndarray) else a for a in args])
        mx.eval(out)
    return out


def both(fn, *args):
    """fn on the GPU and on the CPU, as numpy arrays."""
    g = run(fn, *args, device=mx.gpu)
    c = run(fn, *args, device=mx.cpu)
    return np.array(g), np.array(c)


def parts(x):
    x = np.asarray(x)
    return np.stack([x.real, x.imag]) if np.iscomplexobj(x) else x


def close(got, want, rtol=2e-5, atol=2e-6):
    """Real and imaginary parts compared separately (NaN and infinities in place)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(parts(got), parts(want), rtol=rtol, atol=atol, equal_nan=True)


def same(got, want):
    """Exactly equal: indices, or complex values bit for bit (NaN payloads aside)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape)
    np.testing.assert_array_equal(parts(got), parts(want))
    if np.iscomplexobj(got):
        # Signed zeros survive a sort (the elements are copied, not recomputed).
        np.testing.assert_array_equal(np.signbit(parts(got)), np.signbit(parts(want)))


# ---- matmul and addmm -------------------------------------------------------------------

def ref_matmul(a, b):
    return np.matmul(a.astype(np.complex128), b.astype(np.complex128))


def product_tol(k):
    return dict(rtol=1e-4, atol=2e-5 * max(k, 1))


MATMUL_SHAPES = [
    ("square", (16, 16), (16, 16)),
    ("tall", (67, 5), (5, 9)),
    ("wide_k", (3, 300), (300, 4)),
    ("row", (1, 16), (16, 3)),
    ("column", (9, 4), (4, 1)),
    ("vector_matrix", (7,), (7, 5)),
    ("matrix_vector", (6, 7), (7,)),
    ("dot", (11,), (11,)),
    ("batched", (3, 4, 5), (3, 5, 6)),
    ("broadcast_batch", (2, 1, 4, 5), (3, 5, 6)),
    ("broadcast_b", (4, 5), (2, 3, 5, 6)),
    ("folded", (2, 3, 4, 5), (5, 6)),
    ("empty_m", (0, 5), (5, 3)),
    ("empty_batch", (0, 2, 5), (5, 3)),
    ("k_zero", (4, 0), (0, 3)),
]


@pytest.mark.parametrize("name,sa,sb", MATMUL_SHAPES, ids=[s[0] for s in MATMUL_SHAPES])
def test_matmul_shapes(name, sa, sb):
    a, b = crand(sa), crand(sb)
    g, c = both(mx.matmul, a, b)
    assert g.dtype == np.complex64
    k = sa[-1]
    close(g, c, **product_tol(k))
    close(g, ref_matmul(a, b), **product_tol(k))


VIEWS = {
    "a_transposed": lambda a, b: (mx.swapaxes(a, -1, -2), b),
    "b_transposed": lambda a, b: (a, mx.swapaxes(b, -1, -2)),
    "both_transposed": lambda a, b: (mx.swapaxes(a, -1, -2), mx.swapaxes(b, -1, -2)),
    "batch_transposed": lambda a, b: (mx.transpose(a, (1, 0, 2, 3)), mx.transpose(b, (1, 0, 2, 3))),
    "reversed_rows": lambda a, b: (a[..., ::-1, :], b[..., ::-1, ::-2]),
    "reversed_batch": lambda a, b: (a[::-1], b),
    "stepped": lambda a, b: (a[..., ::2], b[..., ::2, :]),
    "broadcast_operand": lambda a, b: (a, mx.broadcast_to(b[:1], b.shape)),
}


@pytest.mark.parametrize("view", sorted(VIEWS))
def test_matmul_views(view):
    """Operands read in place through their strides (or copied when no stride fits)."""
    a, b = crand((2, 3, 8, 8)), crand((2, 3, 8, 8))
    f = lambda a, b: mx.matmul(*VIEWS[view](a, b))  # noqa: E731
    g, c = both(f, a, b)
    an, bn = (np.array(v) for v in VIEWS[view](mx.array(a), mx.array(b)))
    close(g, c, **product_tol(8))
    close(g, ref_matmul(an, bn), **product_tol(8))


def test_matmul_head_split_views():
    """Heads split out of a wider row have no single batch stride: per-matrix pointers."""
    x = crand((2, 5, 3 * 4))
    y = crand((2, 5, 3 * 4))

    def f(x, y):
        q = mx.transpose(mx.reshape(x, (2, 5, 3, 4)), (0, 2, 1, 3))
        k = mx.transpose(mx.reshape(y, (2, 5, 3, 4)), (0, 2, 3, 1))
        return q @ k

    g, c = both(f, x, y)
    q = x.reshape(2, 5, 3, 4).transpose(0, 2, 1, 3)
    k = y.reshape(2, 5, 3, 4).transpose(0, 2, 3, 1)
    close(g, c, **product_tol(4))
    close(g, ref_matmul(q, k), **product_tol(4))


@pytest.mark.parametrize("other", [np.float32, np.float16])
def test_matmul_mixed_with_real(other):
    a = crand((5, 6))
    b = RNG.standard_normal((6, 4)).astype(other)
    g, c = both(mx.matmul, a, b)
    assert g.dtype == np.complex64
    close(g, c, **product_tol(6))
    close(g, ref_matmul(a, b.astype(np.complex64)), **product_tol(6))


def test_matmul_special_values():
    """Infinities and NaN in an operand reach the same outputs as on the CPU."""
    a, b = crand((4, 3)), crand((3, 5))
    a[1, 2] = complex(NAN, 0.0)
    b[0, 3] = complex(INF, 0.0)
    g, c = both(mx.matmul, a, b)
    want = ref_matmul(a, b)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(want))
    np.testing.assert_array_equal(np.isnan(g), np.isnan(c))
    finite = np.isfinite(want)
    close(g[finite], want[finite], **product_tol(3))


@pytest.mark.parametrize(
    "alpha,beta,cshape",
    [(1.0, 1.0, (6, 5)), (2.0, -0.5, (6, 5)), (0.5, 3.0, (5,)), (-1.0, 0.0, (1, 5))],
)
def test_addmm(alpha, beta, cshape):
    a, b, c0 = crand((6, 7)), crand((7, 5)), crand(cshape)
    f = lambda c, a, b: mx.addmm(c, a, b, alpha=alpha, beta=beta)  # noqa: E731
    g, c = both(f, c0, a, b)
    close(g, c, **product_tol(7))
    close(g, alpha * ref_matmul(a, b) + beta * c0.astype(np.complex128), **product_tol(7))


def test_addmm_batched_and_real_bias():
    a, b = crand((3, 4, 6)), crand((3, 6, 2))
    bias = RNG.standard_normal((4, 2)).astype(np.float32)
    f = lambda c, a, b: mx.addmm(c, a, b, alpha=1.5, beta=2.0)  # noqa: E731
    g, c = both(f, bias, a, b)
    close(g, c, **product_tol(6))
    close(g, 1.5 * ref_matmul(a, b) + 2.0 * bias, **product_tol(6))


# ---- sort, argsort, partition, argpartition ---------------------------------------------

# Values with NaN and infinite parts. The order is MLX's (and kiln-cpu's): lexicographic,
# a value with either part NaN after every number, NaN values tied (input order kept).
# numpy groups NaN values by which part is NaN instead, so it is the oracle for NaN-free data
# and for data whose NaN values are all alike.
SPECIALS = {
    "imag_nan": [complex(1, NAN), complex(-2, NAN), complex(1, 0), complex(INF, 1)],
    "nan_nan": [complex(NAN, NAN), complex(-INF, 0), complex(0, -INF), complex(2, INF)],
    "real_nan": [complex(NAN, 1), complex(INF, -INF), complex(-0.0, 0.0), complex(0.0, -0.0)],
    "mixed_nan": [complex(NAN, 2), complex(1, NAN), complex(NAN, NAN), complex(-INF, NAN)],
}


def mlx_order_key(x):
    """A numpy sort key array equal to MLX's order: (is NaN, real, imag), NaN values tied."""
    nan = np.isnan(x)
    re = np.where(nan, 0, x.real).astype(np.float64)
    im = np.where(nan, 0, x.imag).astype(np.float64)
    return nan, re, im


def np_argsort(x, axis):
    """Stable argsort under MLX's order (numpy's own for NaN-free data)."""
    x = np.moveaxis(x, axis, -1)
    nan, re, im = mlx_order_key(x)
    flat = [a.reshape(-1, x.shape[-1]) for a in (nan, re, im)]
    idx = np.stack([np.lexsort((i, r, n)) for n, r, i in zip(*flat)]) if flat[0].size else \
        np.zeros(flat[0].shape, np.int64)
    return np.moveaxis(idx.reshape(x.shape), -1, axis).astype(np.uint32)


def np_sort(x, axis):
    if axis is None:
        x, axis = x.reshape(-1), 0
    return np.take_along_axis(x, np_argsort(x, axis).astype(np.int64), axis=axis)


def with_specials(shape, values):
    x = ties(shape).reshape(-1)
    at = RNG.choice(x.size, size=min(x.size, 3 * len(values)), replace=False)
    x[at] = np.resize(np.array(values, dtype=np.complex64), at.size)
    return x.reshape(shape)


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
@pytest.mark.parametrize("data", ["random", "ties", *sorted(SPECIALS)])
def test_sort_and_argsort(axis, data):
    shape = (5, 6, 7)
    if data == "random":
        x = crand(shape)
    elif data == "ties":
        x = ties(shape)
    else:
        x = with_specials(shape, SPECIALS[data])
    g, c = both(lambda z: mx.sort(z, axis=axis), x)
    same(g, c)
    same(g, np_sort(x, axis))
    if data in ("random", "ties", "nan_nan"):
        same(g, np.sort(x, axis=axis, kind="stable"))
    g, c = both(lambda z: mx.argsort(z, axis=axis), x)
    same(g, c)
    same(g, np_argsort(x, axis))


def test_sort_nan_values_keep_their_order():
    """A value is NaN when either part is: every NaN value goes after every number, in input
    order (MLX: [0, 1, 1+1j, 2, 1+nanj, -2+nanj, nan+1j, 1+nanj, nan-1j, nan+nanj])."""
    vals = [2 + 0j, complex(1, NAN), 1 + 1j, complex(-2, NAN), 1 + 0j, 0j, complex(NAN, 1),
            complex(1, NAN), complex(NAN, -1), complex(NAN, NAN)]
    x = np.array(vals, dtype=np.complex64)
    for device in [mx.gpu, mx.cpu]:
        i = np.array(run(lambda z: mx.argsort(z), x, device=device))
        np.testing.assert_array_equal(i, [5, 4, 2, 0, 1, 3, 6, 7, 8, 9])
        s = np.array(run(lambda z: mx.sort(z), x, device=device))
        same(s, x[[5, 4, 2, 0, 1, 3, 6, 7, 8, 9]])


@pytest.mark.parametrize("n", [1, 2, 255, 2048, 2049, 5000])
def test_sort_row_lengths(n):
    """Rows in shared memory (up to 2048) and in global memory (one launch per step)."""
    x = with_specials((2, n), SPECIALS["mixed_nan"]) if n > 8 else ties((2, n))
    g, c = both(lambda z: mx.sort(z, axis=-1), x)
    same(g, c)
    same(g, np_sort(x, -1))
    g, c = both(lambda z: mx.argsort(z, axis=0), x)
    same(g, c)
    same(g, np_argsort(x, 0))


def test_sort_views_empty_and_flattened():
    x = ties((6, 8))
    views = {
        "transposed": lambda z: mx.sort(z.T, axis=1),
        "reversed": lambda z: mx.argsort(z[::-1, ::-2], axis=1),
        "flattened": lambda z: mx.sort(z, axis=None),
        "flattened_arg": lambda z: mx.argsort(z, axis=None),
        "broadcast": lambda z: mx.sort(mx.broadcast_to(z[:1], (3, 8)), axis=0),
    }
    for name, f in views.items():
        g, c = both(f, x)
        same(g, c)
    same(both(lambda z: mx.sort(z.T, axis=1), x)[0], np.sort(x.T, axis=1, kind="stable"))
    same(both(lambda z: mx.argsort(z[::-1, ::-2], axis=1), x)[0], np_argsort(x[::-1, ::-2], 1))
    same(both(lambda z: mx.sort(z, axis=None), x)[0], np.sort(x, axis=None, kind="stable"))
    for shape, axis in [((0, 4), 1), ((3, 0), 1), ((0,), 0)]:
        e = crand(shape)
        g, c = both(lambda z: mx.sort(z, axis=axis), e)
        assert g.shape == shape and g.dtype == np.complex64
        g, c = both(lambda z: mx.argsort(z, axis=axis), e)
        assert g.shape == shape and g.dtype == np.uint32
    s = np.array(3 - 1j, dtype=np.complex64)
    same(both(lambda z: mx.sort(z, axis=None), s)[0], np.array([3 - 1j], dtype=np.complex64))
    with pytest.raises(IndexError):
        run(lambda z: mx.sort(z), s, device=mx.gpu)


def check_partition(values, x, kth, axis):
    """`values` is a partition of `x` at kth along axis: the kth value in place and the same
    multiset on each side (compared after numpy's sort; -0.0 and 0.0 tie, so signs are not
    compared: which of two tied zeros lands where is not specified)."""
    want = np_sort(x, axis)
    v, w = np.moveaxis(values, axis, -1), np.moveaxis(want, axis, -1)
    eq = np.testing.assert_array_equal
    eq(parts(v[..., kth]), parts(w[..., kth]))
    eq(parts(np.sort(v[..., :kth], axis=-1)), parts(np.sort(w[..., :kth], axis=-1)))
    eq(parts(np.sort(v[..., kth + 1:], axis=-1)), parts(np.sort(w[..., kth + 1:], axis=-1)))


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("kth", [0, 3, -1])
def test_partition_and_argpartition(axis, kth):
    # NaN values all alike: a partition through tied, different NaN values is ambiguous.
    x = with_specials((6, 7, 5), SPECIALS["nan_nan"])
    k = kth % x.shape[axis]
    g, c = both(lambda z: mx.partition(z, kth, axis=axis), x)
    check_partition(g, x, k, axis)
    check_partition(c, x, k, axis)
    gi, ci = both(lambda z: mx.argpartition(z, kth, axis=axis), x)
    assert gi.dtype == np.uint32
    check_partition(np.take_along_axis(x, gi.astype(np.int64), axis=axis), x, k, axis)
    # Each line's indices are a permutation.
    np.testing.assert_array_equal(np.sort(gi, axis=axis),
                                  np.sort(ci, axis=axis))


def test_searchsorted_on_complex():
    if not hasattr(mx, "searchsorted"):
        pytest.skip("no searchsorted in this build")
    seq = np.sort(ties((40,)))
    vals = ties((3, 9))
    for side in ["left", "right"]:
        g, c = both(lambda s, v: mx.searchsorted(s, v, side=side), seq, vals)
        same(g, c)
        same(g, np.searchsorted(seq, vals, side=side).astype(g.dtype))


# ---- argmax / argmin ----------------------------------------------------------------------

@pytest.mark.parametrize("name", ["argmax", "argmin"])
@pytest.mark.parametrize("axis", [None, 0, 1, 2, -1])
@pytest.mark.parametrize("keepdims", [False, True])
def test_arg_reductions(name, axis, keepdims):
    x = ties((4, 6, 5))
    f = lambda z: getattr(mx, name)(z, axis=axis, keepdims=keepdims)  # noqa: E731
    g, c = both(f, x)
    same(g, c)
    want = getattr(np, name)(x, axis=axis, keepdims=keepdims)
    np.testing.assert_array_equal(g, want)


@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_arg_reductions_nan_inf_and_long_rows(name):
    """The first NaN (in either part) wins; infinities order as numbers; rows longer than a
    block; ties go to the first index."""
    x = ties((3, 4000))
    x[0, 1234] = complex(0, NAN)
    x[0, 3000] = complex(NAN, 0)
    x[1, 17] = complex(INF, -INF)
    x[1, 3999] = complex(-INF, INF)
    x[2, 100:] = x[2, 50]
    for axis in [0, 1]:
        f = lambda z: getattr(mx, name)(z, axis=axis)  # noqa: E731
        g, c = both(f, x)
        same(g, c)
        np.testing.assert_array_equal(g, getattr(np, name)(x, axis=axis))
    # Strided views of the same data.
    g, c = both(lambda z: getattr(mx, name)(z[:, ::-3], axis=1), x)
    same(g, c)
    g, c = both(lambda z: getattr(mx, name)(z.T, axis=0), x)
    same(g, c)


def test_arg_reductions_empty_axis_raise():
    with pytest.raises(ValueError):
        run(lambda z: mx.argmax(z, axis=1), np.zeros((2, 0), np.complex64), device=mx.gpu)


# ---- scans ---------------------------------------------------------------------------------

def unit(shape):
    """Values on and near the unit circle, so long products neither overflow nor vanish."""
    t = RNG.uniform(-np.pi, np.pi, size=shape)
    r = RNG.uniform(0.97, 1.03, size=shape)
    return (r * np.exp(1j * t)).astype(np.complex64)


def np_scan(name, x, axis, reverse, inclusive):
    fn = {"cumsum": np.cumsum, "cumprod": np.cumprod}[name]
    z = x.astype(np.complex128)
    if reverse:
        z = np.flip(z, axis)
    out = fn(z, axis=axis)
    if not inclusive:
        ident = 0 if name == "cumsum" else 1
        out = np.concatenate([np.full_like(np.take(out, [0], axis=axis), ident),
                              np.delete(out, -1, axis=axis)], axis=axis)
    return np.flip(out, axis) if reverse else out


SCAN_TOL = dict(rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("inclusive", [False, True])
def test_cumsum_cumprod(name, axis, reverse, inclusive):
    x = unit((5, 6, 7))
    f = lambda z: getattr(mx, name)(z, axis=axis, reverse=reverse, inclusive=inclusive)  # noqa
    g, c = both(f, x)
    assert g.dtype == np.complex64
    close(g, c, **SCAN_TOL)
    close(g, np_scan(name, x, axis, reverse, inclusive), **SCAN_TOL)


@pytest.mark.parametrize("name", ["cumsum", "cumprod", "cummax", "cummin"])
@pytest.mark.parametrize("n", [1, 255, 256, 257, 1000])
def test_scans_along_long_rows(name, n):
    """Rows scanned tile by tile with a running carry (every tile boundary case)."""
    if name in ("cumsum", "cumprod"):
        x = unit((3, n))
    else:
        # NaN imaginary parts: kiln's complex maximum is not associative there, so these
        # rows must come out as the CPU's in-order walk gives them.
        x = with_specials((3, n), [complex(0, NAN), complex(1, NAN), complex(INF, 0)])
    for reverse in [False, True]:
        for inclusive in [False, True]:
            f = lambda z: getattr(mx, name)(z, axis=1, reverse=reverse,  # noqa: E731
                                            inclusive=inclusive)
            g, c = both(f, x)
            if name in ("cummax", "cummin"):
                same(g, c)
            else:
                close(g, c, rtol=1e-4, atol=1e-4 * np.sqrt(n))
                if name == "cumsum" or n <= 256:
                    close(g, np_scan(name, x, 1, reverse, inclusive),
                          rtol=1e-4, atol=1e-4 * np.sqrt(n))


@pytest.mark.parametrize("name", ["cummax", "cummin"])
@pytest.mark.parametrize("axis", [0, 1, None])
def test_cummax_cummin(name, axis):
    """Lexicographic running extremes; NaN (either part) propagates, as on the CPU."""
    x = with_specials((6, 9), [complex(0, NAN), complex(INF, 0), complex(-INF, 1)])
    for reverse in [False, True]:
        for inclusive in [False, True]:
            f = lambda z: getattr(mx, name)(z, axis=axis, reverse=reverse,  # noqa: E731
                                            inclusive=inclusive)
            g, c = both(f, x)
            same(g, c)
    # numpy has no cummax: a running lexicographic maximum of finite values.
    y = ties((4, 8))
    g = np.array(run(lambda z: getattr(mx, name)(z, axis=1), y, device=mx.gpu))
    pick = max if name == "cummax" else min
    key = lambda v: (v.real, v.imag)  # noqa: E731
    for r in range(4):
        acc = y[r, 0]
        for j in range(8):
            acc = pick(acc, y[r, j], key=key) if j else acc
            assert key(g[r, j]) == key(acc), (r, j, g[r], y[r])


def test_scans_with_special_values_and_views():
    x = crand((5, 8))
    x[1, 3] = complex(NAN, 1)
    x[2, 0] = complex(INF, 0)
    x[3, 5] = complex(-INF, INF)
    for f in [
        lambda z: mx.cumsum(z, axis=1),
        lambda z: mx.cumsum(z.T, axis=1, reverse=True),
        lambda z: mx.cumprod(z[::-1, ::2], axis=0),
        lambda z: mx.cumsum(mx.broadcast_to(z[:1], (4, 8)), axis=0, inclusive=False),
        lambda z: mx.cumprod(z, axis=None),
    ]:
        g, c = both(f, x)
        close(g, c, **SCAN_TOL)
    e = crand((0, 3))
    g, c = both(lambda z: mx.cumsum(z, axis=0), e)
    assert g.shape == (0, 3) and g.dtype == np.complex64


def test_logcumsumexp_on_complex_equals_the_cpu():
    """A complex log-add-exp scan (computed by kiln-cpu) gives a GPU array the CPU's values."""
    x = crand((3, 4))
    for reverse in (False, True):
        f = lambda z: mx.logcumsumexp(z, axis=1, reverse=reverse)  # noqa: E731
        g, c = both(f, x)
        close(g, c, **SCAN_TOL)


# ---- compile and the CPU switch --------------------------------------------------------------

def test_inside_compile():
    """The same ops traced by mx.compile (graph capture and replay included) equal the CPU's
    eager results on every call."""

    def f(a, b, c):
        p = mx.addmm(c, a, b, alpha=0.5, beta=2.0)
        s = mx.sort(p, axis=1)
        return (p, s, mx.argsort(p, axis=0), mx.argmax(p, axis=1, keepdims=True),
                mx.argmin(p, axis=0), mx.cumsum(p, axis=1, reverse=True),
                mx.cumprod(p * 0.1, axis=0, inclusive=False), mx.partition(p, 2, axis=1)[:, 2])

    compiled = mx.compile(f)
    for _ in range(4):
        a, b, c = crand((6, 5)), crand((5, 4)), crand((6, 4))
        with mx.stream(mx.gpu):
            got = compiled(mx.array(a), mx.array(b), mx.array(c))
            mx.eval(got)
        want = run(f, a, b, c, device=mx.cpu)
        for g, w in zip(got, want):
            g, w = np.array(g), np.array(w)
            if g.dtype == np.uint32:
                # Ties are measure-zero with random data: indices agree.
                same(g, w)
            else:
                close(g, w, rtol=1e-4, atol=1e-4)


SCRIPT = textwrap.dedent(
    """
    import numpy as np
    import kiln.core as mx
    z = (np.arange(24).reshape(4, 6) % 5 * (1 - 1j)).astype(np.complex64)
    with mx.stream(mx.gpu):
        x = mx.array(z)
        mx.eval(x @ x.T, mx.sort(x, axis=1), mx.argsort(x, axis=0), mx.argmax(x, axis=1),
                mx.argmin(x), mx.cumsum(x, axis=1), mx.cumprod(x, axis=0),
                mx.partition(x, 1, axis=1))
    """
)


@pytest.mark.parametrize("complex_on_gpu", [True, False])
def test_complex_ops_stay_on_the_gpu_unless_switched_off(complex_on_gpu):
    """In a fresh process (the fallback note is printed once per op): no complex op of this
    file falls back to the CPU, and KILN_CUDA_COMPLEX=0 sends them all there."""
    env = dict(os.environ, KILN_LOG="gpu")
    env["KILN_CUDA_COMPLEX"] = "1" if complex_on_gpu else "0"
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    fallbacks = [line for line in out.stderr.splitlines() if "has no GPU kernel" in line]
    if complex_on_gpu:
        assert fallbacks == [], out.stderr
    else:
        names = {line.split()[1] for line in fallbacks}
        assert {"matmul", "sort", "argmax", "cumsum"} <= names, out.stderr
