"""matmul on operands that are views, read in place by the CPU kernel: transposed, stepped,
negative-step and broadcast (stride 0) matrices, batched with broadcast or permuted batch
axes, many small products (threaded by batch), sparse half-precision views (gathered run
by run) and empty products; every float dtype, against numpy in float64.
"""

import kiln.core as mx
import numpy as np
import pytest
from conftest import FLOATS, assert_matches, looser, make

TOL = {"float16": 1e-2, "bfloat16": 4e-2, "float32": 1e-5, "float64": 1e-12}
GPU_TOL = {"float16": 1e-2, "bfloat16": 5e-2, "float32": 1e-4}  # cuBLAS against numpy


def tol_of(name, device):
    return looser(device, TOL[name], GPU_TOL.get(name))


def views(name, rng):
    """(label, kiln a, kiln b, numpy a, numpy b) pairs covering the strided operand cases."""
    a, x = make(name, (6, 10), rng, high=3)
    b, y = make(name, (10, 12), rng, high=3)
    yield "transposed", b.T[:7], a.T[:, :6], y.T[:7], x.T[:, :6]
    yield "stepped", a[::2, 1::3], b[1::4, ::2], x[::2, 1::3], y[1::4, ::2]
    yield "reversed", a[::-1, ::-2], b[::-2, ::-1], x[::-1, ::-2], y[::-2, ::-1]
    yield "transposed-reversed", a.T[::-1], a[::-1, ::-1], x.T[::-1], x[::-1, ::-1]
    row, r = make(name, (1, 10), rng, high=3)
    col, c = make(name, (10, 1), rng, high=3)
    yield (
        "broadcast",
        mx.broadcast_to(row, (6, 10)),
        mx.broadcast_to(row.T, (10, 5)),
        np.broadcast_to(r, (6, 10)),
        np.broadcast_to(r.T, (10, 5)),
    )
    s, v = make(name, (), rng, high=3)
    yield "scalar-broadcast", mx.broadcast_to(s, (3, 10)), b, np.broadcast_to(v, (3, 10)), y
    yield "column-broadcast", a, mx.broadcast_to(col, (10, 4)), x, np.broadcast_to(c, (10, 4))
    # Sparse views of a bigger array (half floats gather these instead of converting the span).
    big, z = make(name, (40, 60), rng, high=3)
    yield "sparse", big[::7, ::5], big[3:15, 2:12:4], z[::7, ::5], z[3:15, 2:12:4]
    yield "sparse-rows", big[::9, 5:17], big[:36:3, :7], z[::9, 5:17], z[:36:3, :7]


@pytest.mark.parametrize("name", FLOATS)
def test_strided_operands(name, rng, device):
    for label, a, b, x, y in views(name, rng):
        expected = x.astype(np.float64) @ y.astype(np.float64)
        out = a @ b
        assert out.dtype == getattr(mx, name), label
        assert out.shape == expected.shape, label
        tol = tol_of(name, device)
        assert_matches(out, expected, name, rtol=tol, atol=tol * 8)


@pytest.mark.parametrize("name", FLOATS)
def test_batched_views(name, rng, device):
    tol = tol_of(name, device)
    # Attention-style: (B, L, H, D) split into heads by a transpose, scores q @ k^T.
    q, qn = make(name, (2, 5, 3, 4), rng, high=3)
    k, kn = make(name, (2, 6, 3, 4), rng, high=3)
    qh, kh = mx.transpose(q, (0, 2, 1, 3)), mx.transpose(k, (0, 2, 3, 1))
    expected = np.transpose(qn, (0, 2, 1, 3)).astype(np.float64) @ np.transpose(
        kn, (0, 2, 3, 1)).astype(np.float64)
    assert_matches(qh @ kh, expected, name, rtol=tol, atol=tol * 8)
    # Broadcast batch (stride 0) on one side, a reversed batch axis on the other.
    a, x = make(name, (1, 4, 5), rng, high=3)
    b, y = make(name, (3, 5, 2), rng, high=3)
    expected = x.astype(np.float64) @ y[::-1].astype(np.float64)
    assert_matches(mx.broadcast_to(a, (3, 4, 5)) @ b[::-1], expected, name, rtol=tol,
                   atol=tol * 8)


@pytest.mark.parametrize("name", FLOATS)
def test_many_small_products(name, rng, device):
    # 300 products of 8x16x8: spread over threads by batch element, with strided operands.
    a, x = make(name, (300, 16, 8), rng, high=3)
    b, y = make(name, (300, 16, 8), rng, high=3)
    expected = np.swapaxes(x, -1, -2).astype(np.float64) @ y.astype(np.float64)
    tol = tol_of(name, device)
    assert_matches(mx.swapaxes(a, -1, -2) @ b, expected, name, rtol=tol, atol=tol * 8)


