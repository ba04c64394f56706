"""The CUDA preamble's complex64 math (kc64 and its k_* overloads, kiln-codegen's
preamble.cu) compiled for the host with the system C++ compiler and compared bit for bit
with kiln's CPU kernels: with the same libm, every formula (special values, signed zeros,
branch cuts, Annex G division) must give the CPU's exact bits. Runs without a GPU, so a
transcription slip in the GPU's complex math is caught here; on the GPU only the float
functions themselves (sinf, expf...) may differ by an ulp or two, which the last tests
check there: every complex elementwise op of NaN / inf / signed-zero components on the GPU
against the CPU's formulas (numpy's differ from them, so it cannot be the oracle). Those
are marked gpu and skipped where no GPU is available."""

import ctypes
import json
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

import kiln.core as mx
from conftest import GPU_ONLY

PREAMBLE = pathlib.Path(__file__).resolve().parents[2] / "crates/kiln-codegen/src/preamble.cu"
CXX = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")

UNARY = {
    "negative": "-z", "exp": "k_exp(z)", "log": "k_log(z)", "log2": "k_log2(z)",
    "log10": "k_log10(z)", "log1p": "k_log1p(z)", "sqrt": "k_sqrt(z)", "rsqrt": "k_rsqrt(z)",
    "sin": "k_sin(z)", "cos": "k_cos(z)", "tan": "k_tan(z)", "tanh": "k_tanh(z)",
    "sinh": "k_sinh(z)", "cosh": "k_cosh(z)", "arcsin": "k_asin(z)", "arccos": "k_acos(z)",
    "arctan": "k_atan(z)", "arcsinh": "k_asinh(z)", "arccosh": "k_acosh(z)",
    "arctanh": "k_atanh(z)", "sign": "k_sign(z)", "round": "k_rint(z)",
}
BINARY = {
    "add": "a + b", "subtract": "a - b", "multiply": "a * b", "divide": "a / b",
    "floor_divide": "k_floor_divide(a, b)", "maximum": "k_maximum(a, b)",
    "minimum": "k_minimum(a, b)", "power": "k_power(a, b)", "logaddexp": "k_logaddexp(a, b)",
}
COMPARE = {
    "equal": "a == b", "not_equal": "a != b", "less": "a < b", "less_equal": "a <= b",
    "greater": "a > b", "greater_equal": "a >= b",
}


def host_source():
    text = PREAMBLE.read_text()
    sec = text[text.index("/* ---- complex64"):]
    # The warp shuffle overload is device-only.
    sec = sec[: sec.index("/* Warp shuffles")] + sec[sec.index("K_INLINE float k_cabs"):]
    head = (
        "#include <math.h>\n#include <cmath>\n#define K_INLINE static inline\n"
        "#define __align__(n) alignas(n)\n"
        "using std::isnan; using std::isinf; using std::isfinite; using std::signbit;\n"
    )

    def table(name, params, body, exprs):
        cases = "".join(f"case {k}: out[i] = {e}; break;\n" for k, e in enumerate(exprs))
        return (f'extern "C" void {name}({params}, long n) {{ for (long i = 0; i < n; ++i) '
                f"{{ {body} switch (op) {{\n{cases}}}}}}}\n")

    return (
        head + sec
        + table("unary", "int op, const kc64 *x, kc64 *out", "kc64 z = x[i];", UNARY.values())
        + table("binary", "int op, const kc64 *x, const kc64 *y, kc64 *out",
                "kc64 a = x[i], b = y[i];", BINARY.values())
        + table("compare", "int op, const kc64 *x, const kc64 *y, bool *out",
                "kc64 a = x[i], b = y[i];", COMPARE.values())
        + table("cabs", "int op, const kc64 *x, float *out", "kc64 z = x[i];", ["k_cabs(z)"])
    )


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    if CXX is None:
        pytest.skip("no C++ compiler")
    d = tmp_path_factory.mktemp("kc64")
    (d / "h.cpp").write_text(host_source())
    # No FMA contraction: NVRTC builds kiln's kernels with --fmad=false.
    subprocess.run([CXX, "-O2", "-ffp-contract=off", "-shared", "-fPIC", "-o",
                    str(d / "libh.so"), str(d / "h.cpp")], check=True)
    return ctypes.CDLL(str(d / "libh.so"))


