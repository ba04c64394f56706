"""complex64 products, orders and scans on every device against numpy: matmul and addmm
(square, tall, 1xN, vectors, batched, broadcast and folded batches, transposed, reversed and
head-split views, empty and k = 0; cuBLAS CUDA_C_32F on the GPU), sort / argsort / partition
/ argpartition (lexicographic, ties, NaN and inf components, short rows in the GPU's shared
memory and long ones in global memory), argmax / argmin (keepdims, ties, NaN), cumsum /
cumprod / cummax / cummin (every axis, reverse and inclusive flags, multi-tile rows), the
same inside mx.compile."""

import numpy as np
import pytest

import kiln.core as mx
from conftest import looser

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


def run(fn, *args):
    """fn of the arguments (numpy arrays become kiln arrays), as numpy."""
    out = fn(*[mx.array(a) if isinstance(a, np.ndarray) else a for a in args])
    mx.eval(out)
    return np.array(out)


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
def test_matmul_shapes(name, sa, sb, device):
    a, b = crand(sa), crand(sb)
    g = run(mx.matmul, a, b)
    assert g.dtype == np.complex64
    close(g, ref_matmul(a, b), **product_tol(sa[-1]))


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
def test_matmul_views(view, device):
    """Operands read in place through their strides (or copied when no stride fits)."""
    a, b = crand((2, 3, 8, 8)), crand((2, 3, 8, 8))
    f = lambda a, b: mx.matmul(*VIEWS[view](a, b))  # noqa: E731
    g = run(f, a, b)
    an, bn = (np.array(v) for v in VIEWS[view](mx.array(a), mx.array(b)))
    close(g, ref_matmul(an, bn), **product_tol(8))


def test_matmul_head_split_views(device):
    """Heads split out of a wider row have no single batch stride: per-matrix pointers."""
    x = crand((2, 5, 3 * 4))
    y = crand((2, 5, 3 * 4))

    def f(x, y):
        q = mx.transpose(mx.reshape(x, (2, 5, 3, 4)), (0, 2, 1, 3))
        k = mx.transpose(mx.reshape(y, (2, 5, 3, 4)), (0, 2, 3, 1))
        return q @ k

    g = run(f, x, y)
    q = x.reshape(2, 5, 3, 4).transpose(0, 2, 1, 3)
    k = y.reshape(2, 5, 3, 4).transpose(0, 2, 3, 1)
    close(g, ref_matmul(q, k), **product_tol(4))


@pytest.mark.parametrize("other", [np.float32, np.float16])
def test_matmul_mixed_with_real(other, device):
    a = crand((5, 6))
    b = RNG.standard_normal((6, 4)).astype(other)
    g = run(mx.matmul, a, b)
    assert g.dtype == np.complex64
    close(g, ref_matmul(a, b.astype(np.complex64)), **product_tol(6))


def test_matmul_special_values(device):
    """Infinities and NaN in an operand reach the outputs they touch (as numpy's)."""
    a, b = crand((4, 3)), crand((3, 5))
    a[1, 2] = complex(NAN, 0.0)
    b[0, 3] = complex(INF, 0.0)
    g = run(mx.matmul, a, b)
    with np.errstate(invalid="ignore"):
        want = ref_matmul(a, b)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(want))
    finite = np.isfinite(want)
    close(g[finite], want[finite], **product_tol(3))


@pytest.mark.parametrize(
    "alpha,beta,cshape",
    [(1.0, 1.0, (6, 5)), (2.0, -0.5, (6, 5)), (0.5, 3.0, (5,)), (-1.0, 0.0, (1, 5))],
)
def test_addmm(alpha, beta, cshape, device):
    a, b, c0 = crand((6, 7)), crand((7, 5)), crand(cshape)
    f = lambda c, a, b: mx.addmm(c, a, b, alpha=alpha, beta=beta)  # noqa: E731
    g = run(f, c0, a, b)
    close(g, alpha * ref_matmul(a, b) + beta * c0.astype(np.complex128), **product_tol(7))


def test_addmm_batched_and_real_bias(device):
    a, b = crand((3, 4, 6)), crand((3, 6, 2))
    bias = RNG.standard_normal((4, 2)).astype(np.float32)
    f = lambda c, a, b: mx.addmm(c, a, b, alpha=1.5, beta=2.0)  # noqa: E731
    g = run(f, bias, a, b)
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
def test_sort_and_argsort(axis, data, device):
    shape = (5, 6, 7)
    if data == "random":
        x = crand(shape)
    elif data == "ties":
        x = ties(shape)
    else:
        x = with_specials(shape, SPECIALS[data])
    g = run(lambda z: mx.sort(z, axis=axis), x)
    same(g, np_sort(x, axis))
    if data in ("random", "ties", "nan_nan"):
        same(g, np.sort(x, axis=axis, kind="stable"))
    same(run(lambda z: mx.argsort(z, axis=axis), x), np_argsort(x, axis))


