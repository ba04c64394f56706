"""The microscaling quantization modes beside ``affine``, as compositions of kiln ops:
``mxfp4`` (e2m1 values, an e8m0 scale per 32), ``mxfp8`` (e4m3 values, e8m0 scale per 32)
and ``nvfp4`` (e2m1 values, an e4m3 scale per 16, optionally a float32 global scale).

``quantize``, ``dequantize``, ``quantized_matmul`` and ``gather_qmm`` wrap kiln._core's
(affine, in Rust) and ``_extras.gather_qmm``: ``mode="affine"`` goes to them unchanged,
the other modes come here. Packed words, scales (uint8) and the returned tuples are
MLX 0.32's bit for bit, so weights quantized by MLX load and run on kiln. ``qqmm`` and
``gather_qqmm`` quantize the activations too (MLX's CPU has them for one row only)."""

from __future__ import annotations

import contextlib

from kiln import _core as _k
from kiln.core import _extras

_affine_quantize = _k.quantize
_affine_dequantize = _k.dequantize
_affine_quantized_matmul = _k.quantized_matmul
_affine_gather_qmm = _extras.gather_qmm

# mode -> (group size, bits); the float modes accept only these.
_MODES = {"affine": (64, 4), "mxfp4": (32, 4), "mxfp8": (32, 8), "nvfp4": (16, 4)}

# e2m1 magnitudes by code, and the midpoints between them: a value exactly on a midpoint
# rounds towards zero (MLX's rounding for fp4, not ties-to-even).
_FP4 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
_FP4_MIDS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)

# nvfp4's global scale is ``amax(tensor) / (448 * 6)`` in kiln's and MLX's convention: the
# block scales are then taken relative to it.
_NV_RANGE = 448.0 * 6.0


def _on(stream):
    return contextlib.nullcontext() if stream is None else _k.stream(stream)


def _name(dtype) -> str:
    return str(dtype).rsplit(".", 1)[-1]


def _shape(shape) -> str:
    return "(" + ",".join(str(d) for d in shape) + ")"


def _check_mode(op: str, mode: str) -> None:
    if mode not in _MODES:
        raise ValueError(f"[{op}] Invalid quantization mode '{mode}'.")


def _params(op: str, mode: str, group_size, bits) -> tuple:
    """The float mode's (group size, bits); others than its own raise, as MLX."""
    g, b = _MODES[mode]
    if group_size is not None and group_size != g:
        raise ValueError(f"[{op}] {mode} quantization requires group size {g} but got {group_size}.")
    if bits is not None and bits != b:
        raise ValueError(f"[{op}] {mode} quantization requires bits to be {b} but got {bits}.")
    return g, b


def _global_scale(op: str, mode: str, gs, shape=()):
    if gs is None:
        return None
    if mode != "nvfp4":
        raise ValueError(f"[{op}] Global scale is only supported for 'nvfp4' quantization mode.")
    gs = _k.array(gs)
    if shape == () and gs.size != 1:
        raise ValueError(f"[{op}] Global scale must be a scalar but got shape {_shape(gs.shape)}.")
    if shape != () and tuple(gs.shape) != tuple(shape):
        raise ValueError(f"[{op}] Global scale must have one entry per expert with shape "
                         f"{_shape(shape)} but got {_shape(gs.shape)}.")
    if gs.dtype != _k.float32:
        raise ValueError(f"[{op}] Global scale must have dtype float32 but got {_name(gs.dtype)}.")
    return gs.reshape(shape) if shape == () else gs


# ---------------------------------------------------------------------------------------
# Bit-level helpers (float32)


def _ceil_log2(s):
    """``ceil(log2(s))`` exactly, as int32, for finite ``s >= 0`` (0 for 0): read off the
    float's bits, since a float32 ``log2`` rounds ``2^k (1 + 2^-23)`` down to ``k``."""
    bits = _k.view(s, _k.uint32)
    e, m = (bits >> 23).astype(_k.int32), bits & 0x7FFFFF
    normal = e - 127 + (m != 0).astype(_k.int32)
    # A subnormal is m * 2^-149; m converts to float32 exactly, so reuse the normal rule.
    mb = _k.view(m.astype(_k.float32), _k.uint32)
    sub = (mb >> 23).astype(_k.int32) - 276 + ((mb & 0x7FFFFF) != 0).astype(_k.int32)
    return _k.where(e > 0, normal, _k.where(m > 0, sub, 0))


