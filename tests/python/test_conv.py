"""Convolutions (conv1d/2d/3d, conv_general) against a direct numpy reference, with MLX's
channels-last layouts: input (N, ..., C_in), weight (C_out, ..., C_in / groups)."""

import itertools

import kiln.core as mx
import numpy as np
import pytest
from conftest import assert_matches, dt, looser, to_np

# Tolerances of a float32 result of many multiply-adds; halves round every product.
TOL = {"float16": 2e-2, "bfloat16": 8e-2, "float32": 1e-4, "float64": 1e-10}


def conv_ref(x, w, stride=None, lo=None, hi=None, kdil=None, idil=None, groups=1, flip=False):
    """The convolution as MLX defines it, in float64: dilate the input, pad it (negative
    padding crops), then slide the (dilated, maybe flipped) kernel with `stride`."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    d = x.ndim - 2
    stride, lo, hi = stride or [1] * d, lo or [0] * d, hi or [0] * d
    kdil, idil = kdil or [1] * d, idil or [1] * d
    n, c = x.shape[0], x.shape[-1]
    o, k, cg = w.shape[0], w.shape[1:-1], w.shape[-1]
    dilated = [(s - 1) * idil[i] + 1 if s else 0 for i, s in enumerate(x.shape[1:-1])]
    xd = np.zeros((n, *dilated, c))
    xd[(slice(None), *(slice(None, None, s) for s in idil), slice(None))] = x
    for i in range(d):
        ax = i + 1
        if lo[i] < 0:
            xd = np.take(xd, range(-lo[i], xd.shape[ax]), axis=ax)
        if hi[i] < 0:
            xd = np.take(xd, range(0, xd.shape[ax] + hi[i]), axis=ax)
        widths = [(0, 0)] * xd.ndim
        widths[ax] = (max(lo[i], 0), max(hi[i], 0))
        xd = np.pad(xd, widths)
    if flip:
        w = w[(slice(None), *(slice(None, None, -1) for _ in range(d)), slice(None))]
    ext = [(k[i] - 1) * kdil[i] + 1 if k[i] else 0 for i in range(d)]
    out_sp = [(xd.shape[i + 1] - ext[i]) // stride[i] + 1 for i in range(d)]
    out = np.zeros((n, *out_sp, o))
    og = o // groups
    for kpos in itertools.product(*(range(s) for s in k)):
        sl = tuple(
            slice(kpos[i] * kdil[i], kpos[i] * kdil[i] + (out_sp[i] - 1) * stride[i] + 1, stride[i])
            for i in range(d)
        )
        patch = xd[(slice(None), *sl, slice(None))]
        for g in range(groups):
            wg = w[(slice(g * og, (g + 1) * og), *kpos, slice(None))]  # (og, cg)
            out[..., g * og : (g + 1) * og] += patch[..., g * cg : (g + 1) * cg] @ wg.T
    return out


def pair(rng, xshape, wshape, dtype="float32"):
    x = rng.standard_normal(xshape).astype(np.float32)
    w = rng.standard_normal(wshape).astype(np.float32)
    return (mx.array(x, dtype=dt(dtype)), mx.array(w, dtype=dt(dtype))), (to_np(mx.array(x, dtype=dt(dtype))), to_np(mx.array(w, dtype=dt(dtype))))


# The GPU's bounds (cuDNN-free implicit GEMM, other summation orders), on top of the CPU's.
GPU_TOL = {"float16": 1e-2, "bfloat16": 5e-2, "float32": 1e-4}


def check(got, want, dtype="float32", device=None):
    tol = looser(device, TOL[dtype], TOL[dtype] + GPU_TOL.get(dtype, 0))
    assert_matches(got, want, dtype, rtol=tol, atol=tol)


# (input shape, weight shape, kwargs) for conv1d
CONV1D = [
    ((2, 9, 3), (4, 3, 3), {}),
    ((1, 9, 3), (4, 3, 3), {"stride": 2}),
    ((2, 7, 2), (3, 2, 2), {"padding": 2}),
    ((2, 10, 3), (5, 3, 3), {"dilation": 2, "stride": 3}),
    ((2, 8, 4), (6, 3, 2), {"groups": 2}),
    ((1, 8, 6), (6, 2, 1), {"groups": 6, "padding": 1}),  # depthwise
    ((1, 5, 3), (2, 1, 3), {}),
    ((0, 5, 3), (2, 3, 3), {}),
    ((2, 5, 3), (4, 5, 3), {}),  # one output position
    ((2, 2, 3), (4, 3, 3), {"padding": 1}),
    ((2, 6, 3), (4, 3, 3), {"padding": -1}),  # negative padding crops
]


@pytest.mark.parametrize("xs,ws,kw", CONV1D)
def test_conv1d(xs, ws, kw, rng, device):
    (x, w), (xn, wn) = pair(rng, xs, ws)
    p = kw.get("padding", 0)
    want = conv_ref(xn, wn, [kw.get("stride", 1)], [p], [p], [kw.get("dilation", 1)],
                    groups=kw.get("groups", 1))
    check(mx.conv1d(x, w, **kw), want, device=device)


CONV2D = [
    ((2, 6, 7, 3), (4, 3, 2, 3), {}),
    ((1, 7, 7, 2), (3, 3, 3, 2), {"stride": (2, 1), "padding": (1, 0), "dilation": (1, 2)}),
    ((1, 8, 8, 4), (4, 3, 3, 2), {"stride": 2, "padding": 1, "groups": 2}),
    ((2, 5, 5, 3), (2, 1, 1, 3), {}),
    ((1, 4, 9, 1), (1, 4, 2, 1), {"dilation": (1, 3)}),
]


@pytest.mark.parametrize("xs,ws,kw", CONV2D)
def test_conv2d(xs, ws, kw, rng, device):
    (x, w), (xn, wn) = pair(rng, xs, ws)
    two = lambda v, default: list(v) if isinstance(v, tuple) else [v if v is not None else default] * 2  # noqa: E731
    s, p, dl = two(kw.get("stride", 1), 1), two(kw.get("padding", 0), 0), two(kw.get("dilation", 1), 1)
    want = conv_ref(xn, wn, s, p, p, dl, groups=kw.get("groups", 1))
    check(mx.conv2d(x, w, **kw), want, device=device)


@pytest.mark.parametrize(
    "kw", [{}, {"stride": 2, "padding": 1}, {"dilation": (1, 2, 1), "padding": (0, 1, 1)}, {"groups": 2}]
)
def test_conv3d(kw, rng, device):
    (x, w), (xn, wn) = pair(rng, (2, 5, 6, 4, 4), (4, 2, 3, 2, 4 // kw.get("groups", 1)))
    three = lambda v: list(v) if isinstance(v, tuple) else [v] * 3  # noqa: E731
    want = conv_ref(xn, wn, three(kw.get("stride", 1)), three(kw.get("padding", 0)),
                    three(kw.get("padding", 0)), three(kw.get("dilation", 1)), groups=kw.get("groups", 1))
    check(mx.conv3d(x, w, **kw), want, device=device)


GENERAL = [
    ((2, 7, 3), (4, 3, 3), {"padding": ([1], [2])}),
    ((2, 5, 3), (4, 3, 3), {"input_dilation": 2}),
    ((2, 5, 3), (4, 3, 3), {"input_dilation": 2, "kernel_dilation": 2, "padding": ([1], [2]), "flip": True}),
    ((1, 6, 5, 2), (3, 2, 3, 2), {"flip": True}),
    ((1, 6, 5, 2), (3, 2, 3, 2), {"stride": [2, 1], "padding": ([0, 2], [1, 0]), "input_dilation": [1, 3]}),
    ((1, 4, 4, 2), (2, 3, 3, 2), {"padding": ([2, 2], [2, 2]), "input_dilation": 2, "flip": True}),  # a transposed conv
    ((2, 8, 3), (2, 2, 3), {"padding": ([-2], [-1]), "stride": 2}),
    ((1, 6, 6, 4), (4, 2, 2, 1), {"groups": 4, "flip": True, "kernel_dilation": [2, 1]}),
]


@pytest.mark.parametrize("xs,ws,kw", GENERAL)
def test_conv_general(xs, ws, kw, rng, device):
    (x, w), (xn, wn) = pair(rng, xs, ws)
    d = len(xs) - 2
    per = lambda v: list(v) if isinstance(v, (list, tuple)) else [v] * d  # noqa: E731
    lo, hi = kw.get("padding", ([0] * d, [0] * d))
    want = conv_ref(xn, wn, per(kw.get("stride", 1)), list(lo), list(hi),
                    per(kw.get("kernel_dilation", 1)), per(kw.get("input_dilation", 1)),
                    kw.get("groups", 1), kw.get("flip", False))
    check(mx.conv_general(x, w, **kw), want, device=device)


def test_conv_general_padding_forms(rng):
    (x, w), (xn, wn) = pair(rng, (1, 6, 5, 2), (3, 2, 2, 2))
    check(mx.conv_general(x, w, padding=1), conv_ref(xn, wn, lo=[1, 1], hi=[1, 1]))
    check(mx.conv_general(x, w, padding=[1, 2]), conv_ref(xn, wn, lo=[1, 2], hi=[1, 2]))
    check(mx.conv_general(x, w, padding=([0, 1], [2, 0])), conv_ref(xn, wn, lo=[0, 1], hi=[2, 0]))
    check(mx.conv_general(x, w, stride=[1, 2]), conv_ref(xn, wn, stride=[1, 2]))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_conv_dtypes(dtype, rng, device):
    (x, w), (xn, wn) = pair(rng, (2, 6, 5, 4), (4, 3, 2, 2), dtype)
    out = mx.conv2d(x, w, padding=1, groups=2)
    assert out.dtype == dt(dtype)
    check(out, conv_ref(xn, wn, lo=[1, 1], hi=[1, 1], groups=2), dtype, device=device)


def test_conv_mixed_dtypes_promote(rng):
    (x, w), (xn, wn) = pair(rng, (1, 5, 2), (2, 2, 2))
    out = mx.conv1d(x.astype(mx.float16), w)
    assert out.dtype == mx.float32
    check(out, conv_ref(to_np(x.astype(mx.float16)), wn), "float16")


def test_conv_strided_views(rng, device):
    # Inputs that are transposed or negative-step views are read in place.
    xt = rng.standard_normal((3, 9, 2)).astype(np.float32)  # (C, L, N)
    wt = rng.standard_normal((3, 3, 8)).astype(np.float32)
    x = mx.array(xt).transpose(2, 1, 0)[:, ::-1, :]
    w = mx.array(wt)[:, :, ::2].transpose(2, 1, 0)
    xn = xt.transpose(2, 1, 0)[:, ::-1, :]
    wn = wt[:, :, ::2].transpose(2, 1, 0)
    check(mx.conv1d(x, w, padding=1), conv_ref(xn, wn, lo=[1], hi=[1]), device=device)
    xb = mx.broadcast_to(mx.array(xt[:1, :, :1].transpose(2, 1, 0)), (2, 9, 3))
    check(mx.conv1d(xb, w), conv_ref(np.broadcast_to(xt[:1, :, :1].transpose(2, 1, 0), (2, 9, 3)), wn), device=device)


def test_conv_nan_inf(device):
    x = mx.array([[[1.0], [np.nan], [2.0], [3.0]]])
    w = mx.array([[[1.0], [1.0]]])
    np.testing.assert_array_equal(np.asarray(mx.conv1d(x, w)).ravel(), [np.nan, np.nan, 5.0])
    y = mx.array([[[np.inf], [1.0], [1.0]]])
    np.testing.assert_array_equal(np.asarray(mx.conv1d(y, w)).ravel(), [np.inf, 2.0])


def test_conv_empty(device):
    assert mx.conv1d(mx.zeros((0, 5, 3)), mx.zeros((4, 3, 3))).shape == (0, 3, 4)
    out = mx.conv1d(mx.ones((2, 5, 0)), mx.ones((4, 3, 0)))
    assert out.shape == (2, 3, 4) and np.all(np.asarray(out) == 0)
    assert mx.conv1d(mx.ones((2, 5, 3)), mx.ones((0, 3, 3))).shape == (2, 3, 0)


ERRORS = [
    (lambda: mx.conv1d(mx.ones((2, 5, 3), dtype=mx.int32), mx.ones((4, 3, 3))), ValueError, "floating"),
    (lambda: mx.conv1d(mx.ones((2, 5, 3)), mx.ones((4, 3, 3), dtype=mx.bool_)), ValueError, "floating"),
    (lambda: mx.conv1d(mx.ones((2, 5, 3)), mx.ones((4, 3, 2))), ValueError, "channels"),
    (lambda: mx.conv1d(mx.ones((5, 3)), mx.ones((4, 3, 3))), ValueError, "spatial"),
    (lambda: mx.conv_general(mx.ones((1, 3, 3, 3, 3, 2)), mx.ones((1, 2, 2, 2, 2, 2))), ValueError, "spatial"),
    (lambda: mx.conv1d(mx.ones((2, 5, 3)), mx.ones((4, 7, 3))), ValueError, "smaller"),
    (lambda: mx.conv1d(mx.ones((2, 5, 4)), mx.ones((5, 3, 2)), groups=2), ValueError, "groups"),
    (lambda: mx.conv1d(mx.ones((2, 5, 4)), mx.ones((6, 3, 2)), groups=3), ValueError, "groups"),
    (lambda: mx.conv1d(mx.ones((2, 5, 4)), mx.ones((6, 3, 2)), groups=0), ValueError, "roups"),
    (lambda: mx.conv1d(mx.ones((2, 5, 3)), mx.ones((4, 3, 3)), stride=0), ValueError, "Stride"),
    (lambda: mx.conv1d(mx.ones((2, 5, 3)), mx.ones((4, 3, 3)), stride=-1), ValueError, "Stride"),
    (lambda: mx.conv1d(mx.ones((2, 5, 3)), mx.ones((4, 3, 3)), dilation=0), ValueError, "dilation"),
    (lambda: mx.conv_general(mx.ones((2, 5, 3)), mx.ones((4, 3, 3)), input_dilation=0), ValueError, "dilation"),
    (lambda: mx.conv_general(mx.ones((2, 5, 3)), mx.ones((4, 3, 3)), padding=[1, 2]), ValueError, "padding"),
    (lambda: mx.conv1d(mx.ones((2, 2, 5, 3)), mx.ones((4, 3, 3))), ValueError, "2D convolution"),
    (lambda: mx.conv2d(mx.ones((1, 5, 6, 3)), mx.ones((2, 3, 2, 3)), stride=(2, 1, 1)), TypeError, "stride"),
]


# The GPU's conv_general cases, in every GPU float dtype.
GENERAL_DTYPES = [
    ((2, 9, 3), (4, 3, 3), {}),
    ((2, 9, 4), (6, 3, 2), {"stride": 2, "padding": 1, "groups": 2}),
    ((1, 7, 8, 3), (5, 3, 2, 3), {"stride": (2, 1), "padding": ([1, 0], [2, 1])}),
    ((2, 6, 5, 4), (4, 2, 2, 1), {"kernel_dilation": 2, "groups": 4, "flip": True}),
    ((1, 5, 5, 2), (3, 3, 3, 2), {"input_dilation": 2, "padding": 2}),
    ((1, 8, 2), (3, 3, 2), {"padding": ([-1], [-2])}),
    ((1, 4, 4, 3, 2), (2, 2, 2, 2, 2), {"stride": 2, "padding": 1}),
    ((0, 5, 2), (3, 2, 2), {}),
]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("xs,ws,kw", GENERAL_DTYPES, ids=str)
def test_conv_general_in_every_dtype(xs, ws, kw, dtype, rng, device):
    (x, w), (xn, wn) = pair(rng, xs, ws, dtype)
    d = len(xs) - 2
    per = lambda v: list(v) if isinstance(v, (list, tuple)) else [v] * d  # noqa: E731
    pad = kw.get("padding", 0)
    lo, hi = (list(pad[0]), list(pad[1])) if isinstance(pad, tuple) and isinstance(pad[0], list) \
        else (per(pad), per(pad))
    want = conv_ref(xn, wn, per(kw.get("stride", 1)), lo, hi, per(kw.get("kernel_dilation", 1)),
                    per(kw.get("input_dilation", 1)), kw.get("groups", 1), kw.get("flip", False))
    check(mx.conv_general(x, w, **kw), want, dtype, device=device)


def test_conv_gradients(rng, device):
    # The loss sum(conv(x, w)^2) is quadratic: its derivative along t is exactly
    # 2 <conv(x, w), conv(t, w)> (for x; likewise for w), computed in float64.
    (x, w), (xn, wn) = pair(rng, (2, 8, 8, 3), (4, 3, 3, 3))

    def loss(x, w):
        return (mx.conv2d(x, w, stride=2, padding=1) ** 2).sum()

    def ref(x, w):
        return conv_ref(x, w, [2, 2], [1, 1], [1, 1])

    y = ref(xn, wn)
    gx, gw = mx.grad(loss, argnums=(0, 1))(x, w)
    for _ in range(3):
        tx, tw = rng.standard_normal(xn.shape), rng.standard_normal(wn.shape)
        np.testing.assert_allclose(float((to_np(gx) * tx).sum()), 2 * (y * ref(tx, wn)).sum(),
                                   rtol=1e-4)
        np.testing.assert_allclose(float((to_np(gw) * tw).sum()), 2 * (y * ref(xn, tw)).sum(),
                                   rtol=1e-4)


@pytest.mark.parametrize("i", range(len(ERRORS)))
def test_conv_errors(i):
    f, exc, text = ERRORS[i]
    with pytest.raises(exc, match=text):
        mx.eval(f())


def test_conv_matches_mlx(rng):
    mlx = pytest.importorskip("mlx.core")
    x = rng.standard_normal((2, 6, 5, 4)).astype(np.float32)
    w = rng.standard_normal((6, 3, 2, 2)).astype(np.float32)
    kw = dict(stride=[2, 1], padding=([1, 0], [2, 1]), kernel_dilation=[1, 2],
              input_dilation=[2, 1], groups=2, flip=True)
    want = np.asarray(mlx.conv_general(mlx.array(x), mlx.array(w), **kw))
    got = np.asarray(mx.conv_general(mx.array(x), mx.array(w), **kw))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def conv_transpose_ref(x, w, stride, padding, dilation, output_padding, groups=1):
    """Transposed convolution by its scatter definition: input element i of each axis adds
    `x[i] * w[k]` to output position `i * stride + k * dilation - padding`."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    d = x.ndim - 2
    n, c = x.shape[0], x.shape[-1]
    o, k, cg = w.shape[0], w.shape[1:-1], w.shape[-1]
    size = [
        (x.shape[i + 1] - 1) * stride[i] - 2 * padding[i] + (k[i] - 1) * dilation[i] + 1 + output_padding[i]
        for i in range(d)
    ]
    out = np.zeros((n, *size, o))
    og = o // groups
    for pos in itertools.product(*(range(s) for s in x.shape[1:-1])):
        for kpos in itertools.product(*(range(s) for s in k)):
            t = [pos[i] * stride[i] + kpos[i] * dilation[i] - padding[i] for i in range(d)]
            if any(v < 0 or v >= size[i] for i, v in enumerate(t)):
                continue
            for g in range(groups):
                xs = x[(slice(None), *pos, slice(g * cg, (g + 1) * cg))]  # (n, cg)
                ws = w[(slice(g * og, (g + 1) * og), *kpos, slice(None))]  # (og, cg)
                out[(slice(None), *t, slice(g * og, (g + 1) * og))] += xs @ ws.T
    return out


