"""Fused operations and custom kernels, following ``mlx.core.fast``: ``layer_norm``,
``rms_norm``, ``rope`` and ``scaled_dot_product_attention`` (one fused primitive each, with
gradient and vmap rules, usable inside ``compile``), ``cross_entropy`` and
``gated_delta_update`` (compositions of basic ops), ``cuda_kernel``/``metal_kernel`` (GPU
custom kernels) and ``c_kernel``, kiln's CPU counterpart taking C source."""

import contextlib as _contextlib

from kiln._core import fast as _fast

layer_norm = _fast.layer_norm
rms_norm = _fast.rms_norm
rope = _fast.rope
scaled_dot_product_attention = _fast.scaled_dot_product_attention


def cross_entropy(logits, targets, *, stream=None):
    """Cross entropy with class indices as targets: ``logsumexp(logits, axis=-1) -
    logits[..., target]``, float32, with the shape of ``targets`` (as MLX's CPU path, a
    composition of basic ops, so gradients and vmap come with it)."""
    import kiln.core as mx

    logits, targets = mx.array(logits), mx.array(targets)
    if targets.shape != logits.shape[:-1]:
        raise ValueError(f"[cross_entropy] targets of shape {targets.shape} must have the "
                         f"shape of logits {logits.shape} without the last axis.")
    if not mx.issubdtype(targets.dtype, mx.integer):
        raise ValueError(f"[cross_entropy] targets must be integers, got {targets.dtype}.")
    picked = mx.take_along_axis(logits, mx.expand_dims(targets, -1), axis=-1, stream=stream)
    loss = mx.logsumexp(logits, axis=-1, stream=stream) - mx.squeeze(picked, -1, stream=stream)
    return loss.astype(mx.float32)


