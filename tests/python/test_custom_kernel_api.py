"""mx.fast.cuda_kernel's API on any machine: argument checks (made before the GPU is needed,
so they run here), the RuntimeError on a machine without a GPU, docstrings and the generated
source (`verbose`). The kernels themselves run in test_cuda_custom_kernel.py."""

import pytest

import kiln.core as mx

HAS_GPU = mx.is_available(mx.gpu)
COPY = "uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;\nif (i < 4) y[i] = x[i];"


def call(kernel=None, **kw):
    kernel = kernel or mx.fast.cuda_kernel("copy", ["x"], ["y"], COPY)
    args = dict(inputs=[mx.ones(4)], output_shapes=[(4,)], output_dtypes=[mx.float32],
                grid=(4, 1, 1), threadgroup=(32, 1, 1))
    args.update(kw)
    return kernel(**args)


def test_docstrings_and_signature():
    assert "NVRTC" in mx.fast.cuda_kernel.__doc__
    kernel = mx.fast.cuda_kernel("copy", ["x"], ["y"], COPY, header="", shared_memory=0,
                                 ensure_row_contiguous=False, atomic_outputs=False)
    assert callable(kernel) and "copy" in kernel.__doc__
    with pytest.raises(TypeError):  # the callable's arguments are keyword-only, as MLX's
        kernel([mx.ones(4)], [(4,)], [mx.float32], (4, 1, 1), (32, 1, 1))


@pytest.mark.skipif(HAS_GPU, reason="checks the error of a machine without a GPU")
def test_no_gpu_raises_on_call():
    with pytest.raises(RuntimeError, match=r"\[cuda_kernel\] The GPU is not available"):
        call()


@pytest.mark.skipif(not HAS_GPU, reason="needs a GPU")
def test_cpu_stream_is_refused():
    with pytest.raises(ValueError, match="GPU only"):
        call(stream=mx.cpu)


@pytest.mark.parametrize("names, exc, match", [
    ("x", TypeError, "lists of str"),
    ([1], TypeError, "lists of str"),
])
def test_bad_name_lists(names, exc, match):
    with pytest.raises(exc, match=match):
        mx.fast.cuda_kernel("k", names, ["y"], COPY)


@pytest.mark.parametrize("kw, exc, match", [
    (dict(inputs=[]), ValueError, "Expected 1 inputs"),
    (dict(output_shapes=[(4,), (4,)]), ValueError, "one output shape and dtype"),
    (dict(output_dtypes=[]), ValueError, "one output shape and dtype"),
    (dict(output_shapes=[(-1,)]), ValueError, "non-negative"),
    (dict(grid=(4, 1)), ValueError, "grid must be a tuple of 3"),
    (dict(grid=(-4, 1, 1)), ValueError, "grid must be a tuple of 3"),
    (dict(threadgroup=(0, 1, 1)), ValueError, "threadgroup"),
    (dict(threadgroup=(64, 32, 1)), ValueError, "at most 1024"),
    (dict(grid=(1, 65536 * 2, 1), threadgroup=(1, 1, 1)), ValueError, "65535 blocks"),
    (dict(template=[("T", 1.5)]), TypeError, "Template arguments"),
    (dict(template=[("1T", 1)]), ValueError, "identifier"),
    (dict(template=[("x", 1)]), ValueError, "used twice"),
    (dict(init_value=[1.0]), TypeError, "init_value"),
    (dict(inputs=[mx.ones(4, dtype=mx.complex64)]), TypeError, "complex64"),
    (dict(output_dtypes=[mx.complex64]), TypeError, "complex64"),
])
def test_argument_errors(kw, exc, match):
    with pytest.raises(exc, match=match):
        call(**kw)


@pytest.mark.parametrize("inputs, outputs, match", [
    (["a-b"], ["y"], "identifier"),
    (["x"], [""], "identifier"),
    (["x"], ["x"], "used twice"),
])
def test_bad_names(inputs, outputs, match):
    kernel = mx.fast.cuda_kernel("k", inputs, outputs, "")
    with pytest.raises(ValueError, match=match):
        kernel(inputs=[mx.ones(1)] * len(inputs), output_shapes=[(1,)] * len(outputs),
               output_dtypes=[mx.float32] * len(outputs), grid=(1, 1, 1), threadgroup=(1, 1, 1))


def test_no_outputs():
    kernel = mx.fast.cuda_kernel("k", ["x"], [], "")
    with pytest.raises(ValueError, match="at least one output"):
        kernel(inputs=[mx.ones(1)], output_shapes=[], output_dtypes=[], grid=(1, 1, 1),
               threadgroup=(1, 1, 1))


def test_shared_memory_must_be_non_negative():
    kernel = mx.fast.cuda_kernel("copy", ["x"], ["y"], COPY, shared_memory=-1)
    with pytest.raises(ValueError, match="shared_memory"):
        call(kernel)


@pytest.mark.parametrize("dtype, ctype", [
    (mx.float32, "float"), (mx.float16, "__half"), (mx.bfloat16, "__nv_bfloat16"),
    (mx.float64, "double"), (mx.int64, "int64_t"), (mx.uint8, "uint8_t"), (mx.bool_, "bool"),
])
def test_verbose_prints_the_generated_signature(capsys, dtype, ctype):
    body = "out[0] = static_cast<int32_t>(static_cast<float>(inp[0]));"
    kernel = mx.fast.cuda_kernel("my_kernel", ["inp", "s"], ["out"], body, header="// my header")
    # The inputs are made on the CPU (float64 has no GPU kernels); the kernel runs on the
    # GPU where there is one (the suite's float64 tests otherwise run on the CPU stream).
    try:
        kernel(inputs=[mx.zeros((2, 3), dtype=dtype, stream=mx.cpu), mx.array(1)],
               output_shapes=[(1,)], output_dtypes=[mx.int32], grid=(1, 1, 1),
               threadgroup=(1, 1, 1), template=[("T", dtype), ("N", 3), ("B", False)],
               verbose=True, stream=mx.gpu if HAS_GPU else None)
    except RuntimeError:
        assert not HAS_GPU
    src = capsys.readouterr().out
    assert f"const {ctype}* inp" in src
    assert "const __grid_constant__ KilnShape<2> inp_shape" in src
    assert "const __grid_constant__ KilnStrides<2> inp_strides" in src
    assert "const int inp_ndim" in src
    assert "const __grid_constant__ KilnShape<1> s_shape" in src  # 0-d: one slot, ndim 0
    assert "int32_t* out" in src
    assert "template <typename T, int N, bool B>" in src
    assert f"kiln_custom_body<{ctype}, 3, false>(" in src
    assert 'extern "C" __global__ void kiln_custom_my_kernel(' in src
    assert f'#line 1 "my_kernel"\n{body}' in src
    assert '#line 1 "my_kernel_header"\n// my header' in src
