"""mx.fast.cuda_kernel on the GPU: user kernels against numpy (elementwise, templated dtypes,
a shared-memory reduction, several outputs, init_value, strided inputs, 2-d grids, inside
compile) and NVRTC's errors as RuntimeError. Skipped without a GPU; run them on the GPU
machine with `python -m pytest tests/python/test_cuda_custom_kernel.py`."""

import numpy as np
import pytest

import kiln.core as mx
from conftest import GPU_ONLY

pytestmark = GPU_ONLY  # the gpu mark, and skipped where no GPU is available

RNG = np.random.default_rng(11)
FLOATS = [mx.float32, mx.float16, mx.bfloat16]
TOL = {mx.float32: 1e-6, mx.float16: 1e-3, mx.bfloat16: 8e-3}


def rand(shape, dtype=mx.float32):
    return mx.array(RNG.uniform(-2, 2, size=shape).astype(np.float32)).astype(dtype)


def npf(x):
    return np.array(x.astype(mx.float32) if x.dtype in (mx.float16, mx.bfloat16) else x)


def exp_elementwise(a, t=mx.float32):
    """MLX's documentation example."""
    source = """
        auto elem = cooperative_groups::this_grid().thread_rank();
        T tmp = inp[elem];
        out[elem] = exp(tmp);
    """
    kernel = mx.fast.cuda_kernel(name="myexp", input_names=["inp"], output_names=["out"],
                                 source=source)
    outputs = kernel(inputs=[a], template=[("T", t)], grid=(a.size, 1, 1),
                     threadgroup=(256, 1, 1), output_shapes=[a.shape],
                     output_dtypes=[a.dtype])
    return outputs[0]


@pytest.mark.parametrize("dtype", FLOATS)
def test_docs_exp_example(dtype):
    with mx.stream(mx.gpu):
        a = rand((16, 16), dtype)
        b = exp_elementwise(a)
    assert b.dtype == dtype and b.shape == (16, 16)
    assert mx.allclose(b, mx.exp(a), rtol=TOL[dtype], atol=TOL[dtype]).item()
    np.testing.assert_allclose(npf(b), np.exp(npf(a)), rtol=TOL[dtype] * 2)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("n", [1, 7, 300, 1025])
def test_templated_dtype(dtype, n):
    src = """
        uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i >= N) return;
        float v = static_cast<float>(x[i]);
        y[i] = static_cast<T>(v * SCALE + 1.0f);
    """
    kernel = mx.fast.cuda_kernel("affine", ["x"], ["y"], src)
    x = rand((n,), dtype)
    (y,) = kernel(inputs=[x], grid=(n, 1, 1), threadgroup=(128, 1, 1), output_shapes=[(n,)],
                  output_dtypes=[dtype], template=[("T", dtype), ("N", n), ("SCALE", 3)],
                  stream=mx.gpu)
    want = mx.array(npf(x) * 3 + 1).astype(dtype)
    np.testing.assert_allclose(npf(y), npf(want), rtol=TOL[dtype], atol=TOL[dtype])


SUM = """
    extern __shared__ float partial[];
    uint32_t tid = threadIdx.x;
    uint32_t i = blockIdx.x * blockDim.x + tid;
    partial[tid] = i < x_shape[0] ? static_cast<float>(x[i]) : 0.0f;
    __syncthreads();
    for (uint32_t s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) partial[tid] += partial[tid + s];
        __syncthreads();
    }
    if (tid == 0) atomicAdd(&total[0], partial[0]);
"""

STATIC_SUM = """
    __shared__ float partial[256];
    auto block = cooperative_groups::this_thread_block();
    uint32_t tid = block.thread_rank();
    float acc = 0.0f;
    for (uint32_t i = tid; i < x_shape[0]; i += 256) acc += static_cast<float>(x[i]);
    partial[tid] = acc;
    block.sync();
    if (tid == 0) {
        float s = 0.0f;
        for (int k = 0; k < 256; ++k) s += partial[k];
        total[0] = s;
    }
"""


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("n", [1, 256, 1000, 5000])
def test_shared_memory_reduction(dtype, n):
    x = rand((n,), dtype)
    want = npf(x).astype(np.float64).sum()
    dyn = mx.fast.cuda_kernel("block_sum", ["x"], ["total"], SUM, shared_memory=256 * 4)
    (got,) = dyn(inputs=[x], grid=(n, 1, 1), threadgroup=(256, 1, 1), output_shapes=[(1,)],
                 output_dtypes=[mx.float32], init_value=0, stream=mx.gpu)
    np.testing.assert_allclose(np.array(got)[0], want, rtol=1e-4, atol=1e-3)
    static = mx.fast.cuda_kernel("static_sum", ["x"], ["total"], STATIC_SUM)
    (got,) = static(inputs=[x], grid=(256, 1, 1), threadgroup=(256, 1, 1),
                    output_shapes=[(1,)], output_dtypes=[mx.float32], stream=mx.gpu)
    np.testing.assert_allclose(np.array(got)[0], want, rtol=1e-4, atol=1e-3)


