"""mx.fft on the GPU (cuFFT): fft, ifft, rfft, irfft and their 2-d / n-d forms over odd,
prime and power-of-two sizes, `n`/`s` padding and truncation, any axes, batches, strided
inputs, empty arrays, inside compile; each result against the CPU and numpy.

Skipped (with the reason) where no GPU is available; run on the GPU machine with
`python -m pytest tests/python/test_gpu_fft.py`."""

import numpy as np
import pytest

import kiln.core as mx

pytestmark = pytest.mark.skipif(
    not mx.is_available(mx.gpu), reason="no GPU is available on this machine"
)

RNG = np.random.default_rng(5)


def rand(shape, cplx=True):
    x = RNG.standard_normal(shape).astype(np.float32)
    if cplx:
        x = (x + 1j * RNG.standard_normal(shape).astype(np.float32)).astype(np.complex64)
    return x


def run(fn, x, device):
    with mx.stream(device):
        out = fn(mx.array(x))
        mx.eval(out)
    return np.array(out)


def close(got, want, tol=1e-4):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale)


def check(fn, ref, x, tol=1e-4):
    """fn on the GPU equals fn on the CPU and numpy's ref."""
    g = run(fn, x, mx.gpu)
    c = run(fn, x, mx.cpu)
    assert g.dtype == c.dtype
    close(g, c, tol)
    close(g, ref(x), tol)


SIZES = [1, 2, 5, 7, 8, 13, 16, 30, 97, 128, 1000]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("name", ["fft", "ifft"])
def test_complex_one_axis(name, n):
    x = rand((3, n))
    check(lambda a: getattr(mx.fft, name)(a), lambda a: getattr(np.fft, name)(a), x)


@pytest.mark.parametrize("n", SIZES)
def test_real_one_axis(n):
    x = rand((4, n), cplx=False)
    check(mx.fft.rfft, np.fft.rfft, x)
    spec = np.fft.rfft(x).astype(np.complex64)
    check(lambda a: mx.fft.irfft(a, n=n), lambda a: np.fft.irfft(a, n=n), spec)


@pytest.mark.parametrize("n", [1, 3, 8, 11, 20])
@pytest.mark.parametrize("name", ["fft", "ifft", "rfft", "irfft"])
def test_n_pads_and_truncates(name, n):
    x = rand((5, 9), cplx=name != "rfft")
    check(lambda a: getattr(mx.fft, name)(a, n=n), lambda a: getattr(np.fft, name)(a, n=n), x)


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2])
@pytest.mark.parametrize("name", ["fft", "ifft", "rfft", "irfft"])
def test_axes_of_a_batch(name, axis):
    x = rand((6, 7, 10), cplx=name != "rfft")
    check(
        lambda a: getattr(mx.fft, name)(a, axis=axis),
        lambda a: getattr(np.fft, name)(a, axis=axis),
        x,
    )


