"""The CUDA backend itself: the GPU is the default device and says what it is, float64 is a
clear error there, the memory limit holds, and the work of a training step, of complex64
programs, FFTs and mx.fast stays on the GPU (KILN_LOG=gpu names every op that falls back to
the CPU) unless KILN_CUDA_COMPLEX=0 sends complex work to the CPU. What the GPU computes is
tested with the CPU tests, parametrised by device (`-m gpu` selects the GPU's half).

Skipped (with the reason) where no GPU is available."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kiln.core as mx
from conftest import GPU_ONLY

pytestmark = GPU_ONLY

RNG = np.random.default_rng(7)


def rand(shape, dtype=mx.float32, lo=-3.0, hi=3.0):
    return mx.array(RNG.uniform(lo, hi, size=shape).astype(np.float32)).astype(dtype)


def crand(shape):
    re = RNG.uniform(-2, 2, size=shape).astype(np.float32)
    im = RNG.uniform(-2, 2, size=shape).astype(np.float32)
    return (re + 1j * im).astype(np.complex64)


def test_default_device_is_gpu_and_info():
    assert mx.default_device() == mx.gpu
    info = mx.device_info(mx.gpu)
    assert info["architecture"].startswith("sm_")
    assert mx.device_count(mx.gpu) == 1


def test_float64_is_a_clear_error_on_the_gpu():
    x = mx.array([1.0, 2.0], dtype=mx.float64)
    with pytest.raises(ValueError, match="float64"):
        with mx.stream(mx.gpu):
            y = mx.exp(x)
        mx.eval(y)
    with mx.stream(mx.cpu):
        assert float(mx.exp(x)[0]) == pytest.approx(np.e)


def test_memory_limit_is_enforced_on_the_gpu():
    with mx.stream(mx.gpu):
        old = mx.set_memory_limit(1 << 20)
        try:
            with pytest.raises(RuntimeError, match="memory"):
                mx.eval(mx.ones((1 << 22,)) + 1)
        finally:
            mx.set_memory_limit(old)


def test_train_step_ops_stay_on_the_gpu(capfd, monkeypatch):
    monkeypatch.setenv("KILN_LOG", "gpu")
    w = rand((64, 16))
    ids = mx.array(RNG.integers(0, 64, size=(4, 9)))

    def loss(w):
        h = w[ids]
        h = mx.concatenate([h[:, :1], h[:, 1:] * 2], axis=1)
        logits = h @ w.T
        return mx.mean(mx.logsumexp(logits, axis=-1) - mx.take_along_axis(logits, ids[..., None], -1)[..., 0])

    with mx.stream(mx.gpu):
        mx.eval(mx.value_and_grad(loss)(w))
    err = capfd.readouterr().err
    for op in ("gather", "scatter", "concatenate", "slice_update"):
        assert f" {op} has no GPU kernel" not in err, err


def test_complex_ops_stay_on_the_gpu(capfd, monkeypatch):
    monkeypatch.setenv("KILN_LOG", "gpu")
    z, x = mx.array(crand((8, 8))), mx.array(RNG.standard_normal((8, 8)).astype(np.float32))

    def f(z, x):
        w = mx.sqrt(z) / (z + x) - mx.log(z) * 1j
        return mx.sum(w, axis=1), mx.abs(w), mx.imag(w), w[1:3].T

    with mx.stream(mx.gpu):
        mx.eval(f(z, x))
        mx.eval(mx.compile(f)(z, x))
    err = capfd.readouterr().err
    assert "has no GPU kernel" not in err, err


def test_shapeless_mean_stays_on_the_gpu(capfd, monkeypatch):
    """NumberOfElements runs on the GPU: shapeless compiled mean/var need no CPU node."""
    monkeypatch.setenv("KILN_LOG", "gpu")
    f = mx.compile(lambda x: (mx.mean(x, axis=0), mx.var(x)), shapeless=True)
    with mx.stream(mx.gpu):
        for n in [3, 5, 8, 5]:
            x = RNG.standard_normal((n, 4)).astype(np.float32)
            m, v = f(mx.array(x))
            np.testing.assert_allclose(np.array(m), x.mean(axis=0), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(np.array(v), x.var(), rtol=1e-4, atol=1e-6)
    assert "number_of_elements has no GPU kernel" not in capfd.readouterr().err


def test_fft_runs_on_the_gpu(capfd, monkeypatch):
    monkeypatch.setenv("KILN_LOG", "gpu")
    a = rand((4, 8))
    with mx.stream(mx.gpu):
        mx.eval(mx.fft.irfft(mx.fft.rfft(a)) + mx.real(mx.fft.ifft(mx.fft.fft(a))))
    err = capfd.readouterr().err
    assert "fft has no GPU kernel" not in err, err


def test_fast_ops_forward_and_gradients_stay_on_the_gpu(capfd, monkeypatch):
    monkeypatch.setenv("KILN_LOG", "gpu")
    x, w = rand((4, 128), mx.bfloat16), rand((128,), mx.bfloat16)
    q, k, v = (rand(s, mx.bfloat16) for s in ((1, 4, 20, 64), (1, 2, 30, 64), (1, 2, 30, 64)))

    def loss(x, q, k, v):
        h = mx.fast.layer_norm(mx.fast.rms_norm(x, w, 1e-5), w, w, 1e-5)
        r = mx.fast.rope(q, 32, traditional=True, base=1e4, scale=1.0, offset=mx.array([5]))
        a = mx.fast.scaled_dot_product_attention(r, k, v, scale=0.1, mask="causal")
        return mx.sum(h.astype(mx.float32)) + mx.sum(a.astype(mx.float32))

    with mx.stream(mx.gpu):
        mx.eval(mx.value_and_grad(loss, argnums=(0, 1, 2, 3))(x, q, k, v))
    err = capfd.readouterr().err
    assert "runs on the CPU" not in err, err


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
    """In a fresh process (the fallback note is printed once per op): no complex product,
    sort, arg reduction or scan falls back to the CPU, and KILN_CUDA_COMPLEX=0 sends them
    all there."""
    env = dict(os.environ, KILN_LOG="gpu")
    env["KILN_CUDA_COMPLEX"] = "1" if complex_on_gpu else "0"
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stderr.splitlines() if "has no GPU kernel" in line]
    if complex_on_gpu:
        assert lines == [], out.stderr
    else:
        names = {line.split()[1] for line in lines}
        assert {"matmul", "sort", "argmax", "cumsum"} <= names, out.stderr
