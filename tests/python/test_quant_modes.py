"""The microscaling quantization modes (mxfp4, mxfp8, nvfp4): packed words and uint8 scales
equal MLX's bit for bit for the same input (edge values included), dequantize is exact
against numpy and MLX, the products match MLX, and the layers (QuantizedLinear,
QuantizedEmbedding, QQLinear) take MLX's weights as they are."""

import kiln.core as mx
import kiln.nn as nn
import numpy as np
import pytest
from kiln.utils import tree_flatten

MODES = {"mxfp4": (32, 4), "mxfp8": (32, 8), "nvfp4": (16, 4)}
DTYPES = ["float32", "float16", "bfloat16"]
FP4 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float64)


def _mlx():
    return pytest.importorskip("mlx.core")


def np_of(a):
    """numpy copy of a kiln or MLX array (bfloat16 through float32)."""
    if "bfloat16" in str(a.dtype):
        a = a.astype(mx.float32 if isinstance(a, mx.array) else _mlx().float32)
    return np.array(a)


def unpack(words, bits):
    """numpy: codes of each packed uint32 word, lowest bits first."""
    words = np.asarray(words, dtype=np.uint64)
    per = 32 // bits
    c = (words[..., None] >> (np.arange(per, dtype=np.uint64) * bits)) & ((1 << bits) - 1)
    return c.reshape(*words.shape[:-1], -1)


def np_mxfp4(w):
    """numpy reference of mxfp4 for finite float32 ``w``: scale 2^ceil(log2(amax / 6)),
    e2m1 codes with midpoints rounded towards zero, no negative zero."""
    g = w.astype(np.float64).reshape(*w.shape[:-1], -1, 32)
    s = (np.abs(g).max(-1) / 6).astype(np.float32).astype(np.float64)
    m, e = np.frexp(s)
    e = np.where(s == 0, 0, e - (m == 0.5))
    y = g / np.exp2(e)[..., None]
    mag = (np.abs(y)[..., None] > (FP4[1:] + FP4[:-1]) / 2).sum(-1)
    codes = np.where(mag > 0, mag + 8 * np.signbit(y), 0).reshape(w.shape)
    return codes, ((e + 127) % 256).astype(np.uint8)


def random_weights(rng, shape, scale):
    return (rng.normal(size=shape) * scale).astype(np.float32)


def edge_weights(rng, group):
    """Rows of groups around the format's edges: exact powers of two and their neighbours,
    tiny and subnormal values, huge ones, zeros, signed zeros."""
    f = np.float32
    nxt = np.nextafter
    vals = [3.0, 6.0, 1.5, nxt(f(3), f(9)), nxt(f(3), f(0)), nxt(f(6), f(9)), 448.0, 224.0,
            nxt(f(448), f(0)), nxt(f(448), f(1e9)), 1e-30, 1e-40, 2.0 ** -127, 2.0 ** -133,
            6 * 2.0 ** -130, 3e38, -5.0, 0.0, -0.0, 0.25, 0.75, 2.5]
    w = np.zeros((len(vals) + len(vals) % 2, group), np.float32)
    w[: len(vals), 0] = vals
    w[:, 1:] = rng.normal(size=(w.shape[0], group - 1)) * f(1e-3)
    w[-1, :] = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -0.75, 6.0] + [-0.0] * (group - 10)
    return w


def nonfinite_weights(rng, group):
    w = rng.normal(size=(8, group)).astype(np.float32)
    w[0, 0], w[1, 3], w[2, 0] = np.inf, np.nan, -np.inf
    w[3] = 0
    w[4, 1], w[4, 2] = np.inf, 0
    w[5] = 0
    w[5, 0] = np.inf
    return w


def both_quantize(w, mode, dtype, global_scale=None):
    mlx = _mlx()
    m_kw = {} if global_scale is None else {"global_scale": mlx.array(global_scale, dtype=mlx.float32)}
    k_kw = {} if global_scale is None else {"global_scale": mx.array(global_scale, dtype=mx.float32)}
    m = mlx.quantize(mlx.array(w).astype(getattr(mlx, dtype)), mode=mode, **m_kw)
    k = mx.quantize(mx.array(w).astype(getattr(mx, dtype)), mode=mode, **k_kw)
    return [np.array(a) for a in m], [np.array(a) for a in k]


