"""mx.fft against np.fft: one-axis, 2-d and n-d transforms (complex and real) with `n`/`s`
padding and truncation, `axes` in any order, `norm`, strided inputs, real/integer/complex
inputs; frequency grids, shifts, and MLX's errors. eig/eigvals of mx.linalg by their
definition (A v = w v)."""

import kiln.core as mx
import numpy as np
import pytest

C = np.complex64


def rand(rng, shape, complex_=True):
    x = rng.standard_normal(shape).astype(np.float32)
    if complex_:
        x = (x + 1j * rng.standard_normal(shape).astype(np.float32)).astype(C)
    return x


def close(got, want, tol=1e-4):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale)


ONE = [
    ("fft", True, None),
    ("fft", True, 5),
    ("fft", True, 12),
    ("ifft", True, None),
    ("ifft", True, 3),
    ("rfft", False, None),
    ("rfft", False, 6),
    ("rfft", False, 11),
    ("irfft", True, None),
    ("irfft", True, 9),
    ("irfft", True, 4),
]


@pytest.mark.parametrize("name,cplx,n", ONE)
@pytest.mark.parametrize("shape,axis", [((8,), -1), ((3, 7), 0), ((3, 7), 1), ((2, 3, 5), 1)])
def test_one_axis(name, cplx, n, shape, axis, device):
    x = rand(np.random.default_rng(0), shape, cplx)
    want = getattr(np.fft, name)(x, n=n, axis=axis)
    got = getattr(mx.fft, name)(mx.array(x), n=n, axis=axis)
    assert got.dtype == (mx.float32 if name == "irfft" else mx.complex64)
    close(got, want)


@pytest.mark.parametrize("norm", ["backward", "ortho", "forward"])
@pytest.mark.parametrize("name", ["fft", "ifft", "rfft", "irfft", "fftn", "irfftn"])
def test_norm(name, norm, device):
    cplx = name not in ("rfft",)
    x = rand(np.random.default_rng(1), (4, 6), cplx)
    close(getattr(mx.fft, name)(mx.array(x), norm=norm), getattr(np.fft, name)(x, norm=norm))


ND = [
    (None, None),
    (None, [0]),
    (None, [1, 0]),
    ([3, 4], [0, 2]),
    ([5, 2], [2, 0]),
    ([4, 6, 2], [0, 1, 2]),
    ([2], [-1]),
]


@pytest.mark.parametrize("name", ["fftn", "ifftn", "rfftn", "irfftn"])
@pytest.mark.parametrize("s,axes", ND)
def test_n_dims(name, s, axes, device):
    cplx = name != "rfftn"
    x = rand(np.random.default_rng(2), (3, 4, 5), cplx)
    if name == "irfftn" and s is None and axes == [1, 0]:
        # numpy's irfftn with axes [1, 0] halves axis 0 too (the last of `axes`), as MLX
        pass
    want = getattr(np.fft, name)(x, s=s, axes=axes)
    got = getattr(mx.fft, name)(mx.array(x), s=s, axes=axes)
    close(got, want)


@pytest.mark.parametrize("name", ["fft2", "ifft2", "rfft2", "irfft2"])
@pytest.mark.parametrize("s", [None, [3, 6]])
def test_two_dims(name, s, device):
    cplx = name != "rfft2"
    x = rand(np.random.default_rng(3), (2, 4, 5), cplx)
    close(getattr(mx.fft, name)(mx.array(x), s=s), getattr(np.fft, name)(x, s=s))


