"""nn.Upsample (nearest, linear, cubic; align_corners; antialias) and its functional helpers,
nn.MaxPool3d / nn.AvgPool3d: against numpy references written as dense resampling matrices
and window loops, and against MLX (values, shapes, dtypes, gradients)."""

import itertools
import math

import kiln.core as mx
import kiln.nn as nn
import numpy as np
import pytest
from kiln.nn.layers.upsample import upsample_cubic, upsample_linear, upsample_nearest

RNG = np.random.default_rng(22)


# ---- numpy references: one (m, n) matrix per spatial axis, out = W @ x along that axis.


def _positions(n, m, scale, align_corners):
    i = np.arange(m, dtype=np.float64)
    if align_corners:
        return i * ((n - 1) / max(m - 1, 1))
    # A grid of step 1 / scale centred on the input's centre (MLX's; it is PyTorch's
    # (i + 0.5) / scale - 0.5 when scale * n is a whole number).
    return (n - 1) / 2 + (i - (m - 1) / 2) / scale


def _keys(d, a):
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = a * (((d - 5) * d + 8) * d - 4)
    return np.where(d <= 1, near, np.where(d <= 2, far, 0.0))


def _matrix(n, m, scale, mode, align_corners, antialias):
    w = np.zeros((m, n))
    pos = _positions(n, m, scale, align_corners)
    for o, p in enumerate(pos):
        if mode == "nearest":
            # As MLX: centre rounding when enlarging, a floor of i * n / m otherwise
            # (float32 grid, so ties fall as they do there).
            g = np.float32(o)
            if m > n:
                src = np.round((g + np.float32(0.5)) * np.float32(n / m) - np.float32(0.5))
            else:
                src = np.floor(g * np.float32(n / m))
            w[o, int(src)] = 1
        elif antialias:
            widen = 1 / scale if scale < 1 else 1.0
            radius = 1.0 if mode == "linear" else 2.0
            for j in range(n):
                d = abs(p - j) / widen
                w[o, j] = max(1 - d, 0) if mode == "linear" else _keys(d, -0.5)
            w[o] /= w[o].sum() if w[o].sum() > 0 else 1.0
            assert radius  # taps beyond the radius are zero through the kernels
        elif mode == "linear":
            p = min(max(p, 0), n - 1)
            lo = math.floor(p)
            w[o, lo] += 1 - (p - lo)
            w[o, math.ceil(p)] += p - lo
        else:
            base = math.floor(p)
            for k in range(-1, 3):
                w[o, min(max(base + k, 0), n - 1)] += _keys(p - (base + k), -0.75)
    return w


def upsample_ref(x, scales, mode, align_corners=False, antialias=False):
    out = x.astype(np.float64)
    for axis, s in enumerate(scales, 1):
        n = out.shape[axis]
        w = _matrix(n, int(s * n), s, mode, align_corners, antialias)
        out = np.moveaxis(np.tensordot(w, np.moveaxis(out, axis, 0), axes=1), 0, axis)
    return out


MODES = [
    ("nearest", False, False),
    ("linear", False, False),
    ("linear", True, False),
    ("cubic", False, False),
    ("cubic", True, False),
    ("linear", False, True),
    ("cubic", False, True),
]
SHAPES_SCALES = [
    ((2, 5, 3), (2.0,)),
    ((1, 7, 2), (0.5,)),
    ((2, 4, 6, 3), (2.0, 3.0)),
    ((1, 6, 5, 2), (1.5, 0.6)),
    ((1, 9, 8, 1), (0.34, 0.5)),
    ((2, 3, 4, 5, 2), (2.0, 1.5, 1.0)),
]


