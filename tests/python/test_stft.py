"""fft.stft and fft.istft: against numpy references (framing loops, np.fft, explicit
overlap-add), round trips, gradients and compile, and against MLX over arguments, shapes,
dtypes and errors."""

import kiln.core as mx
import numpy as np
import pytest

RNG = np.random.default_rng(5)


def _full_window(window, win_length, n_fft):
    w = np.ones(n_fft if win_length is None else win_length) if window is None else window
    left = (n_fft - len(w)) // 2
    out = np.zeros(n_fft)
    out[left : left + len(w)] = w
    return out


def stft_ref(
    x,
    n_fft=2048,
    hop=None,
    win_length=None,
    window=None,
    center=True,
    pad_mode="reflect",
    norm="backward",
    onesided=None,
):
    hop = hop or n_fft // 4
    w = _full_window(window, win_length, n_fft)
    if onesided is None:
        onesided = not np.iscomplexobj(x)
    if onesided:
        x = x.real
    if center:
        x = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(n_fft // 2, n_fft // 2)], mode=pad_mode)
    count = 1 + (x.shape[-1] - n_fft) // hop
    frames = np.stack([x[..., f * hop : f * hop + n_fft] * w for f in range(count)], -2)
    spec = (np.fft.rfft if onesided else np.fft.fft)(frames, axis=-1, norm=norm)
    return np.swapaxes(spec, -1, -2)


def istft_ref(
    s,
    n_fft=None,
    hop=None,
    win_length=None,
    window=None,
    center=True,
    norm="backward",
    onesided=True,
    length=None,
):
    n_freq, count = s.shape[-2:]
    n_fft = n_fft or (2 * (n_freq - 1) if onesided else n_freq)
    hop = hop or n_fft // 4
    w = _full_window(window, win_length, n_fft)
    spec = np.swapaxes(s, -1, -2)
    if onesided:
        frames = np.fft.irfft(spec, n=n_fft, axis=-1, norm=norm)
    else:
        frames = np.fft.ifft(spec, n=n_fft, axis=-1, norm=norm).real
    total = n_fft + hop * (count - 1)
    y = np.zeros(s.shape[:-2] + (total,))
    env = np.zeros(total)
    for f in range(count):
        y[..., f * hop : f * hop + n_fft] += frames[..., f, :] * w
        env[f * hop : f * hop + n_fft] += w * w
    y = y / np.maximum(env, 1e-8)
    start = n_fft // 2 if center else 0
    if length is None:
        return y[..., start : total - start]
    y = y[..., start : start + length]
    return np.concatenate([y, np.zeros(y.shape[:-1] + (length - y.shape[-1],))], -1)


HANN = np.hanning(12).astype(np.float32)

STFT_CASES = [
    ((100,), dict(n_fft=16)),
    ((100,), dict(n_fft=16, center=False)),
    ((90,), dict(n_fft=15, hop_length=4, win_length=10)),
    ((64,), dict(n_fft=16, window=HANN, pad_mode="edge", norm="ortho")),
    ((64,), dict(n_fft=20, hop_length=3, pad_mode="constant", norm="forward", onesided=False)),
    ((2, 3, 40), dict(n_fft=8)),
    ((5,), dict(n_fft=16)),  # reflect padding longer than the input repeats the reflection
    ((256,), dict()),  # the defaults: n_fft 2048, reflected far beyond the input
]


def _kw_ref(kw):
    names = {"hop_length": "hop"}
    return {names.get(k, k): v for k, v in kw.items()}


@pytest.mark.parametrize("shape,kw", STFT_CASES)
def test_stft_matches_numpy(shape, kw):
    x = RNG.standard_normal(shape).astype(np.float32)
    args = {k: (mx.array(v) if k == "window" else v) for k, v in kw.items()}
    got = mx.fft.stft(mx.array(x), **args)
    ref = stft_ref(x.astype(np.float64), **_kw_ref(kw))
    assert got.dtype == mx.complex64 and got.shape == ref.shape
    np.testing.assert_allclose(np.array(got), ref, rtol=1e-4, atol=1e-4)


def test_stft_complex_input_and_defaults():
    x = (RNG.standard_normal(80) + 1j * RNG.standard_normal(80)).astype(np.complex64)
    full = mx.fft.stft(mx.array(x), n_fft=16)
    assert full.shape == (16, 21)  # complex input: both sides by default
    np.testing.assert_allclose(np.array(full), stft_ref(x, 16), rtol=1e-4, atol=1e-4)
    half = mx.fft.stft(mx.array(x), n_fft=16, onesided=True)  # the real part's spectrum
    np.testing.assert_allclose(np.array(half), stft_ref(x.real, 16), rtol=1e-4, atol=1e-4)
    y = RNG.standard_normal(3000).astype(np.float32)
    d = mx.fft.stft(mx.array(y))  # n_fft 2048, hop 512
    assert d.shape == (1025, 1 + 3000 // 512)
    ints = mx.fft.stft(mx.arange(40), n_fft=8)
    np.testing.assert_allclose(np.array(ints), stft_ref(np.arange(40.0), 8), rtol=1e-4, atol=1e-3)


ISTFT_CASES = [
    dict(),
    dict(n_fft=16, hop_length=3),
    dict(n_fft=17, hop_length=5, center=False),
    dict(n_fft=20, norm="ortho", length=50),
    dict(n_fft=12, norm="forward", length=200),
    dict(onesided=False, hop_length=2),
    dict(onesided=False, n_fft=6),
    dict(window=np.hanning(13).astype(np.float32), hop_length=3),
    dict(win_length=7, hop_length=3, center=False, length=30),
    dict(n_fft=12, hop_length=7),  # gaps between frames stay zero
    dict(window=np.full(16, 1e-5, np.float32)),  # an envelope below the 1e-8 floor
]


@pytest.mark.parametrize("kw", ISTFT_CASES)
def test_istft_matches_numpy(kw):
    s = (RNG.standard_normal((2, 9, 20)) + 1j * RNG.standard_normal((2, 9, 20))).astype(
        np.complex64
    )
    args = {k: (mx.array(v) if k == "window" else v) for k, v in kw.items()}
    got = mx.fft.istft(mx.array(s), **args)
    ref = istft_ref(s.astype(np.complex128), **_kw_ref(kw))
    assert got.dtype == mx.float32 and got.shape == ref.shape
    np.testing.assert_allclose(np.array(got), ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("n_fft,hop", [(16, 4), (15, 5), (32, 8)])
def test_round_trip(n_fft, hop):
    x = RNG.standard_normal((3, 130)).astype(np.float32)
    w = mx.array(np.hanning(n_fft + 2)[1:-1].astype(np.float32))  # no zero ends
    s = mx.fft.stft(mx.array(x), n_fft=n_fft, hop_length=hop, window=w)
    y = mx.fft.istft(s, n_fft=n_fft, hop_length=hop, window=w, length=130)
    np.testing.assert_allclose(np.array(y), x, rtol=1e-4, atol=1e-5)


def test_gradient_and_compile():
    x = mx.array(RNG.standard_normal(60).astype(np.float32))
    w = mx.array(np.hanning(16).astype(np.float32))

    def loss(t):
        s = mx.fft.stft(t, n_fft=16, hop_length=4, window=w)
        return mx.sum(mx.abs(s) ** 2) + mx.sum(mx.fft.istft(s * 0.5, window=w, length=60))

    eager = loss(x)
    np.testing.assert_allclose(mx.compile(loss)(x).item(), eager.item(), rtol=1e-5)
    g = mx.grad(loss)(x)
    # Central differences in float64 through the numpy references.
    xn = np.array(x).astype(np.float64)
    wn = np.hanning(16)

    def ref_loss(t):
        s = stft_ref(t, 16, 4, window=wn)
        return np.sum(np.abs(s) ** 2) + np.sum(istft_ref(s * 0.5, window=wn, length=60))

    num = np.array([(ref_loss(xn + e) - ref_loss(xn - e)) / 2e-4 for e in np.eye(60) * 1e-4])
    np.testing.assert_allclose(np.array(g), num, rtol=1e-3, atol=1e-3)


def test_errors():
    x = mx.zeros((40,))
    s = mx.zeros((9, 4), mx.complex64)
    bad = [
        (lambda: mx.fft.stft(x, n_fft=0), "n_fft must be positive"),
        (lambda: mx.fft.stft(x, n_fft=3), "hop_length must be positive"),
        (lambda: mx.fft.stft(x, n_fft=8, win_length=9), "window length"),
        (lambda: mx.fft.stft(x, n_fft=8, window=mx.ones((2, 4))), "one-dimensional"),
        (lambda: mx.fft.stft(mx.array(1.0), n_fft=8), "at least one dimension"),
        (lambda: mx.fft.stft(x[:7], n_fft=8, center=False), "too short"),
        (lambda: mx.fft.stft(x, n_fft=8, norm="none"), "Invalid norm"),
        (lambda: mx.fft.istft(s[0]), "at least two dimensions"),
        (lambda: mx.fft.istft(mx.zeros((1, 4), mx.complex64)), "n_fft must be positive"),
        (lambda: mx.fft.istft(s, hop_length=-1), "hop_length must be positive"),
        (lambda: mx.fft.istft(s, window=mx.ones(17)), "window length"),
        (lambda: mx.fft.istft(s, norm="x"), "Invalid norm"),
        (lambda: mx.fft.istft(mx.zeros((9, 0), mx.complex64)), "frame"),
    ]
    for fn, msg in bad:
        with pytest.raises(ValueError, match=msg):
            fn()


def test_matches_mlx():
    mlx = pytest.importorskip("mlx.core")
    mlx.set_default_device(mlx.cpu)

    def run(module, fn, x, kw):
        args = {k: (module.array(v) if k == "window" else v) for k, v in kw.items()}
        try:
            return np.array(getattr(module.fft, fn)(module.array(x), **args)), None
        except ValueError as e:
            return None, type(e)

    cases = [
        ("stft", RNG.standard_normal(shape).astype(np.float32), kw) for shape, kw in STFT_CASES
    ]
    xc = (RNG.standard_normal(70) + 1j * RNG.standard_normal(70)).astype(np.complex64)
    cases += [
        ("stft", xc, dict(n_fft=16)),
        ("stft", xc, dict(n_fft=16, onesided=True)),
        ("stft", RNG.standard_normal(50).astype(np.float16), dict(n_fft=8)),
        ("stft", np.arange(30, dtype=np.int32), dict(n_fft=8, window=np.ones(4, np.float16))),
        ("stft", np.zeros(6, np.float32), dict(n_fft=8, center=False)),
        ("stft", np.zeros(6, np.float32), dict(n_fft=8, win_length=10)),
        ("stft", np.zeros(6, np.float32), dict(n_fft=8, norm="x")),
    ]
    spec = (RNG.standard_normal((3, 9, 20)) + 1j * RNG.standard_normal((3, 9, 20))).astype(
        np.complex64
    )
    cases += [("istft", spec, kw) for kw in ISTFT_CASES]
    cases += [
        ("istft", spec.real, dict(hop_length=5)),
        ("istft", spec, dict(length=-3)),
        ("istft", spec, dict(window=np.zeros(16, np.float32))),
        ("istft", spec, dict(win_length=0)),
        ("istft", spec, dict(n_fft=-2)),
        ("istft", spec, dict(win_length=20)),
    ]
    for fn, x, kw in cases:
        (a, ea), (b, eb) = run(mx, fn, x, kw), run(mlx, fn, x, kw)
        assert ea == eb, (fn, kw, ea, eb)
        if a is not None:
            assert a.dtype == b.dtype and a.shape == b.shape, (fn, kw, a.shape, b.shape)
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4, err_msg=f"{fn} {kw}")