def test_views_and_input_dtypes(device):
    rng = np.random.default_rng(4)
    x = rand(rng, (6, 5))
    a = mx.array(np.ascontiguousarray(x.T))
    close(mx.fft.fft(mx.transpose(a), axis=0), np.fft.fft(x, axis=0))
    close(mx.fft.fft2(mx.array(x)[::-1, ::2]), np.fft.fft2(x[::-1, ::2]))
    i = np.arange(10, dtype=np.int32)
    got = mx.fft.fft(mx.array(i))
    assert got.dtype == mx.complex64
    close(got, np.fft.fft(i))
    close(mx.fft.rfft(mx.array(i, dtype=mx.float16)), np.fft.rfft(i))
    # rfft of a complex input keeps the real part; irfft of a real input is complex
    close(mx.fft.rfft(mx.array(x)), np.fft.rfft(x.real))
    close(mx.fft.irfft(mx.array(x.real)), np.fft.irfft(x.real.astype(C)))
    # large prime and power-of-two lengths
    for n in [97, 256]:
        y = rand(rng, (n,))
        close(mx.fft.fft(mx.array(y)), np.fft.fft(y), tol=1e-3)
        close(mx.fft.ifft(mx.fft.fft(mx.array(y))), y, tol=1e-4)


def test_empty_axes_and_batches(device):
    x = rand(np.random.default_rng(5), (0, 4))
    got = mx.fft.fft(mx.array(x), axis=1)
    assert got.shape == (0, 4) and got.dtype == mx.complex64
    for name in ["rfft", "irfft", "fft"]:
        z = np.zeros((3, 0), dtype=np.float32)
        close(getattr(mx.fft, name)(mx.array(z), axis=0), getattr(np.fft, name)(z, axis=0))
    close(mx.fft.rfftn(mx.zeros((2, 0, 3)), axes=[0, 2]), np.fft.rfftn(np.zeros((2, 0, 3)), axes=[0, 2]))
    r = np.arange(6, dtype=np.float32).reshape(2, 3)
    same = mx.fft.fftn(mx.array(r), axes=[])
    assert same.dtype == mx.float32 and np.array(same).tolist() == r.tolist()


def test_errors(device):
    x = mx.zeros((3, 4))
    with pytest.raises(ValueError):
        mx.fft.fft(x, n=0)
    with pytest.raises(ValueError):
        mx.fft.fft(x, n=-1)
    with pytest.raises(IndexError):
        mx.fft.fft(x, axis=2)
    with pytest.raises(IndexError):
        mx.fft.fft(mx.array(1.0))
    with pytest.raises(ValueError):
        mx.fft.fftn(mx.array(1.0))
    with pytest.raises(ValueError):
        mx.fft.fftn(x, s=[2, 3])  # s without axes
    with pytest.raises(ValueError):
        mx.fft.fftn(x, s=[2, 3], axes=[0])
    with pytest.raises(ValueError):
        mx.fft.fftn(x, axes=[0, 0])
    with pytest.raises(ValueError):
        mx.fft.fft(mx.zeros((0,)))
    with pytest.raises(ValueError):
        mx.fft.fft(x, norm="bad")
    with pytest.raises(IndexError):
        mx.fft.fft2(mx.zeros((3,)))


# ---- the GPU's plans (cuFFT): sizes, padding, axes, batches, views, compile -------------

SIZES = [1, 2, 5, 7, 8, 13, 16, 30, 97, 128, 1000]  # odd, prime and powers of two


def check(fn, ref, x, tol=1e-4):
    close(fn(mx.array(x)), ref(x), tol)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("name", ["fft", "ifft"])
def test_complex_sizes(name, n, device):
    x = rand(np.random.default_rng(n), (3, n))
    check(getattr(mx.fft, name), getattr(np.fft, name), x)


@pytest.mark.parametrize("n", SIZES)
def test_real_sizes(n, device):
    x = rand(np.random.default_rng(n), (4, n), False)
    check(mx.fft.rfft, np.fft.rfft, x)
    spec = np.fft.rfft(x).astype(C)
    check(lambda a: mx.fft.irfft(a, n=n), lambda a: np.fft.irfft(a, n=n), spec)