TRANSPOSED = [
    ((2, 5, 3), (4, 3, 3), {}),
    ((1, 5, 2), (3, 3, 2), {"stride": 2, "output_padding": 1}),
    ((1, 6, 2), (3, 2, 2), {"stride": 3, "padding": 1, "dilation": 2}),
    ((1, 5, 4), (6, 3, 2), {"groups": 2}),
    ((2, 5, 2), (3, 3, 2), {"padding": 2}),
    ((1, 4, 3, 2), (3, 3, 2, 2), {"stride": (2, 1), "padding": (1, 0), "dilation": (1, 2), "output_padding": (1, 0)}),
    ((1, 3, 3, 4), (4, 2, 2, 2), {"stride": 2, "groups": 2}),
    ((1, 3, 2, 3, 2), (2, 2, 2, 2, 2), {"stride": 2, "padding": 1}),
]


@pytest.mark.parametrize("xs,ws,kw", TRANSPOSED)
def test_conv_transpose(xs, ws, kw, rng):
    (x, w), (xn, wn) = pair(rng, xs, ws)
    d = len(xs) - 2
    per = lambda v: list(v) if isinstance(v, tuple) else [v] * d  # noqa: E731
    want = conv_transpose_ref(xn, wn, per(kw.get("stride", 1)), per(kw.get("padding", 0)),
                              per(kw.get("dilation", 1)), per(kw.get("output_padding", 0)),
                              kw.get("groups", 1))
    f = {1: mx.conv_transpose1d, 2: mx.conv_transpose2d, 3: mx.conv_transpose3d}[d]
    check(f(x, w, **kw), want)


def test_conv_transpose_errors():
    with pytest.raises(ValueError, match="floating"):
        mx.conv_transpose1d(mx.ones((1, 5, 2), dtype=mx.int32), mx.ones((3, 3, 2)))
    with pytest.raises(ValueError, match="Stride"):
        mx.conv_transpose1d(mx.ones((1, 5, 2)), mx.ones((3, 3, 2)), stride=0)
    with pytest.raises(TypeError, match="stride"):
        mx.conv_transpose2d(mx.ones((1, 5, 5, 2)), mx.ones((3, 3, 3, 2)), stride=(1, 2, 3))