@pytest.mark.parametrize("mode,align,aa", MODES)
@pytest.mark.parametrize("shape,scales", SHAPES_SCALES)
def test_upsample_matches_numpy(shape, scales, mode, align, aa):
    x = RNG.standard_normal(shape).astype(np.float32)
    layer = nn.Upsample(scales, mode=mode, align_corners=align, antialias=aa)
    got = layer(mx.array(x))
    ref = upsample_ref(x, scales, mode, align, aa)
    assert got.shape == ref.shape
    assert got.dtype == mx.float32
    np.testing.assert_allclose(np.array(got), ref, rtol=1e-5, atol=2e-6)


def test_upsample_docstring_example_and_int_input():
    x = mx.arange(1, 5).reshape((1, 2, 2, 1))
    near = nn.Upsample(scale_factor=2, mode="nearest")(x)
    assert near.dtype == mx.int32
    np.testing.assert_array_equal(
        np.array(near).squeeze(), [[1, 1, 2, 2], [1, 1, 2, 2], [3, 3, 4, 4], [3, 3, 4, 4]]
    )
    lin = nn.Upsample(scale_factor=2, mode="linear")(x)
    assert lin.dtype == mx.float32
    np.testing.assert_allclose(
        np.array(lin).squeeze(),
        [[1, 1.25, 1.75, 2], [1.5, 1.75, 2.25, 2.5], [2.5, 2.75, 3.25, 3.5], [3, 3.25, 3.75, 4]],
    )
    corners = nn.Upsample(scale_factor=2, mode="linear", align_corners=True)(x)
    np.testing.assert_allclose(np.array(corners)[0, :, 0, 0], [1, 5 / 3, 7 / 3, 3], rtol=1e-6)


def test_upsample_functional_helpers_and_half_dtypes():
    x = RNG.standard_normal((2, 4, 3, 2)).astype(np.float32)
    for dt, tol in ((mx.float16, 2e-3), (mx.bfloat16, 2e-2)):
        xa = mx.array(x).astype(dt)
        xr = np.array(xa.astype(mx.float32))
        near = upsample_nearest(xa, (2.0, 1.5))
        assert near.dtype == dt  # a gather keeps the dtype
        np.testing.assert_array_equal(
            np.array(near.astype(mx.float32)), upsample_ref(xr, (2.0, 1.5), "nearest")
        )
        for fn, mode in ((upsample_linear, "linear"), (upsample_cubic, "cubic")):
            out = fn(xa, (1.5, 2.0), align_corners=True)
            assert out.dtype == mx.float32  # float32 weights promote
            ref = upsample_ref(xr, (1.5, 2.0), mode, True)
            np.testing.assert_allclose(np.array(out), ref, rtol=tol, atol=tol)


def test_upsample_repr_and_errors():
    assert repr(nn.Upsample(2)) == "Upsample(scale_factor=2.0, mode='nearest', align_corners=False)"
    r = repr(nn.Upsample((2, 3), "linear", antialias=True))
    assert r.endswith("align_corners=False, antialias=True)")
    with pytest.raises(ValueError, match="unsupported upsampling"):
        nn.Upsample(2, mode="bilinear")
    with pytest.raises(ValueError, match="Antialiasing"):
        nn.Upsample(2, mode="nearest", antialias=True)
    with pytest.raises(ValueError, match="align_corners"):
        nn.Upsample(2, mode="cubic", align_corners=True, antialias=True)
    with pytest.raises(ValueError, match="at least 3D"):
        nn.Upsample(2)(mx.zeros((2, 3)))
    with pytest.raises(ValueError, match="One scale per spatial"):
        nn.Upsample((2, 2))(mx.zeros((1, 3, 2)))
    with pytest.raises(ValueError, match="positive"):
        nn.Upsample(-1.0, "linear")(mx.zeros((1, 3, 2)))
    with pytest.raises(ValueError):
        nn.Upsample("a")
    with pytest.raises(TypeError, match="upsample_nearest"):
        upsample_nearest(mx.zeros((1, 3, 2)), 2)
    with pytest.raises(ValueError, match="each spatial dimension"):
        upsample_linear(mx.zeros((1, 3, 2)), (2, 2))
    # Outputs with an empty axis are empty, of the dtype the weights give.
    empty = nn.Upsample(0.2, "linear")(mx.zeros((1, 3, 4, 2), mx.float16))
    assert empty.shape == (1, 0, 0, 2) and empty.dtype == mx.float32