def test_sort_nan_values_keep_their_order(device):
    """A value is NaN when either part is: every NaN value goes after every number, in input
    order (MLX: [0, 1, 1+1j, 2, 1+nanj, -2+nanj, nan+1j, 1+nanj, nan-1j, nan+nanj])."""
    vals = [2 + 0j, complex(1, NAN), 1 + 1j, complex(-2, NAN), 1 + 0j, 0j, complex(NAN, 1),
            complex(1, NAN), complex(NAN, -1), complex(NAN, NAN)]
    x = np.array(vals, dtype=np.complex64)
    np.testing.assert_array_equal(run(lambda z: mx.argsort(z), x), [5, 4, 2, 0, 1, 3, 6, 7, 8, 9])
    same(run(lambda z: mx.sort(z), x), x[[5, 4, 2, 0, 1, 3, 6, 7, 8, 9]])


@pytest.mark.parametrize("n", [1, 2, 255, 2048, 2049, 5000])
def test_sort_row_lengths(n, device):
    """Rows in the GPU's shared memory (up to 2048) and in global memory (a launch a step)."""
    x = with_specials((2, n), SPECIALS["mixed_nan"]) if n > 8 else ties((2, n))
    same(run(lambda z: mx.sort(z, axis=-1), x), np_sort(x, -1))
    same(run(lambda z: mx.argsort(z, axis=0), x), np_argsort(x, 0))


def test_sort_views_empty_and_flattened(device):
    x = ties((6, 8))
    same(run(lambda z: mx.sort(z.T, axis=1), x), np.sort(x.T, axis=1, kind="stable"))
    same(run(lambda z: mx.argsort(z[::-1, ::-2], axis=1), x), np_argsort(x[::-1, ::-2], 1))
    same(run(lambda z: mx.sort(z, axis=None), x), np.sort(x, axis=None, kind="stable"))
    same(run(lambda z: mx.argsort(z, axis=None), x), np_argsort(x.reshape(-1), 0))
    same(run(lambda z: mx.sort(mx.broadcast_to(z[:1], (3, 8)), axis=0), x),
         np.sort(np.broadcast_to(x[:1], (3, 8)), axis=0, kind="stable"))
    for shape, axis in [((0, 4), 1), ((3, 0), 1), ((0,), 0)]:
        e = crand(shape)
        g = run(lambda z: mx.sort(z, axis=axis), e)
        assert g.shape == shape and g.dtype == np.complex64
        g = run(lambda z: mx.argsort(z, axis=axis), e)
        assert g.shape == shape and g.dtype == np.uint32
    s = np.array(3 - 1j, dtype=np.complex64)
    same(run(lambda z: mx.sort(z, axis=None), s), np.array([3 - 1j], dtype=np.complex64))
    with pytest.raises(IndexError):
        run(lambda z: mx.sort(z), s)


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
def test_partition_and_argpartition(axis, kth, device):
    # NaN values all alike: a partition through tied, different NaN values is ambiguous.
    x = with_specials((6, 7, 5), SPECIALS["nan_nan"])
    k = kth % x.shape[axis]
    check_partition(run(lambda z: mx.partition(z, kth, axis=axis), x), x, k, axis)
    gi = run(lambda z: mx.argpartition(z, kth, axis=axis), x)
    assert gi.dtype == np.uint32
    check_partition(np.take_along_axis(x, gi.astype(np.int64), axis=axis), x, k, axis)
    # Each line's indices are a permutation.
    lines = np.broadcast_to(np.expand_dims(np.arange(x.shape[axis]), [d for d in range(3) if d != axis % 3]), x.shape)
    np.testing.assert_array_equal(np.sort(gi, axis=axis), lines)


def test_searchsorted_on_complex(device):
    seq = np.sort(ties((40,)))
    vals = ties((3, 9))
    for side in ["left", "right"]:
        g = run(lambda s, v: mx.searchsorted(s, v, side=side), seq, vals)
        same(g, np.searchsorted(seq, vals, side=side).astype(g.dtype))


# ---- argmax / argmin ----------------------------------------------------------------------