@pytest.mark.parametrize("n", [1, 3, 8, 11, 20])
@pytest.mark.parametrize("name", ["fft", "ifft", "rfft", "irfft"])
def test_n_pads_and_truncates(name, n, device):
    x = rand(np.random.default_rng(n), (5, 9), name != "rfft")
    check(lambda a: getattr(mx.fft, name)(a, n=n), lambda a: getattr(np.fft, name)(a, n=n), x)


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2])
@pytest.mark.parametrize("name", ["fft", "ifft", "rfft", "irfft"])
def test_axes_of_a_batch(name, axis, device):
    x = rand(np.random.default_rng(9), (6, 7, 10), name != "rfft")
    check(lambda a: getattr(mx.fft, name)(a, axis=axis),
          lambda a: getattr(np.fft, name)(a, axis=axis), x)


def test_irfft_ignores_dc_and_nyquist_imaginary_parts(device):
    """A spectrum that is not Hermitian: the result is the real part of the extended
    inverse, as in numpy (DC and Nyquist imaginary parts drop out)."""
    for n in [8, 9, 2]:
        spec = rand(np.random.default_rng(n), (3, n // 2 + 1))
        check(lambda a: mx.fft.irfft(a, n=n), lambda a: np.fft.irfft(a, n=n), spec)


@pytest.mark.parametrize(
    "name, s, axes",
    [
        ("fft2", None, None), ("ifft2", (5, 4), None), ("fftn", None, None),
        ("fftn", (3, 8, 2), (0, 2, 1)), ("ifftn", None, (0, 2)), ("rfft2", None, None),
        ("rfft2", (6, 7), (0, 2)), ("irfft2", None, None), ("irfft2", (4, 9), None),
        ("rfftn", None, None), ("rfftn", (2, 5, 6), (0, 1, 2)), ("irfftn", None, (0, 1)),
        ("irfftn", (4, 6, 10), (0, 1, 2)),
    ],
)  # fmt: skip
def test_two_and_n_dims_of_a_batch(name, s, axes, device):
    x = rand(np.random.default_rng(10), (4, 6, 10), not name.startswith("rfft"))
    kw = {k: v for k, v in (("s", s), ("axes", axes)) if v is not None}
    check(lambda a: getattr(mx.fft, name)(a, **kw), lambda a: getattr(np.fft, name)(a, **kw), x)


@pytest.mark.parametrize(
    "view",
    [lambda a: a.T, lambda a: a[::-1, 1::2], lambda a: a[:, ::-3],
     lambda a: mx.broadcast_to(a[:1], (5, 12))],
    ids=["transposed", "reversed", "stepped", "broadcast"],
)
@pytest.mark.parametrize("name", ["fft", "rfft", "irfft", "fft2"])
def test_strided_inputs(name, view, device):
    x = rand(np.random.default_rng(11), (5, 12), name != "rfft")
    close(getattr(mx.fft, name)(view(mx.array(x))), getattr(np.fft, name)(np.array(view(mx.array(x)))))


def test_empty_batches_and_batches_of_one(device):
    """Empty batches transform nothing; length-1 axes are the identity."""
    rng = np.random.default_rng(12)
    for shape in [(0, 8), (3, 0, 4)]:
        for name in ["fft", "ifft", "rfft", "irfft"]:
            x = rand(rng, shape, name != "rfft")
            check(getattr(mx.fft, name), getattr(np.fft, name), x)
    check(mx.fft.fftn, np.fft.fftn, rand(rng, (1, 1, 16)))


def test_large_batch_and_long_prime_axis(device):
    rng = np.random.default_rng(13)
    check(mx.fft.fft, np.fft.fft, rand(rng, (64, 4096)), tol=5e-4)
    check(mx.fft.rfft, np.fft.rfft, rand(rng, (3, 65537), False), tol=5e-4)  # a prime length


def test_inside_compile_and_replays(device):
    def f(x):
        spec = mx.fft.rfft(x, axis=-1)
        return mx.fft.irfft(spec * mx.conjugate(spec), n=x.shape[-1]), mx.abs(mx.fft.fft2(x))

    compiled = mx.compile(f)
    rng = np.random.default_rng(14)
    for _ in range(5):  # lazy, direct, then (on the GPU) a graph capture and replays
        x = rand(rng, (6, 20), False)
        got = compiled(mx.array(x))
        spec = np.fft.rfft(x, axis=-1)
        close(got[0], np.fft.irfft(spec * np.conjugate(spec), n=20))
        close(got[1], np.abs(np.fft.fft2(x)))


def test_frequencies_and_shifts():
    for n, d in [(1, 1.0), (5, 0.5), (8, 0.1)]:
        close(mx.fft.fftfreq(n, d), np.fft.fftfreq(n, d).astype(np.float32), tol=1e-6)
        close(mx.fft.rfftfreq(n, d), np.fft.rfftfreq(n, d).astype(np.float32), tol=1e-6)
    assert mx.fft.fftfreq(4).dtype == mx.float32
    with pytest.raises(ValueError):
        mx.fft.fftfreq(0)
    x = np.arange(15, dtype=np.float32).reshape(3, 5)
    for axes in [None, 0, [1], [0, 1], (-1,)]:
        np.testing.assert_array_equal(np.array(mx.fft.fftshift(mx.array(x), axes=axes)), np.fft.fftshift(x, axes=axes))
        np.testing.assert_array_equal(np.array(mx.fft.ifftshift(mx.array(x), axes=axes)), np.fft.ifftshift(x, axes=axes))
    with pytest.raises(IndexError):
        mx.fft.fftshift(mx.array(x), axes=[3])


# ---- mx.linalg.eig / eigvals ---------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64"])
@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (4, 4), (2, 3, 3)])
def test_eig(dtype, shape):
    rng = np.random.default_rng(6)
    x = rand(rng, shape, dtype == "complex64")
    a = mx.array(x, dtype=getattr(mx, dtype))
    w, v = mx.linalg.eig(a, stream=mx.cpu)
    assert w.dtype == mx.complex64 and v.dtype == mx.complex64
    assert w.shape == shape[:-1] and v.shape == shape
    wn, vn = np.array(w).astype(np.complex128), np.array(v).astype(np.complex128)
    xa = x.astype(np.complex128)
    # A v = v diag(w), unit columns
    np.testing.assert_allclose(xa @ vn, vn * wn[..., None, :], atol=1e-4 * max(1, np.abs(xa).max()) * 10)
    np.testing.assert_allclose(np.linalg.norm(vn, axis=-2), 1, atol=1e-5)
    want = np.linalg.eigvals(xa).reshape(-1, shape[-1])
    got = np.array(mx.linalg.eigvals(a)).astype(np.complex128).reshape(-1, shape[-1])
    same_multiset(got, want)
    same_multiset(wn.reshape(-1, shape[-1]), want)


def same_multiset(got, want, tol=1e-4):
    """Each row of eigenvalues equals numpy's up to order (greedy nearest matching)."""
    for g, w in zip(got, want):
        left = list(g)
        for v in w:
            i = int(np.argmin([abs(v - u) for u in left]))
            assert abs(v - left.pop(i)) < tol * max(1, abs(v)), (g, w)


def test_eig_real_pairs_and_errors():
    a = mx.array([[1.0, 2], [-3, 4]])
    w = np.array(mx.linalg.eigvals(a))
    same_multiset([w], [np.linalg.eigvals(np.array([[1.0, 2], [-3, 4]]))])
    assert w[0] == np.conj(w[1])
    assert mx.linalg.eigvals(mx.zeros((2, 0, 0))).shape == (2, 0)
    for bad in [mx.array([1.0, 2]), mx.array([[1, 2], [3, 4]]), mx.ones((2, 3))]:
        with pytest.raises(ValueError):
            mx.linalg.eig(bad)