def test_upsample_gradient_and_compile():
    x = mx.array(RNG.standard_normal((1, 4, 5, 2)).astype(np.float32))
    layer = nn.Upsample((1.5, 2.0), mode="cubic")
    eager = layer(x)
    np.testing.assert_allclose(np.array(mx.compile(layer)(x)), np.array(eager), rtol=1e-6)
    # The map is linear: its gradient under sum(out * c) is the transposed resampling.
    c = RNG.standard_normal(eager.shape).astype(np.float32)
    g = mx.grad(lambda t: mx.sum(layer(t) * mx.array(c)))(x)
    wh = _matrix(4, 6, 1.5, "cubic", False, False)
    ww = _matrix(5, 10, 2.0, "cubic", False, False)
    ref = np.einsum("oh,pw,bopc->bhwc", wh, ww, c)
    np.testing.assert_allclose(np.array(g), ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32"])
def test_upsample_matches_mlx(dtype):
    mlx = pytest.importorskip("mlx.core")
    mnn = pytest.importorskip("mlx.nn")
    mlx.set_default_device(mlx.cpu)
    worst = []
    for (shape, scales), (mode, align, aa) in itertools.product(SHAPES_SCALES[1:5], MODES):
        x = (RNG.standard_normal(shape) * 3).astype(np.float32)
        a = nn.Upsample(scales, mode, align, aa)(mx.array(x).astype(getattr(mx, dtype)))
        b = mnn.Upsample(scales, mode, align, aa)(mlx.array(x).astype(getattr(mlx, dtype)))
        assert a.shape == tuple(b.shape) and str(a.dtype)[-8:] == str(b.dtype)[-8:]
        av, bv = np.array(a.astype(mx.float32)), np.array(b.astype(mlx.float32))
        worst.append(np.abs(av - bv).max() / (1 + np.abs(bv).max()))
    assert max(worst) < 1e-5


def test_upsample_gradient_matches_mlx():
    mlx = pytest.importorskip("mlx.core")
    mnn = pytest.importorskip("mlx.nn")
    x = RNG.standard_normal((2, 5, 4, 3)).astype(np.float32)
    for mode, align, aa in MODES[1:]:
        ours, theirs = (m.Upsample((1.7, 0.6), mode, align, aa) for m in (nn, mnn))
        a = mx.grad(lambda t, layer=ours: mx.sum(mx.sin(layer(t))))(mx.array(x))
        b = mlx.grad(lambda t, layer=theirs: mlx.sum(mlx.sin(layer(t))))(mlx.array(x))
        np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-4, atol=1e-5, err_msg=mode)


# ---- 3-d pooling