@pytest.mark.parametrize("name", FLOATS)
def test_empty_and_nonfinite(name, rng, device):
    a, x = make(name, (4, 6), rng, high=3)
    assert (a[:0] @ a.T).shape == (0, 4)
    out = a[:, :0] @ a.T[:0]
    assert_matches(out, np.zeros((4, 4)), name)
    # NaN and inf in a strided operand reach the rows and columns they touch.
    x = x.astype(np.float64)
    x[1, 2], x[2, 4] = np.nan, np.inf
    a = mx.array(x, dtype=getattr(mx, name))
    expected = x[::-1] @ np.abs(x.T[:, ::-1])
    tol = tol_of(name, device)
    assert_matches(a[::-1] @ mx.abs(a.T[:, ::-1]), expected, name, rtol=tol, atol=tol * 8)


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16"])
def test_batches_without_one_stride(name, rng, device):
    """Attention's heads split out of a fused qkv row: batch dims (B, H) with no single
    stride (the GPU reads them in place through pointer arrays); also a broadcast and a
    reversed batch."""
    B, T, H, D = 3, 10, 4, 8
    qkv = mx.array(rng.uniform(-1, 1, (B, T, 3, H, D)).astype(np.float32)).astype(getattr(mx, name))
    w = mx.array(rng.uniform(-1, 1, (1, H, D, 5)).astype(np.float32)).astype(getattr(mx, name))
    q, k, v = (qkv.transpose(2, 0, 3, 1, 4)[i] for i in range(3))  # (B, H, T, D) views

    def ref(x):
        return np.array(x.astype(mx.float32)).astype(np.float64)

    cases = [
        (lambda: q @ k.swapaxes(-1, -2), ref(q) @ ref(k).swapaxes(-1, -2)),
        (lambda: (q @ k.swapaxes(-1, -2)) @ v, (ref(q) @ ref(k).swapaxes(-1, -2)) @ ref(v)),
        (lambda: q @ w, ref(q) @ ref(w)),
        (lambda: q[::-1] @ k.swapaxes(-1, -2)[::-1], ref(q)[::-1] @ ref(k).swapaxes(-1, -2)[::-1]),
    ]
    tol = looser(device, TOL[name], GPU_TOL[name]) * 4
    for fn, want in cases:
        assert_matches(fn(), want, name, rtol=tol, atol=tol)


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
@pytest.mark.parametrize("stored", ["w", "w.T"])
def test_few_row_half_products(name, stored, rng, device):
    """A decode step's `x @ W.T` (and `x @ W`): half-float products of at most 8 rows, which
    the CPU takes without a float32 copy of W (runs of W widened in L1, summed in float32).
    Lengths across the runs and lanes, enough features to split over threads, a 3-d x over
    a 2-d W, NaN and inf in x, against numpy in float64 and MLX where installed."""
    dt = getattr(mx, name)
    tol = looser(device, TOL[name], GPU_TOL[name])
    for rows, k, n in [(1, 1, 1), (1, 511, 70), (3, 1300, 600), (8, 64, 33), (2, 0, 5)]:
        x, xn = make(name, (1, rows, k), rng, high=3)
        w, wn = make(name, (n, k), rng, high=3)
        if rows > 1 and k > 2:
            xn = xn.astype(np.float64)
            xn[0, 0, 1], xn[0, 1, 2] = np.inf, np.nan
            x = mx.array(xn, dtype=dt)
        if stored == "w.T":  # nn.Linear: W (n, k) read transposed
            out, expected = x @ w.T, xn.astype(np.float64) @ wn.T.astype(np.float64)
        else:  # W stored (k, n): a row-major right operand
            w, wn = mx.array(wn.T, dtype=dt), np.ascontiguousarray(wn.T)
            out, expected = x @ w, xn.astype(np.float64) @ wn.astype(np.float64)
        assert out.dtype == dt and out.shape == (1, rows, n)
        # A sum of k products of size 3 rounded once to the half type.
        assert_matches(out, expected, name, rtol=tol, atol=tol * max(1, k) ** 0.5 / 8)
        try:
            import mlx.core as mlx
        except ImportError:
            continue
        ours = np.array(out.astype(mx.float32))
        xm = mlx.array(np.array(x.astype(mx.float32)), dtype=getattr(mlx, name))
        wm = mlx.array(np.array(w.astype(mx.float32)), dtype=getattr(mlx, name))
        theirs = np.array(((xm @ wm.T) if stored == "w.T" else (xm @ wm)).astype(mlx.float32))
        np.testing.assert_allclose(ours, theirs, rtol=tol, atol=tol * max(1, k) ** 0.5 / 8)