PARTS = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 1e-30, 3e38, np.inf, -np.inf, np.nan]
SPECIAL = np.array([complex(r, i) for r in PARTS for i in PARTS], dtype=np.complex64)
RNG = np.random.default_rng(3)
VALUES = np.concatenate([
    SPECIAL,
    (RNG.uniform(-3, 3, 500) + 1j * RNG.uniform(-3, 3, 500)).astype(np.complex64),
    (RNG.uniform(-60, 60, 200) + 1j * RNG.uniform(-60, 60, 200)).astype(np.complex64),
])
A = np.concatenate([np.repeat(SPECIAL, SPECIAL.size), VALUES[SPECIAL.size:]])
B = np.concatenate([np.tile(SPECIAL, SPECIAL.size), VALUES[SPECIAL.size:][::-1]])


def ptr(a):
    return ctypes.c_void_p(a.ctypes.data)


def same_bits(got, want):
    g = np.ascontiguousarray(got).view(np.float32)
    w = np.ascontiguousarray(want).view(np.float32)
    ok = (g.view(np.uint32) == w.view(np.uint32)) | (np.isnan(g) & np.isnan(w))
    bad = np.where(~ok)[0][:5]
    assert ok.all(), [(i, g[i], w[i]) for i in bad]


def cpu(name, *xs):
    with mx.stream(mx.cpu):
        return np.array(getattr(mx, name)(*[mx.array(x) for x in xs]))


@pytest.mark.parametrize("k, name", list(enumerate(UNARY)))
def test_unary_bits(lib, k, name):
    out = np.empty_like(VALUES)
    lib.unary(k, ptr(VALUES), ptr(out), ctypes.c_long(VALUES.size))
    same_bits(out, cpu(name, VALUES))


@pytest.mark.parametrize("k, name", list(enumerate(BINARY)))
def test_binary_bits(lib, k, name):
    out = np.empty_like(A)
    lib.binary(k, ptr(A), ptr(B), ptr(out), ctypes.c_long(A.size))
    same_bits(out, cpu(name, A, B))


@pytest.mark.parametrize("k, name", list(enumerate(COMPARE)))
def test_comparisons(lib, k, name):
    out = np.empty(A.size, dtype=np.bool_)
    lib.compare(k, ptr(A), ptr(B), ptr(out), ctypes.c_long(A.size))
    np.testing.assert_array_equal(out, cpu(name, A, B))


def test_magnitude(lib):
    out = np.empty(VALUES.size, dtype=np.float32)
    lib.cabs(0, ptr(VALUES), ptr(out), ctypes.c_long(VALUES.size))
    same_bits(out, cpu("abs", VALUES))


# ---- on the GPU: special values against the CPU's formulas ---------------------------------

GPU_PARTS = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, np.inf, -np.inf, np.nan]
GPU_SPECIAL = np.array([complex(r, i) for r in GPU_PARTS for i in GPU_PARTS], dtype=np.complex64)
GPU_UNARY = sorted(list(UNARY) + ["abs", "square", "reciprocal", "conjugate", "real", "imag"])
GPU_BINARY = sorted(list(BINARY) + list(COMPARE))


def on(device, name, *xs):
    with mx.stream(device):
        out = getattr(mx, name)(*[mx.array(x) for x in xs])
        mx.eval(out)
    return np.array(out)


def parts(x):
    x = np.asarray(x)
    return np.stack([x.real, x.imag]) if np.iscomplexobj(x) else x


def gpu_only(test):
    for mark in GPU_ONLY:
        test = mark(test)
    return test


@gpu_only
@pytest.mark.parametrize("name", GPU_UNARY)
def test_gpu_special_values_follow_the_cpu_unary(name):
    g, c = on(mx.gpu, name, GPU_SPECIAL), on(mx.cpu, name, GPU_SPECIAL)
    assert g.dtype == c.dtype
    np.testing.assert_allclose(parts(g), parts(c), rtol=1e-5, atol=1e-6, equal_nan=True)


@gpu_only
@pytest.mark.parametrize("name", GPU_BINARY)
def test_gpu_special_values_follow_the_cpu_binary(name):
    a = np.repeat(GPU_SPECIAL, GPU_SPECIAL.size)
    b = np.tile(GPU_SPECIAL, GPU_SPECIAL.size)
    g, c = on(mx.gpu, name, a, b), on(mx.cpu, name, a, b)
    assert g.dtype == c.dtype
    if g.dtype == np.bool_:
        np.testing.assert_array_equal(g, c)
    else:
        np.testing.assert_allclose(parts(g), parts(c), rtol=1e-5, atol=1e-6, equal_nan=True)