# ---------------------------------------------------------------------------------------
# quantize: bit for bit


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_quantize_matches_mlx_bit_for_bit(mode, dtype):
    rng = np.random.default_rng(len(mode) * 7 + DTYPES.index(dtype))
    group, bits = MODES[mode]
    inputs = [random_weights(rng, (6, 128), s) for s in (1e-3, 1.0, 50.0)]
    inputs += [random_weights(rng, (2, 3, 64), 1.0), random_weights(rng, (2, 32), 2.0),
               (rng.uniform(-1, 1, (4, 64)) ** 9).astype(np.float32),
               edge_weights(rng, group), nonfinite_weights(rng, group)]
    for w in inputs:
        if dtype == "float16":
            w = np.clip(w, -6e4, 6e4)  # beyond float16's range is the non-finite case
        m, k = both_quantize(w, mode, dtype)
        assert len(k) == 2, "the float modes return (w_q, scales)"
        assert k[0].dtype == np.uint32 and k[1].dtype == np.uint8
        assert k[0].shape == (*w.shape[:-1], w.shape[-1] * bits // 32)
        assert k[1].shape == (*w.shape[:-1], w.shape[-1] // group)
        if mode == "nvfp4":
            # MLX packs a value beyond ~1e7 times its (saturated) block scale as an
            # arbitrary code; kiln saturates it (6.0). Only those elements may differ.
            np.testing.assert_array_equal(k[1], m[1])
            sd = np.array(mx.from_fp8(mx.array(k[1]), mx.float32))
            with np.errstate(divide="ignore", invalid="ignore"):
                y = np.abs(w.astype(np.float32)).reshape(*k[1].shape, group) / sd[..., None]
            ok = ~((y > 1e7) & np.isfinite(y)).reshape(w.shape)
            ck, cm = unpack(k[0], 4), unpack(m[0], 4)
            np.testing.assert_array_equal(ck[ok], cm[ok])
            assert np.all(ck[~ok] % 8 == 7)
            continue
        np.testing.assert_array_equal(k[1], m[1], err_msg=f"scales of {w[:, :3]}")
        np.testing.assert_array_equal(k[0], m[0], err_msg=f"packed values of {w[:, :3]}")


@pytest.mark.parametrize("global_scale", [1.0, 0.37, 123.4, 2688.0, 7.77, 41.3, 0.05])
def test_nvfp4_global_scale_matches_mlx(global_scale):
    rng = np.random.default_rng(3)
    for w in (random_weights(rng, (8, 64), 1.0), random_weights(rng, (4, 32), 100.0),
              random_weights(rng, (2, 2, 16), 1e-3)):
        for dtype in DTYPES:
            m, k = both_quantize(w, "nvfp4", dtype, global_scale)
            np.testing.assert_array_equal(k[1], m[1])
            np.testing.assert_array_equal(k[0], m[0])
    # the global scale moves the block scales: 2688 reproduces the scales without it
    w = random_weights(rng, (4, 64), 1.0)
    plain = mx.quantize(mx.array(w), mode="nvfp4")
    unit = mx.quantize(mx.array(w), mode="nvfp4", global_scale=mx.array(2688.0))
    assert np.array_equal(np.array(plain[1]), np.array(unit[1]))
    half = mx.quantize(mx.array(w), mode="nvfp4", global_scale=mx.array(1.0))
    assert not np.array_equal(np.array(plain[1]), np.array(half[1]))


def test_mxfp4_matches_numpy_reference():
    rng = np.random.default_rng(11)
    for scale in (1e-20, 1e-3, 1.0, 7.0, 1e20):
        w = random_weights(rng, (5, 96), scale)
        q, s = mx.quantize(mx.array(w), mode="mxfp4")
        codes, scales = np_mxfp4(w)
        np.testing.assert_array_equal(np.array(s), scales)
        np.testing.assert_array_equal(unpack(np.array(q), 4), codes)


def test_exact_values_round_trip():
    """Values on each format's grid come back unchanged (numpy oracle)."""
    rng = np.random.default_rng(5)
    signs = np.where(rng.random((4, 64)) < 0.5, -1.0, 1.0)
    grid = FP4[rng.integers(0, 8, (4, 64))] * signs
    grid[:, ::16] = 6.0  # each group's amax is 6: scale 1 (nvfp4), 2^0 (mxfp4)
    for mode in ("mxfp4", "nvfp4"):
        for k in (-3, 0, 5):
            w = (grid * 2.0 ** k).astype(np.float32)
            if mode == "nvfp4" and k != 0:
                continue
            out = mx.dequantize(*mx.quantize(mx.array(w), mode=mode), mode=mode, dtype=mx.float32)
            np.testing.assert_array_equal(np.array(out), w)
    # mxfp8: e4m3 values whose group amax is 448 (scale 2^0)
    codes = rng.integers(0, 127, (4, 64)).astype(np.uint8)
    vals = np.array(mx.from_fp8(mx.array(codes), mx.float32)) * signs
    vals[:, ::32] = 448.0
    for k in (-4, 0, 3):
        w = (vals * 2.0 ** k).astype(np.float32)
        out = mx.dequantize(*mx.quantize(mx.array(w), mode="mxfp8"), mode="mxfp8", dtype=mx.float32)
        np.testing.assert_array_equal(np.array(out), w)


@pytest.mark.parametrize("mode", MODES)
def test_round_trip_error_is_bounded(mode):
    """Every value lands within the format's relative step of its group's largest
    magnitude (numpy)."""
    rng = np.random.default_rng(2)
    group, _ = MODES[mode]
    w = random_weights(rng, (16, 128), 3.0)
    out = np.array(mx.dequantize(*mx.quantize(mx.array(w), mode=mode), mode=mode, dtype=mx.float32))
    amax = np.repeat(np.abs(w.reshape(16, -1, group)).max(-1), group, axis=-1)
    # fp4: half of the top step (1 of 6) and a factor 2 of scale slack; fp8: 1/16 relative
    bound = amax * (0.34 if mode != "mxfp8" else 0.0625) + 1e-6
    assert np.all(np.abs(out - w) <= bound)
    assert np.abs(out - w).mean() < np.abs(w).mean() * (0.15 if mode != "mxfp8" else 0.03)


# ---------------------------------------------------------------------------------------
# dequantize


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [None, *DTYPES])
def test_dequantize_every_code_and_scale_matches_mlx(mode, dtype):
    """Arbitrary words and every scale byte (0 and 255, e4m3 NaN codes included)."""
    mlx = _mlx()
    rng = np.random.default_rng(7)
    group, bits = MODES[mode]
    words = rng.integers(0, 2 ** 32, (128, 32), dtype=np.uint64).astype(np.uint32)
    scales = rng.integers(0, 256, (128, 32 * 32 // bits // group)).astype(np.uint8)
    scales.reshape(-1)[:256] = np.arange(256)
    m_kw = {} if dtype is None else {"dtype": getattr(mlx, dtype)}
    k_kw = {} if dtype is None else {"dtype": getattr(mx, dtype)}
    m = mlx.dequantize(mlx.array(words), mlx.array(scales), mode=mode, **m_kw)
    k = mx.dequantize(mx.array(words), mx.array(scales), mode=mode, **k_kw)
    assert str(k.dtype).split(".")[-1] == str(m.dtype).split(".")[-1] == (dtype or "bfloat16")
    np.testing.assert_array_equal(np_of(k), np_of(m))
    if mode == "nvfp4":
        for gs in (1.0, 0.37, 123.4):
            m = mlx.dequantize(mlx.array(words), mlx.array(scales), mode=mode,
                               global_scale=mlx.array(gs), **m_kw)
            k = mx.dequantize(mx.array(words), mx.array(scales), mode=mode,
                              global_scale=mx.array(gs), **k_kw)
            assert k.dtype == mx.float32 and m.dtype == mlx.float32
            np.testing.assert_array_equal(np_of(k), np_of(m))


def test_dequantize_matches_numpy():
    rng = np.random.default_rng(9)
    words = rng.integers(0, 2 ** 32, (3, 2, 8), dtype=np.uint64).astype(np.uint32)
    scales = rng.integers(100, 150, (3, 2, 2)).astype(np.uint8)
    out = mx.dequantize(mx.array(words), mx.array(scales), mode="mxfp4", dtype=mx.float32)
    codes = unpack(words, 4)
    vals = np.where(codes >= 8, -1, 1) * FP4[codes % 8]
    ref = vals.reshape(3, 2, 2, 32) * np.exp2(scales.astype(np.float64) - 127)[..., None]
    np.testing.assert_array_equal(np.array(out), ref.reshape(3, 2, 64).astype(np.float32))


# ---------------------------------------------------------------------------------------
# Products


def _tol(dtype):
    return {"float32": 1e-4, "float16": 2e-2, "bfloat16": 5e-2}[dtype]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("transpose", [True, False])
def test_quantized_matmul_matches_mlx(mode, dtype, transpose):
    mlx = _mlx()
    rng = np.random.default_rng(4)
    w = random_weights(rng, (64, 128), 1.0)
    x = random_weights(rng, (2, 3, 128 if transpose else 64), 1.0)
    mq = mlx.quantize(mlx.array(w), mode=mode)
    kq = mx.quantize(mx.array(w), mode=mode)
    m = mlx.quantized_matmul(mlx.array(x).astype(getattr(mlx, dtype)), *mq, transpose=transpose, mode=mode)
    k = mx.quantized_matmul(mx.array(x).astype(getattr(mx, dtype)), *kq, transpose=transpose, mode=mode)
    assert k.dtype == getattr(mx, dtype) and k.shape == tuple(m.shape)
    ref = np_of(m)
    np.testing.assert_allclose(np_of(k), ref, atol=_tol(dtype) * np.abs(ref).max(), rtol=0)
    # and the composition's meaning: x against the dequantized matrix
    dense = np.array(mx.dequantize(*kq, mode=mode, dtype=mx.float32))
    want = x.astype(np.float64) @ (dense.T if transpose else dense)
    if dtype == "float32":
        np.testing.assert_allclose(np.array(k), want, rtol=1e-4, atol=1e-4)


def test_quantized_matmul_batched_weight():
    mlx = _mlx()
    rng = np.random.default_rng(6)
    w = random_weights(rng, (2, 32, 64), 1.0)
    x = random_weights(rng, (2, 5, 64), 1.0)
    m = mlx.quantized_matmul(mlx.array(x), *mlx.quantize(mlx.array(w), mode="nvfp4"), mode="nvfp4")
    k = mx.quantized_matmul(mx.array(x), *mx.quantize(mx.array(w), mode="nvfp4"), mode="nvfp4")
    np.testing.assert_allclose(np.array(k), np.array(m), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", MODES)
def test_gather_qmm_matches_mlx(mode):
    mlx = _mlx()
    rng = np.random.default_rng(8)
    w = random_weights(rng, (4, 32, 64), 1.0)
    mq = mlx.quantize(mlx.array(w), mode=mode)
    kq = mx.quantize(mx.array(w), mode=mode)
    cases = [
        (random_weights(rng, (6, 1, 64), 1.0), None, np.array([0, 3, 1, 1, 2, 0]), True),
        (random_weights(rng, (2, 3, 64), 1.0), np.array([[0, 1], [1, 0]]), np.array([[3], [2]]), True),
        (random_weights(rng, (5, 1, 32), 1.0), None, np.array([2, 2, 0, 3, 1]), False),
    ]
    for x, li, ri, transpose in cases:
        m_idx = {k: mlx.array(v.astype(np.uint32)) for k, v in (("lhs_indices", li), ("rhs_indices", ri)) if v is not None}
        k_idx = {k: mx.array(v.astype(np.uint32)) for k, v in (("lhs_indices", li), ("rhs_indices", ri)) if v is not None}
        m = mlx.gather_qmm(mlx.array(x), *mq, transpose=transpose, mode=mode, **m_idx)
        k = mx.gather_qmm(mx.array(x), *kq, transpose=transpose, mode=mode, **k_idx)
        assert k.shape == tuple(m.shape)
        np.testing.assert_allclose(np.array(k), np.array(m), rtol=1e-4, atol=1e-4)


def test_gather_qmm_nvfp4_global_scale_per_expert():
    """MLX has it on the GPU only: against kiln's own dequantize, expert by expert."""
    rng = np.random.default_rng(10)
    w = random_weights(rng, (3, 16, 32), 1.0)
    gs = np.array([1.0, 2.5, 0.5], np.float32)
    parts = [mx.quantize(mx.array(w[e]), mode="nvfp4", global_scale=mx.array(gs[e])) for e in range(3)]
    q = mx.stack([p[0] for p in parts])
    s = mx.stack([p[1] for p in parts])
    x = random_weights(rng, (4, 1, 32), 1.0)
    ri = np.array([2, 0, 1, 2], np.uint32)
    got = mx.gather_qmm(mx.array(x), q, s, rhs_indices=mx.array(ri), mode="nvfp4",
                        global_scale=mx.array(gs))
    dense = [np.array(mx.dequantize(parts[e][0], parts[e][1], mode="nvfp4",
                                    global_scale=mx.array(gs[e]))) for e in range(3)]
    want = np.stack([x[i] @ dense[e].T for i, e in enumerate(ri)])
    np.testing.assert_allclose(np.array(got), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["nvfp4", "mxfp8", "mxfp4"])
def test_qqmm_matches_mlx_for_one_row(mode):
    """MLX's CPU has qqmm for a single row with a quantized weight only."""
    mlx = _mlx()
    rng = np.random.default_rng(12)
    w = random_weights(rng, (48, 128), 1.0)
    for dtype in DTYPES:
        x = random_weights(rng, (1, 128), 1.0)
        m = mlx.qqmm(mlx.array(x).astype(getattr(mlx, dtype)), *mlx.quantize(mlx.array(w), mode=mode), mode=mode)
        k = mx.qqmm(mx.array(x).astype(getattr(mx, dtype)), *mx.quantize(mx.array(w), mode=mode), mode=mode)
        assert k.dtype == getattr(mx, dtype)
        ref = np_of(m)
        if dtype == "float32":
            np.testing.assert_array_equal(np.array(k), ref)
        else:
            np.testing.assert_allclose(np_of(k), ref, atol=_tol(dtype) * np.abs(ref).max())


def _fake(x, mode, gs=None):
    kw = {} if gs is None else {"global_scale": mx.array(gs)}
    return np.array(mx.dequantize(*mx.quantize(mx.array(x), mode=mode, **kw), mode=mode,
                                  dtype=mx.float32, **kw))


@pytest.mark.parametrize("mode", ["nvfp4", "mxfp8"])
def test_qqmm_composition_and_straight_through_gradients(mode):
    rng = np.random.default_rng(13)
    x = random_weights(rng, (3, 2, 64), 1.0)
    w = random_weights(rng, (16, 64), 1.0)
    xq, wq = _fake(x.reshape(6, 64), mode).reshape(x.shape), _fake(w, mode)
    got = mx.qqmm(mx.array(x), mx.array(w), mode=mode)  # both quantized on the fly
    np.testing.assert_allclose(np.array(got), xq @ wq.T, rtol=1e-5, atol=1e-5)
    got = mx.qqmm(mx.array(x), *mx.quantize(mx.array(w), mode=mode), mode=mode)
    np.testing.assert_allclose(np.array(got), xq @ wq.T, rtol=1e-5, atol=1e-5)
    # gradients pass the rounding unchanged, to x and to an unquantized w
    g = rng.normal(size=(3, 2, 16)).astype(np.float32)
    gx, gw = mx.grad(lambda a, b: (mx.qqmm(a, b, mode=mode) * mx.array(g)).sum(), argnums=(0, 1))(
        mx.array(x), mx.array(w))
    np.testing.assert_allclose(np.array(gx), g @ wq, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.array(gw), g.reshape(6, 16).T @ xq.reshape(6, 64), rtol=1e-4, atol=1e-4)
    # nvfp4 global scales, one for x and one for w
    if mode == "nvfp4":
        got = mx.qqmm(mx.array(x), mx.array(w), global_scale_x=mx.array(3.0),
                      global_scale_w=mx.array(5.0))
        want = _fake(x.reshape(6, 64), mode, 3.0).reshape(x.shape) @ _fake(w, mode, 5.0).T
        np.testing.assert_allclose(np.array(got), want, rtol=1e-5, atol=1e-5)


def test_gather_qqmm_is_gathered_qqmm():
    rng = np.random.default_rng(14)
    w = random_weights(rng, (3, 16, 32), 1.0)
    x = random_weights(rng, (4, 1, 32), 1.0)
    ri = np.array([1, 0, 2, 1], np.uint32)
    for quantized in (False, True):
        args = mx.quantize(mx.array(w), mode="nvfp4") if quantized else (mx.array(w),)
        got = mx.gather_qqmm(mx.array(x), *args, rhs_indices=mx.array(ri))
        want = np.stack([_fake(x[i], "nvfp4") @ _fake(w[e], "nvfp4").T for i, e in enumerate(ri)])
        np.testing.assert_allclose(np.array(got), want, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------
# Affine keeps its path; errors


def test_affine_still_goes_to_the_rust_ops():
    from kiln import _core

    w = mx.array(np.random.default_rng(0).normal(size=(4, 64)).astype(np.float32))
    a, b = mx.quantize(w), _core.quantize(w)
    assert len(a) == 3 and all(np.array_equal(np.array(u), np.array(v)) for u, v in zip(a, b))
    x = mx.ones((2, 64))
    assert np.array_equal(np.array(mx.quantized_matmul(x, *a)), np.array(_core.quantized_matmul(x, *b)))
    assert np.array_equal(np.array(mx.dequantize(*a)), np.array(_core.dequantize(*b)))


ERRORS = [
    "mx.quantize(w, mode='foo')",
    "mx.dequantize(q, s, mode='foo')",
    "mx.quantized_matmul(x, q, s, mode='foo')",
    "mx.quantize(w, 16, mode='mxfp4')",
    "mx.quantize(w, 32, 8, mode='mxfp4')",
    "mx.quantize(w, 32, mode='nvfp4')",
    "mx.quantize(w, 32, 4, mode='mxfp8')",
    "mx.quantize(w.astype(mx.int32), mode='mxfp4')",
    "mx.quantize(w[0], mode='mxfp4')",
    "mx.quantize(w[:, :48], mode='mxfp8')",
    "mx.quantize(w, mode='mxfp4', global_scale=mx.array(1.0))",
    "mx.quantize(w, global_scale=mx.array(1.0))",
    "mx.quantize(w, mode='nvfp4', global_scale=mx.array([1.0, 2.0]))",
    "mx.quantize(w, mode='nvfp4', global_scale=mx.array(1.0, dtype=mx.float16))",
    "mx.dequantize(q, s, s, mode='nvfp4')",
    "mx.dequantize(q, s.astype(mx.float32), mode='nvfp4')",
    "mx.dequantize(q.astype(mx.int32), s, mode='nvfp4')",
    "mx.dequantize(q, s, mode='nvfp4', dtype=mx.int32)",
    "mx.dequantize(q, s[:, :2], mode='nvfp4')",
    "mx.dequantize(q[0], s[0], mode='nvfp4')",
    "mx.dequantize(q, s, mode='nvfp4', group_size=32)",
    "mx.dequantize(*mx.quantize(w), global_scale=mx.array(1.0))",
    "mx.quantized_matmul(x, q, s, s, mode='nvfp4')",
    "mx.quantized_matmul(x.astype(mx.int32), q, s, mode='nvfp4')",
    "mx.quantized_matmul(x[:, :64], q, s, mode='nvfp4')",
    "mx.quantized_matmul(x, q, s, transpose=False, mode='nvfp4')",
    "mx.quantized_matmul(x, q, s.astype(mx.float32), mode='nvfp4')",
    "mx.quantized_matmul(x, q.astype(mx.int32), s, mode='nvfp4')",
    "mx.quantized_matmul(x, q, s[:, :4], mode='nvfp4')",
    "mx.qqmm(x.astype(mx.int32), q, s)",
    "mx.qqmm(x, q, s, mode='foo')",
    "mx.qqmm(x, q)",
    "mx.qqmm(x, q, s, global_scale_x=mx.array(1.0))",
    "mx.qqmm(x, *mx.quantize(w, mode='mxfp8'), mode='mxfp8', global_scale_x=mx.array(1.0), global_scale_w=mx.array(1.0))",
    "mx.qqmm(x[:, :64], q, s)",
    "mx.qqmm(x, q[None], s[None])",
]


@pytest.mark.parametrize("expr", ERRORS)
def test_errors_match_mlx(expr):
    """The same ValueError, with MLX's message, naming the op."""
    mlx = _mlx()
    rng = np.random.default_rng(0)
    w_np, x_np = rng.normal(size=(64, 128)).astype(np.float32), rng.normal(size=(1, 128)).astype(np.float32)
    msgs = []
    for mod in (mlx, mx):
        w, x = mod.array(w_np), mod.array(x_np)
        q, s = mod.quantize(w, mode="nvfp4")
        with pytest.raises(ValueError) as info:
            mod.eval(eval(expr, {"mx": mod, "w": w, "x": x, "q": q, "s": s}))
        msgs.append(str(info.value))
    assert msgs[1] == msgs[0]
    assert msgs[1].startswith("[")


def test_kiln_only_errors_name_the_op():
    w = mx.ones((8, 64))
    q, s = mx.quantize(w, mode="mxfp8")
    with pytest.raises(ValueError, match=r"^\[gather_qmm\] Global scale is only supported for 'nvfp4'"):
        mx.gather_qmm(mx.ones((1, 64)), q, s, mode="mxfp8", global_scale=mx.array(1.0))
    with pytest.raises(ValueError, match=r"^\[qqmm\] .*affine"):
        mx.qqmm(mx.ones((1, 64)), w, mode="affine")
    with pytest.raises(ValueError, match=r"^\[gather_qqmm\] Invalid quantization mode"):
        mx.gather_qqmm(mx.ones((1, 64)), w, mode="fp3")
    with pytest.raises(ValueError, match=r"^\[quantized_matmul\] mxfp8 quantization requires group size 32"):
        mx.quantized_matmul(mx.ones((1, 64)), q, s, group_size=64, mode="mxfp8")


# ---------------------------------------------------------------------------------------
# Layers


@pytest.mark.parametrize("mode", MODES)
def test_quantized_layers_take_mlx_weights(mode):
    """MLX's quantized parameters (names, shapes, dtypes, bits) are kiln's, and its
    weights give kiln's layers the same outputs."""
    mlx = _mlx()
    import mlx.nn as mnn
    from mlx.utils import tree_flatten as mlx_flatten

    rng = np.random.default_rng(15)
    w, b = random_weights(rng, (48, 128), 1.0), random_weights(rng, (48,), 1.0)
    ml = mnn.Linear(128, 48)
    ml.update({"weight": mlx.array(w), "bias": mlx.array(b)})
    mq = mnn.QuantizedLinear.from_linear(ml, mode=mode)
    kl = nn.Linear(128, 48)
    kl.update({"weight": mx.array(w), "bias": mx.array(b)})
    kq = nn.QuantizedLinear.from_linear(kl, mode=mode)
    assert repr(kq) == repr(mq)
    mp, kp = dict(mlx_flatten(mq.parameters())), dict(tree_flatten(kq.parameters()))
    assert sorted(mp) == sorted(kp) == ["bias", "scales", "weight"]
    for name in mp:
        np.testing.assert_array_equal(np.array(kp[name]), np.array(mp[name]))
    # a fresh kiln layer loading MLX's arrays
    fresh = nn.QuantizedLinear(128, 48, mode=mode)
    fresh.update({n: mx.array(np.array(v)) for n, v in mp.items()})
    x = random_weights(rng, (3, 128), 1.0)
    np.testing.assert_allclose(np.array(fresh(mx.array(x))), np.array(mq(mlx.array(x))), rtol=1e-4, atol=1e-4)

    me = mnn.Embedding(20, 64)
    me.update({"weight": mlx.array(w[:20, :64])})
    ke = nn.Embedding(20, 64)
    ke.update({"weight": mx.array(w[:20, :64])})
    mqe, kqe = me.to_quantized(mode=mode), ke.to_quantized(mode=mode)
    assert repr(kqe) == repr(mqe)
    idx = np.array([[1, 19], [4, 4]])
    got, want = kqe(mx.array(idx)), mqe(mlx.array(idx))
    assert got.dtype == mx.bfloat16 and "bfloat16" in str(want.dtype)
    np.testing.assert_array_equal(np_of(got), np_of(want))
    np.testing.assert_allclose(np.array(kqe.as_linear(mx.array(x[:, :64]))),
                               np.array(mqe.as_linear(mlx.array(x[:, :64]))), rtol=1e-4, atol=1e-4)

    model = nn.Sequential(nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 32))
    nn.quantize(model, mode=mode)
    assert all(isinstance(model.layers[i], nn.QuantizedLinear) for i in (0, 2))
    assert model.layers[0].mode == mode and model.layers[0].group_size == MODES[mode][0]
    assert "biases" not in model.layers[0]
    assert model(mx.ones((2, 128))).shape == (2, 32)


@pytest.mark.parametrize("mode", ["nvfp4", "mxfp8"])
def test_qqlinear_follows_mlx(mode):
    mlx = _mlx()
    import mlx.nn as mnn
    from mlx.utils import tree_flatten as mlx_flatten

    rng = np.random.default_rng(16)
    w = random_weights(rng, (32, 64), 1.0)
    ml = mnn.Linear(64, 32, bias=False)
    ml.update({"weight": mlx.array(w)})
    kl = nn.Linear(64, 32, bias=False)
    kl.update({"weight": mx.array(w)})
    mq, kq = mnn.QQLinear.from_linear(ml, mode=mode), nn.QQLinear.from_linear(kl, mode=mode)
    assert repr(kq) == repr(mq) and kq.training and list(kq) == ["weight"]
    # eval(): stored quantized, as MLX's
    model = nn.Sequential(kq)
    model.eval()
    mq.eval()
    assert repr(kq) == repr(mq) and not kq.training
    kp, mp = dict(tree_flatten(kq.parameters())), dict(mlx_flatten(mq.parameters()))
    assert sorted(kp) == sorted(mp) == ["scales", "weight"]
    for name in mp:
        np.testing.assert_array_equal(np.array(kp[name]), np.array(mp[name]))
    x = random_weights(rng, (1, 64), 1.0)
    np.testing.assert_array_equal(np.array(kq(mx.array(x))), np.array(mq(mlx.array(x))))
    # train(): dequantized (bfloat16), gradients reach the weight
    model.train()
    mq.train()
    assert kq.weight.dtype == mx.bfloat16 and list(kq) == ["weight"]
    np.testing.assert_array_equal(np_of(kq.weight), np_of(mq.weight))
    kq.weight = kq.weight.astype(mx.float32)
    xs = mx.array(random_weights(rng, (4, 64), 1.0))
    _, grads = nn.value_and_grad(kq, lambda m, a: (m(a) ** 2).sum())(kq, xs)
    assert grads["weight"].shape == (32, 64) and float(mx.abs(grads["weight"]).sum()) > 0


def test_qqlinear_errors():
    with pytest.raises(NotImplementedError, match="bias"):
        nn.QQLinear.from_linear(nn.Linear(32, 8))
    with pytest.raises(ValueError, match="Invalid quantization mode"):
        nn.QQLinear(32, 8, mode="fp2")
    with pytest.raises(ValueError, match="requires group size 16"):
        nn.QQLinear(32, 8, group_size=32).eval()
    layer = nn.QQLinear(64, 8)
    assert repr(layer) == "QQLinear(input_dims=64, output_dims=8, group_size=16, bits=4, mode=nvfp4)"
    layer.eval()
    layer.eval()  # twice is once
    assert layer.weight.dtype == mx.uint32 and layer(mx.ones((2, 64))).shape == (2, 8)