def test_several_outputs_and_integer_dtypes():
    src = """
        uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i >= a_shape[0]) return;
        sum[i] = a[i] + b[i];
        prod[i] = (int64_t)a[i] * b[i];
        neg[i] = a[i] > b[i];
    """
    kernel = mx.fast.cuda_kernel("multi", ["a", "b"], ["sum", "prod", "neg"], src)
    a = mx.array(RNG.integers(-100, 100, 50).astype(np.int32))
    b = mx.array(RNG.integers(-100, 100, 50).astype(np.int32))
    s, p, g = kernel(inputs=[a, b], grid=(50, 1, 1), threadgroup=(32, 1, 1),
                     output_shapes=[(50,), (50,), (50,)],
                     output_dtypes=[mx.int32, mx.int64, mx.bool_], stream=mx.gpu)
    na, nb = np.array(a), np.array(b)
    assert s.dtype == mx.int32 and p.dtype == mx.int64 and g.dtype == mx.bool_
    np.testing.assert_array_equal(np.array(s), na + nb)
    np.testing.assert_array_equal(np.array(p), na.astype(np.int64) * nb)
    np.testing.assert_array_equal(np.array(g), na > nb)


@pytest.mark.parametrize("dtype, init", [(mx.float32, 7.5), (mx.float16, -2.0),
                                         (mx.int32, 3), (mx.uint8, 200), (mx.bool_, 1)])
def test_init_value(dtype, init):
    src = "uint32_t i = threadIdx.x; if (i % 2 == 0) out[i] = x[0];"
    kernel = mx.fast.cuda_kernel("half_write", ["x"], ["out"], src)
    x = mx.zeros((1,), dtype=dtype)
    (out,) = kernel(inputs=[x], grid=(10, 1, 1), threadgroup=(10, 1, 1),
                    output_shapes=[(2, 5)], output_dtypes=[dtype], init_value=init,
                    stream=mx.gpu)
    want = np.full(10, init, dtype=np.float64)
    want[::2] = 0
    np.testing.assert_array_equal(npf(out).astype(np.float64).ravel(), want.astype(npf(x).dtype))


STRIDED = """
    uint32_t e = blockIdx.x * blockDim.x + threadIdx.x;
    int64_t n = 1;
    for (int d = 0; d < a_ndim; ++d) n *= a_shape[d];
    if (e >= n) return;
    out[e] = a[elem_to_loc(int64_t(e), a_shape, a_strides, a_ndim)] * 2.0f;
"""


@pytest.mark.parametrize("view", ["transpose", "negative", "broadcast", "offset", "zero_d"])
def test_strided_inputs_without_copy(view):
    base = rand((6, 8))
    x = {
        "transpose": lambda: base.T,
        "negative": lambda: base[::-1, ::-2],
        "broadcast": lambda: mx.broadcast_to(base[2:3], (5, 8)),
        "offset": lambda: base[2:5, 3:],
        "zero_d": lambda: base[1, 1],
    }[view]()
    want = npf(x) * 2
    for contiguous in (False, True):
        kernel = mx.fast.cuda_kernel("strided", ["a"], ["out"], STRIDED,
                                     ensure_row_contiguous=contiguous)
        (out,) = kernel(inputs=[x], grid=(max(x.size, 1), 1, 1), threadgroup=(64, 1, 1),
                        output_shapes=[x.shape], output_dtypes=[mx.float32], stream=mx.gpu)
        np.testing.assert_allclose(np.array(out), want, rtol=1e-6)