def pool3d_ref(x, kernel, stride, padding, is_max):
    fill = -np.inf if is_max else 0.0
    x = np.pad(x, [(0, 0)] + [(p, p) for p in padding] + [(0, 0)], constant_values=fill)
    out_sizes = [(s - k) // st + 1 for s, k, st in zip(x.shape[1:4], kernel, stride)]
    out = np.empty((x.shape[0], *out_sizes, x.shape[-1]), np.float64)
    for i, j, k in itertools.product(*(range(o) for o in out_sizes)):
        win = x[
            :,
            i * stride[0] : i * stride[0] + kernel[0],
            j * stride[1] : j * stride[1] + kernel[1],
            k * stride[2] : k * stride[2] + kernel[2],
        ]
        out[:, i, j, k] = win.max(axis=(1, 2, 3)) if is_max else win.mean(axis=(1, 2, 3))
    return out


POOL_CASES = [
    ((2, 4, 4, 4, 3), 2, None, 0),
    ((1, 5, 6, 7, 2), (2, 3, 1), (1, 2, 3), (1, 1, 0)),
    ((2, 3, 5, 4, 1), 3, 1, 1),
    ((1, 6, 3, 5, 2), (3, 1, 2), 2, (1, 0, 1)),
]


def _triple(v):
    return (v,) * 3 if isinstance(v, int) else tuple(v)


@pytest.mark.parametrize("shape,kernel,stride,padding", POOL_CASES)
@pytest.mark.parametrize("cls", ["MaxPool3d", "AvgPool3d"])
def test_pool3d_matches_numpy(cls, shape, kernel, stride, padding):
    x = RNG.standard_normal(shape).astype(np.float32)
    layer = getattr(nn, cls)(kernel, stride, padding)
    k, p = _triple(kernel), _triple(padding)
    st = _triple(stride) if stride is not None else k
    ref = pool3d_ref(x, k, st, p, cls == "MaxPool3d")
    got = layer(mx.array(x))
    assert got.shape == ref.shape
    np.testing.assert_allclose(np.array(got), ref, rtol=1e-5, atol=1e-6)


def test_pool3d_repr_dtypes_and_errors():
    assert repr(nn.AvgPool3d((1, 2, 3), 2, 1)) == (
        "AvgPool3d(kernel_size=(1, 2, 3), stride=(2, 2, 2), padding=(1, 1, 1))"
    )
    assert repr(nn.MaxPool3d(2)) == (
        "MaxPool3d(kernel_size=(2, 2, 2), stride=(2, 2, 2), padding=(0, 0, 0))"
    )
    x = mx.array(RNG.integers(-50, 50, (1, 4, 4, 4, 2)).astype(np.int32))
    m = nn.MaxPool3d(2, padding=1)(x)
    assert m.dtype == mx.int32
    np.testing.assert_array_equal(
        np.array(m), pool3d_ref(np.array(x).astype(np.float64), (2,) * 3, (2,) * 3, (1,) * 3, True)
    )
    assert nn.AvgPool3d(2)(x).dtype == mx.float32
    h = nn.AvgPool3d(2)(x.astype(mx.float16))
    assert h.dtype == mx.float16
    for bad in (
        lambda: nn.MaxPool3d((2, 2)),
        lambda: nn.MaxPool3d(0),
        lambda: nn.AvgPool3d(2, stride=0),
        lambda: nn.MaxPool3d(2, padding=-1),
        lambda: nn.MaxPool3d(2)(mx.zeros((4, 4, 4, 2))),
    ):
        with pytest.raises(ValueError):
            bad()


@pytest.mark.parametrize("cls", ["MaxPool3d", "AvgPool3d"])
def test_pool3d_matches_mlx_with_gradient(cls):
    mlx = pytest.importorskip("mlx.core")
    mnn = pytest.importorskip("mlx.nn")
    x = RNG.standard_normal((2, 5, 4, 6, 3)).astype(np.float32)
    args = ((2, 3, 2), (1, 2, 2), (1, 1, 0))
    ours, theirs = getattr(nn, cls)(*args), getattr(mnn, cls)(*args)
    np.testing.assert_allclose(
        np.array(ours(mx.array(x))), np.array(theirs(mlx.array(x))), rtol=1e-6, atol=1e-6
    )
    ga = mx.grad(lambda t: mx.sum(ours(t) ** 2))(mx.array(x))
    gb = mlx.grad(lambda t: mlx.sum(theirs(t) ** 2))(mlx.array(x))
    np.testing.assert_allclose(np.array(ga), np.array(gb), rtol=1e-5, atol=1e-6)
    xh = mx.array(x).astype(mx.bfloat16)
    a = ours(xh)
    b = theirs(mlx.array(x).astype(mlx.bfloat16))
    assert a.dtype == mx.bfloat16
    np.testing.assert_allclose(
        np.array(a.astype(mx.float32)), np.array(b.astype(mlx.float32)), rtol=1e-2, atol=1e-2
    )