def _pow2(e):
    """``2^e`` in float32 for int32 ``e`` in [-149, 127], exact (built from bits)."""
    normal = _k.view((_k.maximum(e + 127, 1).astype(_k.uint32) << 23), _k.float32)
    shift = _k.clip(e + 149, 0, 22).astype(_k.uint32)
    sub = _k.view(_k.left_shift(_k.array(1, dtype=_k.uint32), shift), _k.float32)
    return _k.where(e >= -126, normal, sub)


def _e8m0_value(s):
    """The float32 value of e8m0 codes (uint8): ``2^(s - 127)``; 255 is infinity."""
    s = s.astype(_k.uint32)
    tiny = _k.view(_k.array(1 << 22, dtype=_k.uint32), _k.float32)  # 2^-127
    return _k.where(s == 0, tiny, _k.view(s << 23, _k.float32))


def _sign_bit(x):
    return _k.view(x, _k.uint32) >> 31


def _fp4_encode(y):
    """e2m1 codes (uint32, 0..15) of float32 ``y``: magnitudes past 6 saturate, midpoints
    round towards zero; infinities and NaN give 0, and so does anything rounding to zero
    (no negative zero), as MLX."""
    a = _k.abs(y)
    mag = _k.zeros(y.shape, dtype=_k.uint32)
    for t in _FP4_MIDS:
        mag = mag + (a > t).astype(_k.uint32)
    mag = _k.where(_k.isinf(a), 0, mag)
    return _k.where(mag > 0, mag | (_sign_bit(y) << 3), 0)


def _e4m3_encode(y, nan_sign: bool = True):
    """e4m3 codes (uint8) of float32 ``y``: kiln's ``to_fp8`` with NaN keeping its sign
    (0x7E / 0xFE) unless ``nan_sign`` is False, as MLX's."""
    nan = (_sign_bit(y).astype(_k.uint8) << 7) | 0x7E if nan_sign else 0x7E
    return _k.where(_k.isnan(y), nan, _extras.to_fp8(y))