@pytest.mark.parametrize("name", ["argmax", "argmin"])
@pytest.mark.parametrize("axis", [None, 0, 1, 2, -1])
@pytest.mark.parametrize("keepdims", [False, True])
def test_arg_reductions(name, axis, keepdims, device):
    x = ties((4, 6, 5))
    g = run(lambda z: getattr(mx, name)(z, axis=axis, keepdims=keepdims), x)
    want = getattr(np, name)(x, axis=axis, keepdims=keepdims)
    np.testing.assert_array_equal(g, want)


@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_arg_reductions_nan_inf_and_long_rows(name, device):
    """The first NaN (in either part) wins; infinities order as numbers; rows longer than a
    block; ties go to the first index."""
    x = ties((3, 4000))
    x[0, 1234] = complex(0, NAN)
    x[0, 3000] = complex(NAN, 0)
    x[1, 17] = complex(INF, -INF)
    x[1, 3999] = complex(-INF, INF)
    x[2, 100:] = x[2, 50]
    for axis in [0, 1]:
        g = run(lambda z: getattr(mx, name)(z, axis=axis), x)
        np.testing.assert_array_equal(g, getattr(np, name)(x, axis=axis))
    # Strided views of the same data.
    np.testing.assert_array_equal(run(lambda z: getattr(mx, name)(z[:, ::-3], axis=1), x),
                                  getattr(np, name)(x[:, ::-3], axis=1))
    np.testing.assert_array_equal(run(lambda z: getattr(mx, name)(z.T, axis=0), x),
                                  getattr(np, name)(x.T, axis=0))


def test_arg_reductions_empty_axis_raise(device):
    with pytest.raises(ValueError):
        run(lambda z: mx.argmax(z, axis=1), np.zeros((2, 0), np.complex64))


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
def test_cumsum_cumprod(name, axis, reverse, inclusive, device):
    x = unit((5, 6, 7))
    g = run(lambda z: getattr(mx, name)(z, axis=axis, reverse=reverse, inclusive=inclusive), x)
    assert g.dtype == np.complex64
    close(g, np_scan(name, x, axis, reverse, inclusive), **SCAN_TOL)


def in_order_extremes(name, x, axis, reverse, inclusive):
    """cummax / cummin as kiln walks a line, in order: acc = pick(acc, next), with kiln's
    complex maximum (the first operand where it is NaN, in either part, or wins
    lexicographically; else the second): not associative where a part is NaN."""

    def wins(a, b):  # a > b lexicographically
        return b.real < a.real or (b.real == a.real and b.imag < a.imag)

    def pick(acc, v):
        nan = np.isnan(acc.real) or np.isnan(acc.imag)
        better = wins(acc, v) if name == "cummax" else wins(v, acc)
        return acc if nan or better else v

    ident = complex(-INF, -INF) if name == "cummax" else complex(INF, INF)
    if axis is None:
        x, axis = x.reshape(-1), 0
    lines = np.moveaxis(x, axis, -1)
    out = np.empty_like(lines)
    for pos in np.ndindex(lines.shape[:-1]):
        row = lines[pos][::-1] if reverse else lines[pos]
        acc, got = None, []
        for v in row:
            new = v if acc is None else pick(acc, v)
            got.append(new if inclusive else (ident if acc is None else acc))
            acc = new
        out[pos] = got[::-1] if reverse else got
    return np.moveaxis(out, -1, axis)


@pytest.mark.parametrize("name", ["cumsum", "cumprod", "cummax", "cummin"])
@pytest.mark.parametrize("n", [1, 255, 256, 257, 1000])
def test_scans_along_long_rows(name, n, device):
    """Rows scanned tile by tile with a running carry (every tile boundary case)."""
    if name in ("cumsum", "cumprod"):
        x = unit((3, n))
    else:
        # NaN imaginary parts: kiln's complex maximum is not associative there, so these
        # rows must come out as the in-order walk gives them.
        x = with_specials((3, n), [complex(0, NAN), complex(1, NAN), complex(INF, 0)])
    for reverse in [False, True]:
        for inclusive in [False, True]:
            f = lambda z: getattr(mx, name)(z, axis=1, reverse=reverse,  # noqa: E731
                                            inclusive=inclusive)
            g = run(f, x)
            if name in ("cummax", "cummin"):
                same(g, in_order_extremes(name, x, 1, reverse, inclusive))
            else:
                # The GPU's tiles sum (and multiply) in another order: their roundings too.
                atol = looser(device, 1e-4 * np.sqrt(n), 2e-4 * np.sqrt(n))
                close(g, np_scan(name, x, 1, reverse, inclusive), rtol=1e-4, atol=atol)