def gated_delta_update(q, k, v, gamma, beta, initial_state=None, mask=None, stream=None):
    """The gated delta rule recurrence over ``T`` steps, as MLX's (a composition of basic
    ops, so gradients and vmap come with it). Shapes: ``q``, ``k`` ``(B, T, Hk, Dk)``;
    ``v`` ``(B, T, Hv, Dv)`` with ``Hv`` a multiple of ``Hk``; ``gamma`` (decay) ``(B, T,
    Hv)`` or ``(B, T, Hv, Dk)``; ``beta`` ``(B, T, Hv)``; ``initial_state`` ``(B, Hv, Dv,
    Dk)`` (zeros when None); ``mask`` ``(B, T)``: steps where it is False leave the state
    unchanged and output 0. Each step: ``S = gamma * S``, ``S += beta * (v - S k) k^T``,
    ``y = S q``. Returns ``[y (B, T, Hv, Dv), final state]``: ``y`` in the dtype of ``q``
    and ``k`` (float32 for integers), the state in float32 (float64 for float64 q, k).
    Values equal MLX's CPU results."""
    import kiln.core as mx

    q, k, v, gamma, beta = (mx.array(a) for a in (q, k, v, gamma, beta))
    op = "[gated_delta_update]"
    if q.ndim != 4 or k.shape != q.shape:
        raise ValueError(f"{op} q and k must have the same shape (B, T, Hk, Dk), got "
                         f"{q.shape} and {k.shape}.")
    B, T, Hk, Dk = q.shape
    if v.ndim != 4 or v.shape[:2] != (B, T):
        raise ValueError(f"{op} v must have shape (B, T, Hv, Dv) with q's B and T, got {v.shape}.")
    Hv, Dv = v.shape[2:]
    if Hv % Hk != 0:
        raise ValueError(f"{op} The number of value heads {Hv} must be a multiple of the "
                         f"number of key heads {Hk}.")
    if gamma.ndim not in (3, 4) or beta.ndim != 3:
        raise ValueError(f"{op} gamma must be (B, T, Hv) or (B, T, Hv, Dk) and beta (B, T, Hv), "
                         f"got {gamma.shape} and {beta.shape}.")
    # dtypes as MLX's: v, gamma and beta are rounded to the dtype of q and k first, then
    # all is computed in float32 (float64 when q and k are), y cast back.
    out_dtype = mx.result_type(q, k)
    if not mx.issubdtype(out_dtype, mx.floating):
        out_dtype = mx.float32
    dtype = mx.float64 if out_dtype == mx.float64 else mx.float32
    with _contextlib.nullcontext() if stream is None else mx.stream(stream):
        v, gamma, beta = (a.astype(out_dtype) for a in (v, gamma, beta))
        q, k, v, gamma, beta = (a.astype(dtype) for a in (q, k, v, gamma, beta))
        if Hv != Hk:
            q, k = mx.repeat(q, Hv // Hk, axis=2), mx.repeat(k, Hv // Hk, axis=2)
        if initial_state is None:
            state = mx.zeros((B, Hv, Dv, Dk), dtype=dtype)
        else:
            state = mx.array(initial_state).astype(dtype)
        ys = []
        for t in range(T):
            g = gamma[:, t, :, None, None] if gamma.ndim == 3 else gamma[:, t, :, None, :]
            kt = k[:, t, :, None, :]
            decayed = state * g
            delta = (v[:, t] - (decayed * kt).sum(axis=-1)) * beta[:, t, :, None]
            new = decayed + kt * delta[..., None]
            y = (new * q[:, t, :, None, :]).sum(axis=-1)
            if mask is not None:
                m = mx.array(mask)[:, t]
                new = mx.where(m[..., None, None, None], new, state)
                y = mx.where(m[..., None, None], y, 0)
            state = new
            ys.append(y)
        y = mx.stack(ys, axis=1) if ys else mx.zeros((B, 0, Hv, Dv), dtype=dtype)
        return [y.astype(out_dtype), state]


def c_kernel(name, input_names, output_names, source, header="", ensure_row_contiguous=True,
             atomic_outputs=False):
    """A C kernel built with the system C compiler (kiln's CPU counterpart of
    ``cuda_kernel``), cached in memory and on disk like ``compile``'s kernels.

    ``source`` is the body of a C function called once per evaluation, which loops over the
    elements itself. For each input ``a`` (dtype float32, say) the body sees
    ``const float *a``, ``const int64_t *a_shape``, ``const int64_t *a_strides`` (in
    elements), ``int a_ndim`` and ``int64_t a_size``; for each output ``out``: ``float *out``,
    ``out_shape``, ``out_ndim`` and ``out_size`` (outputs are row-major). Types:
    ``bool``, ``int8_t`` .. ``uint64_t``, ``_Float16``, ``__bf16``, ``float``, ``double``.
    ``template`` entries become ``#define name value`` before ``header`` (dtypes as C type
    names). With ``ensure_row_contiguous`` (default) inputs are copied to row-major first;
    otherwise they arrive with their strides. ``atomic_outputs`` is accepted for
    compatibility (one thread runs the body). Compile errors raise ``RuntimeError`` with
    the compiler's message, whose line numbers count from the start of ``source``.

    Returns a callable ``kernel(inputs, output_shapes, output_dtypes, template=None,
    init_value=None, verbose=False, stream=None)`` returning the list of outputs.
    """
    input_names, output_names = list(input_names), list(output_names)

    def kernel(inputs, output_shapes, output_dtypes, template=None, init_value=None,
               verbose=False, stream=None):
        return _fast._c_kernel(
            name, input_names, output_names, source, header, ensure_row_contiguous,
            list(inputs), [list(s) for s in output_shapes], list(output_dtypes),
            list(template or []), init_value, verbose, stream=stream)

    kernel.__doc__ = f"The C kernel `{name}`: see `kiln.core.fast.c_kernel`."
    return kernel


def cuda_kernel(name, input_names, output_names, source, header="",
                ensure_row_contiguous=True, shared_memory=0, atomic_outputs=False):
    """A jit-compiled custom CUDA kernel defined from a source string
    (``mlx.core.fast.cuda_kernel``), compiled by NVRTC for the GPU and cached by source
    (in memory and on disk).

    ``source`` is the body of a ``__global__`` function whose signature kiln generates: for
    each input ``a`` (float32, say) ``const float* a``, ``a_shape`` (int32 per dim),
    ``a_strides`` (int64, in elements) and ``const int a_ndim`` (always passed; a 0-d input
    is a pointer to its element); for each output ``out``: ``float* out`` (row-major).
    Types: ``bool``, ``int8_t`` .. ``uint64_t``, ``__half``, ``__nv_bfloat16``, ``float``,
    ``double``. ``template`` entries become C++ template parameters (dtype -> ``typename``,
    int -> ``int``, bool -> ``bool``). ``header`` comes before the kernel (helper functions
    need ``__device__``). ``cooperative_groups::this_grid()`` / ``this_thread_block()`` and
    ``elem_to_loc(elem, a_shape, a_strides, a_ndim)`` are available without includes
    (kiln's kernels are headerless: CUDA headers cannot be included).
    ``shared_memory`` is the dynamic shared memory in bytes (``extern __shared__``).
    With ``ensure_row_contiguous`` (default) inputs are copied to row-major first.
    ``atomic_outputs`` is accepted for code written for ``metal_kernel`` (CUDA atomics
    work on plain pointers). Compile errors raise ``RuntimeError`` with NVRTC's log, whose
    line numbers count from the start of ``source`` (or ``header``).

    Returns a callable ``kernel(*, inputs, output_shapes, output_dtypes, grid, threadgroup,
    template=None, init_value=None, verbose=False, stream=None)`` returning the list of
    outputs: ``grid`` is the number of threads in each of 3 dims and ``threadgroup`` the
    threads per block (blocks = ceil(grid / threadgroup)); outputs start at
    ``init_value`` when given, else uninitialised. Calling it raises ``RuntimeError`` when
    the GPU is not available (``c_kernel`` is the CPU counterpart).
    """
    if isinstance(input_names, str) or isinstance(output_names, str):
        raise TypeError("[cuda_kernel] input_names and output_names must be lists of str.")
    input_names, output_names = list(input_names), list(output_names)
    if not all(isinstance(n, str) for n in input_names + output_names):
        raise TypeError("[cuda_kernel] input_names and output_names must be lists of str.")

    def kernel(*, inputs, output_shapes, output_dtypes, grid, threadgroup, template=None,
               init_value=None, verbose=False, stream=None):
        return _fast._cuda_kernel(
            name, input_names, output_names, source, header, ensure_row_contiguous,
            shared_memory, list(inputs), [list(s) for s in output_shapes],
            list(output_dtypes), list(grid), list(threadgroup), list(template or []),
            init_value, verbose, stream=stream)

    kernel.__doc__ = f"The CUDA kernel `{name}`: see `kiln.core.fast.cuda_kernel`."
    return kernel


def metal_kernel(name, input_names, output_names, source, header="",
                 ensure_row_contiguous=True, atomic_outputs=False, compile_options=None):
    """A jit-compiled custom Metal kernel (``mlx.core.fast.metal_kernel``). kiln has no
    Metal back-end: always raises ``RuntimeError``."""
    raise RuntimeError("[metal_kernel] No Metal back-end.")


__all__ = ["cross_entropy", "gated_delta_update", "layer_norm", "rms_norm", "rope",
           "scaled_dot_product_attention", "c_kernel", "cuda_kernel", "metal_kernel"]