def _pack(codes, bits: int):
    """Codes (uint32, last axis a multiple of 32 / bits) packed from the lowest bits of
    each uint32 word up."""
    per = 32 // bits
    c = codes.astype(_k.uint32).reshape(*codes.shape[:-1], codes.shape[-1] // per, per)
    out = c[..., 0]
    for i in range(1, per):
        out = out | (c[..., i] << (bits * i))
    return out


def _unpack(w, bits: int):
    per = 32 // bits
    shifts = _k.array([bits * i for i in range(per)], dtype=_k.uint32)
    c = (w[..., None] >> shifts) & ((1 << bits) - 1)
    return c.reshape(*w.shape[:-1], w.shape[-1] * per)


def _expand(a, ndim: int):
    """``a`` (a global scale: one, or one per leading batch index) with trailing axes
    added up to ``ndim``."""
    return a.reshape(*a.shape, *([1] * (ndim - a.ndim)))


def _group_amax(g):
    """``max |g|`` over the last axis, NaN when the group has one (MLX's maximum
    propagates NaN)."""
    amax = _k.max(_k.abs(g), axis=-1)
    return _k.where(_k.any(_k.isnan(g), axis=-1), float("nan"), amax)


# ---------------------------------------------------------------------------------------
# quantize / dequantize


def _quantize_fp(w, mode: str, gsize: int, bits: int, gs):
    # float64 is quantized as float32 (MLX's float64 path for these modes is not usable).
    f = w.astype(_k.float32)
    g = f.reshape(*f.shape[:-1], f.shape[-1] // gsize, gsize)
    amax = _group_amax(g)
    halves = (_k.float16, _k.bfloat16)
    half = w.dtype in halves

    def rounded(x, dtypes):
        # MLX takes these steps in the input's dtype: a half input rounds their results.
        return x.astype(w.dtype).astype(_k.float32) if w.dtype in dtypes else x

    if mode == "nvfp4":
        # Block scale amax / 6 as e4m3 (relative to the global scale), values divided by
        # it as e2m1; the global scale's factor comes after each rounding, in float32.
        s = rounded(amax / 6.0, halves)
        if gs is not None:
            inv = _k.array(_NV_RANGE, dtype=_k.float32) / _expand(gs, s.ndim)
            s = s * inv
        scales = _e4m3_encode(s)
        y = rounded(g / _extras.from_fp8(scales, _k.float32)[..., None], halves)
        if gs is not None:
            y = y * inv[..., None]
        q = _fp4_encode(y)
    else:
        # e8m0 scale 2^e, e = ceil(log2(amax / max_value)): the largest magnitude lands
        # in the element format's top binade. Codes wrap modulo 256, as MLX's. MLX rounds
        # amax / max_value for float16 input (it shows when subnormal), not for bfloat16.
        s = rounded(amax / (6.0 if mode == "mxfp4" else 448.0), (_k.float16,))
        finite = _k.isfinite(s)
        e = _ceil_log2(_k.where(finite, s, 0.0))
        # A group holding inf or NaN gets scale code 128 (0 for half inputs) and its values
        # times infinity, as MLX's.
        scales = _k.where(finite, (e + 127) & 255, 0 if half else 128).astype(_k.uint8)
        y = _k.where(finite[..., None], g / _pow2(e)[..., None], g * float("inf"))
        if mode == "mxfp4":
            q = _fp4_encode(y)
        else:  # MLX's bfloat16 path gives NaN (0 * inf) without its sign
            q = _e4m3_encode(y, nan_sign=w.dtype != _k.bfloat16).astype(_k.uint32)
    return _pack(q.reshape(f.shape), bits), scales


def _check_quantize_input(op: str, w, gsize: int) -> None:
    if not _k.issubdtype(w.dtype, _k.floating):
        raise ValueError(f"[{op}] Only real floating types can be quantized but w has type "
                         f"{_name(w.dtype)}.")
    if w.ndim < 2:
        raise ValueError(f"[{op}] The matrix to be quantized must have at least 2 dimension "
                         f"but it has only {w.ndim}.")
    if w.shape[-1] % gsize != 0:
        raise ValueError(
            f"[{op}] The last dimension of the matrix needs to be divisible by the "
            f"quantization group size {gsize}. However the provided  matrix has shape "
            f"{_shape(w.shape)}")


def quantize(w, /, group_size=None, bits=None, mode="affine", *, global_scale=None, stream=None):
    """Quantize ``w`` along its last axis in groups of ``group_size``. ``"affine"``:
    returns ``(w_q, scales, biases)``; ``"mxfp4"``, ``"mxfp8"``, ``"nvfp4"``: returns
    ``(w_q, scales)`` with uint8 scales (e8m0; e4m3 for nvfp4, whose optional float32
    ``global_scale``, the tensor's amax / (448 * 6) say, makes the block scales relative to
    it). Values are packed into uint32 words from the lowest bits up, as MLX."""
    _check_mode("quantize", mode)
    if mode == "affine":
        if global_scale is not None:
            _global_scale("quantize", mode, global_scale)
        return _affine_quantize(w, group_size, bits, mode, stream=stream)
    gsize, nbits = _params("quantize", mode, group_size, bits)
    w = _k.array(w)
    _check_quantize_input("quantize", w, gsize)
    gs = _global_scale("quantize", mode, global_scale)
    with _on(stream):
        return _quantize_fp(w, mode, gsize, nbits, gs)


def _dequantize_fp(w, scales, mode: str, gsize: int, bits: int, dtype, gs):
    """Dequantized ``w`` in ``dtype``; with an nvfp4 global scale (one, or one per batch
    element of ``w``) the result is float32 or wider, as MLX's."""
    codes = _unpack(w, bits)
    groups = codes.reshape(*codes.shape[:-1], codes.shape[-1] // gsize, gsize)
    if mode == "mxfp8":
        vals = _extras.from_fp8(groups.astype(_k.uint8), _k.float32)
    else:
        vals = _k.take(_k.array(_FP4 + tuple(-v for v in _FP4), dtype=_k.float32),
                       groups.astype(_k.int32))
    if mode == "nvfp4":
        s = _extras.from_fp8(scales, _k.float32)
        if gs is not None:
            # The block and global scales are combined in float32 first, then applied.
            gsf = _expand(gs / _NV_RANGE, s.ndim)
            out = vals.astype(dtype) * (s * gsf)[..., None]
            return out.reshape(codes.shape)
    else:
        s = _e8m0_value(scales)
    # In the output dtype, as MLX: a scale outside a half's range becomes inf or 0 first.
    out = vals.astype(dtype) * s.astype(dtype)[..., None]
    return out.reshape(codes.shape)


def _check_packed(op: str, w, scales, gsize: int, bits: int, w_label="matrix") -> None:
    if scales.dtype != _k.uint8:
        raise ValueError(f"[{op}] Scale type must be uint8 but received type {_name(scales.dtype)}.")
    if w.dtype != _k.uint32:
        if op == "dequantize":
            raise ValueError(f"[{op}] The matrix should be given as a uint32")
        raise ValueError(f"[{op}] The weight matrix should be uint32 but received {_name(w.dtype)}")
    if w.ndim < 2:
        raise ValueError(f"[{op}] The {w_label} to be dequantized must have at least 2 "
                         f"dimension but it has only {w.ndim}.")
    expect = (*w.shape[:-1], w.shape[-1] * 32 // bits // gsize)
    if tuple(scales.shape) != expect:
        if op == "dequantize":
            raise ValueError(
                f"[{op}] Shape of scales does not match the matrix given the quantization "
                f"parameters. Provided matrix of shape {_shape(w.shape)} and scales of shape "
                f"{_shape(scales.shape)}.")
        raise ValueError(
            f"[{op}] The shapes of the weight and scales are incompatible based on bits and "
            f"group_size. w.shape() == {_shape(w.shape)} and scales.shape() == "
            f"{_shape(scales.shape)} with group_size={gsize} and bits={bits}")


def dequantize(w, /, scales, biases=None, group_size=None, bits=None, mode="affine",
               global_scale=None, dtype=None, *, stream=None):
    """Dequantize ``w`` with its ``scales`` (and ``biases`` for ``"affine"``: ``w_i = s *
    q_i + b``; the float modes multiply each value by its group's scale). ``dtype``
    defaults to the scales' dtype for ``"affine"`` and to bfloat16 for the float modes
    (float32 when an nvfp4 ``global_scale`` is given)."""
    _check_mode("dequantize", mode)
    if mode == "affine":
        if global_scale is not None:
            _global_scale("dequantize", mode, global_scale)
        return _affine_dequantize(w, scales, biases, group_size, bits, mode, None, dtype,
                                  stream=stream)
    if dtype is not None and not _k.issubdtype(dtype, _k.floating):
        raise ValueError(f"[dequantize] Only real floating types are supported but output "
                         f"dtype == {_name(dtype)}.")
    w, scales = _k.array(w), _k.array(scales)
    if scales.dtype != _k.uint8:
        raise ValueError(f"[dequantize] Scale type must be uint8 but received type "
                         f"{_name(scales.dtype)}.")
    if biases is not None:
        raise ValueError(f"[dequantize] Biases must be null for quantization mode '{mode}'.")
    gsize, nbits = _params("dequantize", mode, group_size, bits)
    _check_packed("dequantize", w, scales, gsize, nbits)
    gs = _global_scale("dequantize", mode, global_scale)
    dtype = _k.bfloat16 if dtype is None else dtype
    with _on(stream):
        out = _dequantize_fp(w, scales, mode, gsize, nbits, dtype, gs)
        if gs is not None and dtype != _k.float64:  # promoted with the float32 scale
            out = out.astype(_k.float32)
        return out


# ---------------------------------------------------------------------------------------
# Products with a quantized matrix


def _check_x(op: str, x, half_only: bool = False) -> None:
    if not _k.issubdtype(x.dtype, _k.floating) or (half_only and x.dtype == _k.float64):
        what = "Only real floating types except float64 are supported but first argument dtype"\
            if half_only else "Only real floating types are supported but x.dtype()"
        raise ValueError(f"[{op}] {what} == {_name(x.dtype)}.")


def _check_inner(op: str, x, w, bits: int, gsize: int, transpose: bool) -> None:
    k = w.shape[-1] * 32 // bits
    rows = w.shape[-2]
    inner, outer = (k, rows) if transpose else (rows, k)
    if x.shape[-1] != inner:
        raise ValueError(
            f"[{op}] Last dimension of first input with shape (..., {x.shape[-1]}) does not "
            f"match the expanded quantized matrix ({inner}, {outer}) computed from shape "
            f"{_shape(w.shape)} with group_size={gsize}, bits={bits} and "
            f"transpose={'true' if transpose else 'false'}")


def _prepare_qmm(op, x, w, scales, biases, mode, group_size, bits, transpose):
    x, w, scales = _k.array(x), _k.array(w), _k.array(scales)
    if biases is not None:
        raise ValueError(f"[{op}] Biases must be null for quantization mode '{mode}'.")
    gsize, nbits = _params(op, mode, group_size, bits)
    _check_packed(op, w, scales, gsize, nbits)
    _check_x(op, x)
    _check_inner(op, x, w, nbits, gsize, transpose)
    return x, w, scales, gsize, nbits


def quantized_matmul(x, w, /, scales, biases=None, transpose=True, group_size=None, bits=None,
                     mode="affine", *, stream=None):
    """``x @ w.T`` (or ``x @ w`` when ``transpose`` is False) with ``w`` quantized in
    ``mode`` (biases only for ``"affine"``); the float modes are a reference composition,
    ``w`` dequantized in ``x``'s dtype first."""
    _check_mode("quantized_matmul", mode)
    if mode == "affine":
        return _affine_quantized_matmul(x, w, scales, biases, transpose, group_size, bits,
                                        mode, stream=stream)
    x, w, scales, gsize, nbits = _prepare_qmm("quantized_matmul", x, w, scales, biases, mode,
                                              group_size, bits, transpose)
    with _on(stream):
        dense = _dequantize_fp(w, scales, mode, gsize, nbits, x.dtype, None)
        return _k.matmul(x, _k.swapaxes(dense, -1, -2) if transpose else dense)


def gather_qmm(x, w, /, scales, biases=None, lhs_indices=None, rhs_indices=None,
               transpose=True, group_size=None, bits=None, mode="affine", global_scale=None,
               *, sorted_indices=False, stream=None):
    """Quantized ``gather_mm``: ``w`` (with its ``scales``, and ``biases`` for
    ``"affine"``, sharing ``w``'s batch axes) is dequantized, then matrices are gathered by
    the flat batch indices and multiplied (``x @ w.T`` when ``transpose``). An nvfp4
    ``global_scale`` has one float32 entry per matrix of ``w``."""
    _check_mode("gather_qmm", mode)
    if mode == "affine":
        if global_scale is not None:
            _global_scale("gather_qmm", mode, global_scale)
        return _affine_gather_qmm(x, w, scales, biases, lhs_indices, rhs_indices, transpose,
                                  group_size, bits, mode, sorted_indices=sorted_indices,
                                  stream=stream)
    x, w, scales, gsize, nbits = _prepare_qmm("gather_qmm", x, w, scales, biases, mode,
                                              group_size, bits, transpose)
    gs = _global_scale("gather_qmm", mode, global_scale, shape=tuple(w.shape[:-2]))
    with _on(stream):
        dense = _dequantize_fp(w, scales, mode, gsize, nbits, x.dtype, gs).astype(x.dtype)
        if transpose:
            dense = _k.swapaxes(dense, -1, -2)
        return _extras.gather_mm(x, dense, lhs_indices, rhs_indices,
                                 sorted_indices=sorted_indices)


# ---------------------------------------------------------------------------------------
# Both operands quantized


def _make_ste():
    from kiln.core._transforms import custom_function

    f = custom_function(lambda x, xq: xq)

    @f.vjp
    def _(primals, cotangent, output):
        return cotangent, _k.zeros_like(primals[1])

    @f.jvp
    def _(primals, tangents):
        return tangents[0]

    return f


_STE = []


def _straight_through(x, xq):
    """``xq`` forward, with the gradient of ``x`` (rounding has none of its own): the
    straight-through estimator of quantization-aware training."""
    if not _STE:
        _STE.append(_make_ste())
    return _STE[0](x, xq)


def _fake_quantize(x, mode, gsize, bits, gs, dtype):
    """``x`` quantized and dequantized again, in ``dtype``, with the straight-through
    gradient."""
    q, s = _quantize_fp(x, mode, gsize, bits, gs)
    xq = _dequantize_fp(q, s, mode, gsize, bits, dtype, gs).astype(dtype)
    return _straight_through(x, _k.stop_gradient(xq))


def _qq_operands(op, x, w, scales, group_size, bits, mode, gsx, gsw, batched):
    _check_mode(op, mode)
    if mode == "affine":
        raise ValueError(f"[{op}] Quantized activations are only supported for 'nvfp4', "
                         f"'mxfp8' and 'mxfp4' modes, got affine.")
    x, w = _k.array(x), _k.array(w)
    _check_x(op, x, half_only=True)
    if w.dtype == _k.uint32 and scales is None:
        raise ValueError(f"[{op}] Scales must be provided if second argument is quantized.")
    if mode == "nvfp4" and (gsx is None) != (gsw is None):
        raise ValueError(f"[{op}] For nvfp4 mode, either both global_scale_x and "
                         f"global_scale_w must be provided, or neither.")
    gsize, nbits = _params(op, mode, group_size, bits)
    gsx = _global_scale(op, mode, gsx)
    if batched and gsw is not None and _k.array(gsw).size != 1:
        gsw = _global_scale(op, mode, gsw, shape=tuple(w.shape[:-2]))  # one per matrix
    else:
        gsw = _global_scale(op, mode, gsw)
    if not batched and w.ndim != 2:
        raise ValueError(f"[{op}] Only 2D inputs are supported but x.ndim() == {x.ndim} and "
                         f"w.ndim() == {w.ndim}.")
    if scales is not None:
        scales = _k.array(scales)
        if tuple(scales.shape[:-1]) != tuple(w.shape[:-1]):
            raise ValueError(f"[{op}] Weight and scales should have the same batch shape. "
                             f"Received weight with shape {_shape(w.shape)}, scales with "
                             f"{_shape(scales.shape)}.")
        _check_packed(op, w, scales, gsize, nbits)
        _check_inner(op, x, w, nbits, gsize, True)
    else:
        _check_x(op, w, half_only=True)
        if x.shape[-1] != w.shape[-1]:
            raise ValueError(f"[{op}] Last dimension of first input with shape (..., "
                             f"{x.shape[-1]}) does not match the second input with shape "
                             f"{_shape(w.shape)}.")
    if x.shape[-1] % gsize != 0:
        _check_quantize_input(op, x.reshape(-1, x.shape[-1]), gsize)

    xq = _fake_quantize(x if x.ndim > 1 else x[None], mode, gsize, nbits, gsx, x.dtype)
    if x.ndim == 1:
        xq = xq[0]
    if scales is not None:
        wq = _dequantize_fp(w, scales, mode, gsize, nbits, x.dtype, gsw).astype(x.dtype)
    else:
        wq = _fake_quantize(w, mode, gsize, nbits, gsw, x.dtype)
    return xq, wq


def qqmm(x, w, scales=None, group_size=None, bits=None, mode="nvfp4", global_scale_x=None,
         global_scale_w=None, *, stream=None):
    """``x @ w.T`` with ``x`` quantized on the fly and ``w`` quantized (uint32 with its
    ``scales``) or quantized on the fly: both operands are rounded to ``mode``'s format
    (``"nvfp4"``, ``"mxfp8"``, ``"mxfp4"``). A reference composition; gradients pass
    through the rounding unchanged (straight-through), to ``x`` and to an unquantized
    ``w``."""
    with _on(stream):
        xq, wq = _qq_operands("qqmm", x, w, scales, group_size, bits, mode, global_scale_x,
                              global_scale_w, batched=False)
        return _k.matmul(xq, _k.swapaxes(wq, -1, -2))


def gather_qqmm(x, w, /, scales=None, lhs_indices=None, rhs_indices=None, group_size=None,
                bits=None, mode="nvfp4", global_scale_x=None, global_scale_w=None, *,
                sorted_indices=False, stream=None):
    """:func:`qqmm` with matrix-level gather, as :func:`gather_mm`: the indices are flat
    indices over the batch axes of ``x`` and ``w``."""
    with _on(stream):
        xq, wq = _qq_operands("gather_qqmm", x, w, scales, group_size, bits, mode,
                              global_scale_x, global_scale_w, batched=True)
        return _extras.gather_mm(xq, _k.swapaxes(wq, -1, -2), lhs_indices, rhs_indices,
                                 sorted_indices=sorted_indices)


__all__ = ["dequantize", "gather_qmm", "gather_qqmm", "qqmm", "quantize", "quantized_matmul"]