def test_two_dimensional_grid():
    src = """
        uint32_t c = blockIdx.x * blockDim.x + threadIdx.x;
        uint32_t r = blockIdx.y * blockDim.y + threadIdx.y;
        if (r >= x_shape[0] || c >= x_shape[1]) return;
        out[c * x_shape[0] + r] = x[r * x_shape[1] + c];
    """
    kernel = mx.fast.cuda_kernel("transpose", ["x"], ["out"], src)
    x = rand((37, 70))
    (out,) = kernel(inputs=[x], grid=(70, 37, 1), threadgroup=(16, 16, 1),
                    output_shapes=[(70, 37)], output_dtypes=[mx.float32], stream=mx.gpu)
    np.testing.assert_array_equal(np.array(out), np.array(x).T)


def test_inside_compile():
    kernel = mx.fast.cuda_kernel("square", ["x"], ["y"],
                                 "uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                 "if (i < x_shape[0]) y[i] = x[i] * x[i];")

    def f(x):
        (y,) = kernel(inputs=[x + 1], grid=(x.size, 1, 1), threadgroup=(64, 1, 1),
                      output_shapes=[x.shape], output_dtypes=[x.dtype])
        return mx.sum(y) + y

    cf = mx.compile(f)
    with mx.stream(mx.gpu):
        for _ in range(3):
            x = rand((100,))
            got, want = cf(x), f(x)
            np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-5)
            ref = (np.array(x) + 1) ** 2
            np.testing.assert_allclose(np.array(got), ref.sum() + ref, rtol=1e-4)


def test_compile_error_has_nvrtc_log_and_line():
    kernel = mx.fast.cuda_kernel("broken", ["x"], ["y"], "y[0] = x[0];\nthis is not cuda;")
    with pytest.raises(RuntimeError, match=r"(?s)cuda_kernel.*broken\(2\).*error"):
        kernel(inputs=[mx.ones(3)], grid=(1, 1, 1), threadgroup=(1, 1, 1),
               output_shapes=[(3,)], output_dtypes=[mx.float32], stream=mx.gpu)
    bad_header = mx.fast.cuda_kernel("hdr", ["x"], ["y"], "y[0] = x[0];",
                                     header="__device__ int f() { return nope; }")
    with pytest.raises(RuntimeError, match=r"hdr_header\(1\)"):
        bad_header(inputs=[mx.ones(3)], grid=(1, 1, 1), threadgroup=(1, 1, 1),
                   output_shapes=[(3,)], output_dtypes=[mx.float32], stream=mx.gpu)


def test_empty_grid_and_empty_output():
    kernel = mx.fast.cuda_kernel("noop", ["x"], ["y"], "y[0] = x[0];")
    (y,) = kernel(inputs=[mx.ones(0)], grid=(0, 1, 1), threadgroup=(32, 1, 1),
                  output_shapes=[(0,)], output_dtypes=[mx.float32], stream=mx.gpu)
    assert y.shape == (0,) and np.array(y).size == 0


def test_large_dynamic_shared_memory():
    # Over 48 KiB the kernel must opt in (cuFuncSetAttribute); 64 KiB of floats, reversed.
    src = """
        extern __shared__ float buf[];
        uint32_t t = threadIdx.x;
        for (uint32_t i = t; i < 16384; i += blockDim.x) buf[i] = x[i];
        __syncthreads();
        for (uint32_t i = t; i < 16384; i += blockDim.x) y[i] = buf[16383 - i];
    """
    kernel = mx.fast.cuda_kernel("reverse", ["x"], ["y"], src, shared_memory=65536)
    x = rand((16384,))
    (y,) = kernel(inputs=[x], grid=(256, 1, 1), threadgroup=(256, 1, 1),
                  output_shapes=[(16384,)], output_dtypes=[mx.float32], stream=mx.gpu)
    np.testing.assert_array_equal(np.array(y), np.array(x)[::-1])


def test_same_kernel_reused_across_calls_and_inputs():
    kernel = mx.fast.cuda_kernel("inc", ["x"], ["y"],
                                 "uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                 "if (i < x_shape[0])\n"
                                 "    y[i] = static_cast<T>(static_cast<float>(x[i]) + 1.0f);")
    for n, dtype in [(5, mx.int32), (9, mx.int32), (5, mx.float16)]:
        x = mx.arange(n).astype(dtype)
        (y,) = kernel(inputs=[x], grid=(n, 1, 1), threadgroup=(32, 1, 1),
                      output_shapes=[(n,)], output_dtypes=[dtype], template=[("T", dtype)],
                      stream=mx.gpu)
        np.testing.assert_array_equal(npf(y), np.arange(n) + 1)