@pytest.mark.parametrize("name", ["cummax", "cummin"])
@pytest.mark.parametrize("axis", [0, 1, None])
def test_cummax_cummin(name, axis, device):
    """Lexicographic running extremes; NaN (either part) propagates as kiln's walk does."""
    x = with_specials((6, 9), [complex(0, NAN), complex(INF, 0), complex(-INF, 1)])
    for reverse in [False, True]:
        for inclusive in [False, True]:
            f = lambda z: getattr(mx, name)(z, axis=axis, reverse=reverse,  # noqa: E731
                                            inclusive=inclusive)
            same(run(f, x), in_order_extremes(name, x, axis, reverse, inclusive))
    # numpy has no cummax: a running lexicographic maximum of finite values.
    y = ties((4, 8))
    g = run(lambda z: getattr(mx, name)(z, axis=1), y)
    pick = max if name == "cummax" else min
    key = lambda v: (v.real, v.imag)  # noqa: E731
    for r in range(4):
        acc = y[r, 0]
        for j in range(8):
            acc = pick(acc, y[r, j], key=key) if j else acc
            assert key(g[r, j]) == key(acc), (r, j, g[r], y[r])


def test_scans_with_special_values_and_views(device):
    x = crand((5, 8))
    x[1, 3] = complex(NAN, 1)
    x[2, 0] = complex(INF, 0)
    x[3, 5] = complex(-INF, INF)
    for f, axis, reverse, inclusive, view in [
        (lambda z: mx.cumsum(z, axis=1), 1, False, True, lambda z: z),
        (lambda z: mx.cumsum(z.T, axis=1, reverse=True), 1, True, True, lambda z: z.T),
        (lambda z: mx.cumprod(z[::-1, ::2], axis=0), 0, False, True, lambda z: z[::-1, ::2]),
        (lambda z: mx.cumsum(mx.broadcast_to(z[:1], (4, 8)), axis=0, inclusive=False), 0, False,
         False, lambda z: np.broadcast_to(z[:1], (4, 8))),
        (lambda z: mx.cumprod(z, axis=None), 0, False, True, lambda z: z.reshape(-1)),
    ]:
        name = "cumprod" if "cumprod" in f.__code__.co_names else "cumsum"
        with np.errstate(invalid="ignore"):
            want = np_scan(name, view(x), axis, reverse, inclusive)
        close(run(f, x), want, **SCAN_TOL)
    g = run(lambda z: mx.cumsum(z, axis=0), crand((0, 3)))
    assert g.shape == (0, 3) and g.dtype == np.complex64


def test_logcumsumexp_on_complex(device):
    """A complex log-add-exp scan (computed by kiln-cpu, also for GPU arrays): the exp of
    each output is the running sum of exps (the logs' branches are not compared)."""
    x = crand((3, 4))
    e = np.exp(x.astype(np.complex128))
    for reverse in (False, True):
        g = run(lambda z: mx.logcumsumexp(z, axis=1, reverse=reverse), x)
        want = np.flip(np.cumsum(np.flip(e, 1), axis=1), 1) if reverse else np.cumsum(e, axis=1)
        close(np.exp(g.astype(np.complex128)), want, **SCAN_TOL)


# ---- compile ------------------------------------------------------------------------------

def test_inside_compile(device):
    """The same ops traced by mx.compile (on the GPU: graph capture and replay included)
    equal eager on every call, and the products numpy's."""

    def f(a, b, c):
        p = mx.addmm(c, a, b, alpha=0.5, beta=2.0)
        s = mx.sort(p, axis=1)
        return (p, s, mx.argsort(p, axis=0), mx.argmax(p, axis=1, keepdims=True),
                mx.argmin(p, axis=0), mx.cumsum(p, axis=1, reverse=True),
                mx.cumprod(p * 0.1, axis=0, inclusive=False), mx.partition(p, 2, axis=1)[:, 2])

    compiled = mx.compile(f)
    for _ in range(4):
        a, b, c = crand((6, 5)), crand((5, 4)), crand((6, 4))
        got = compiled(mx.array(a), mx.array(b), mx.array(c))
        want = f(mx.array(a), mx.array(b), mx.array(c))
        for g, w in zip(got, want):
            g, w = np.array(g), np.array(w)
            if g.dtype == np.uint32:
                # Ties are measure-zero with random data: indices agree.
                same(g, w)
            else:
                close(g, w, rtol=1e-4, atol=1e-4)
        close(np.array(got[0]), 0.5 * ref_matmul(a, b) + 2.0 * c, **product_tol(5))
        same(np.array(got[1]), np_sort(np.array(got[0]), 1))