def test_irfft_ignores_dc_and_nyquist_imaginary_parts():
    """A spectrum that is not Hermitian: the result is the real part of the extended
    inverse, as on the CPU and in numpy (DC and Nyquist imaginary parts drop out)."""
    for n in [8, 9, 2]:
        spec = rand((3, n // 2 + 1))
        check(lambda a: mx.fft.irfft(a, n=n), lambda a: np.fft.irfft(a, n=n), spec)


@pytest.mark.parametrize(
    "name, s, axes",
    [
        ("fft2", None, None),
        ("ifft2", (5, 4), None),
        ("fftn", None, None),
        ("fftn", (3, 8, 2), (0, 2, 1)),
        ("ifftn", None, (0, 2)),
        ("rfft2", None, None),
        ("rfft2", (6, 7), (0, 2)),
        ("irfft2", None, None),
        ("irfft2", (4, 9), None),
        ("rfftn", None, None),
        ("rfftn", (2, 5, 6), (0, 1, 2)),
        ("irfftn", None, (0, 1)),
        ("irfftn", (4, 6, 10), (0, 1, 2)),
    ],
)
def test_two_and_n_dims(name, s, axes):
    x = rand((4, 6, 10), cplx=not name.startswith("rfft"))
    kw = {k: v for k, v in (("s", s), ("axes", axes)) if v is not None}
    check(lambda a: getattr(mx.fft, name)(a, **kw), lambda a: getattr(np.fft, name)(a, **kw), x)


@pytest.mark.parametrize("norm", ["backward", "ortho", "forward"])
@pytest.mark.parametrize("name", ["fft", "ifft", "rfft", "irfft"])
def test_norm(name, norm):
    x = rand((3, 12), cplx=name != "rfft")
    check(
        lambda a: getattr(mx.fft, name)(a, norm=norm),
        lambda a: getattr(np.fft, name)(a, norm=norm),
        x,
    )


@pytest.mark.parametrize(
    "view",
    [lambda a: a.T, lambda a: a[::-1, 1::2], lambda a: a[:, ::-3], lambda a: mx.broadcast_to(a[:1], (5, 12))],
)
@pytest.mark.parametrize("name", ["fft", "rfft", "irfft", "fft2"])
def test_strided_inputs(name, view):
    x = rand((5, 12), cplx=name != "rfft")
    g = run(lambda a: getattr(mx.fft, name)(view(a)), x, mx.gpu)
    c = run(lambda a: getattr(mx.fft, name)(view(a)), x, mx.cpu)
    close(g, c)
    close(g, getattr(np.fft, name)(np.array(view(mx.array(x)))))


def test_real_and_integer_inputs_to_complex_transforms():
    x = rand((4, 9), cplx=False)
    check(mx.fft.fft, np.fft.fft, x)
    i = RNG.integers(-5, 5, (3, 8)).astype(np.int32)
    g, c = run(mx.fft.fft, i, mx.gpu), run(mx.fft.fft, i, mx.cpu)
    close(g, c)


def test_empty_and_batches_of_one():
    """Empty batches transform nothing; length-1 axes are the identity."""
    for shape in [(0, 8), (3, 0, 4)]:
        for name in ["fft", "ifft", "rfft", "irfft"]:
            x = rand(shape, cplx=name != "rfft")
            check(lambda a: getattr(mx.fft, name)(a), lambda a: getattr(np.fft, name)(a), x)
    x = rand((1, 1, 16))
    check(mx.fft.fftn, np.fft.fftn, x)


def test_large_batch_and_long_axis():
    x = rand((64, 4096))
    check(mx.fft.fft, np.fft.fft, x, tol=5e-4)
    y = rand((3, 65537), cplx=False)  # a prime length
    check(mx.fft.rfft, np.fft.rfft, y, tol=5e-4)


def test_inside_compile_and_graph_replays():
    def f(x):
        spec = mx.fft.rfft(x, axis=-1)
        return mx.fft.irfft(spec * mx.conjugate(spec), n=x.shape[-1]), mx.abs(mx.fft.fft2(x))

    compiled = mx.compile(f)
    for _ in range(5):  # lazy, direct, capture, replays
        x = rand((6, 20), cplx=False)
        with mx.stream(mx.gpu):
            got = compiled(mx.array(x))
            mx.eval(got)
        want = [run(lambda a: f(a)[k], x, mx.cpu) for k in range(2)]
        for g, w in zip(got, want):
            close(np.array(g), w)


def test_fft_runs_on_the_gpu(capfd, monkeypatch):
    monkeypatch.setenv("KILN_LOG", "gpu")
    run(lambda a: mx.fft.irfft(mx.fft.rfft(a)) + mx.real(mx.fft.ifft(mx.fft.fft(a))), rand((4, 8), False), mx.gpu)
    err = capfd.readouterr().err
    assert "fft has no GPU kernel" not in err, err
