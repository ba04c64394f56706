"""Smaller ``mlx.core`` functions written with kiln's ops: dtype queries, graph helpers,
``convolve``, ``hadamard_transform`` and the gathered / masked / segmented matmuls."""

from __future__ import annotations

from kiln import _core as _k
from kiln.core import linalg as _linalg

matrix_norm = _linalg.norm

_KINDS = {
    "bool": lambda d: d == _k.bool_,
    "signed integer": lambda d: _k.issubdtype(d, _k.signedinteger),
    "unsigned integer": lambda d: _k.issubdtype(d, _k.unsignedinteger),
    "integral": lambda d: _k.issubdtype(d, _k.integer),
    "real floating": lambda d: _k.issubdtype(d, _k.floating),
    # complex dtypes arrive with the complex64 work; until then nothing is complex
    "complex floating": lambda d: hasattr(_k, "complexfloating")
    and _k.issubdtype(d, _k.complexfloating),
    "numeric": lambda d: d != _k.bool_,
}


def can_cast(from_, to):
    """Whether ``from_`` (an array or a dtype) can be cast to dtype ``to`` under the
    promotion rules: promoting the two together gives back ``to``."""
    if isinstance(from_, _k.array):
        from_ = from_.dtype
    elif not isinstance(from_, _k.Dtype):
        raise ValueError("[can_cast] `from_` must be an array or a dtype.")
    if not isinstance(to, _k.Dtype):
        raise TypeError("[can_cast] `to` must be a dtype.")
    from kiln.core._compat import result_type

    return result_type(from_, to) == to


def isdtype(dtype, kind):
    """Whether ``dtype`` belongs to ``kind``: a dtype, a kind string (``"bool"``,
    ``"signed integer"``, ``"unsigned integer"``, ``"integral"``, ``"real floating"``,
    ``"complex floating"``, ``"numeric"``) or a tuple of them."""
    if not isinstance(dtype, _k.Dtype):
        raise TypeError("isdtype(): `dtype` must be a Dtype.")
    kinds = kind if isinstance(kind, tuple) else (kind,)
    for k in kinds:
        if isinstance(k, _k.Dtype):
            if dtype == k:
                return True
        elif isinstance(k, str):
            if k not in _KINDS:
                raise ValueError(f"[isdtype] Unknown data type kind: {k!r}.")
            if _KINDS[k](dtype):
                return True
        else:
            raise ValueError(
                "[isdtype] `kind` must be a dtype, a string, or a tuple of dtypes and strings."
            )
    return False


def contiguous(a, /, allow_col_major=False, *, stream=None):
    """Force an array to be row contiguous, copying if necessary (``allow_col_major``:
    column-major counts as contiguous). Values are unchanged."""
    return _k._contiguous(a, allow_col_major, stream=stream)


def get_array_buffer_size(*args):
    """The size in bytes of the buffers behind the (evaluated) arrays in ``args`` (arrays
    or trees of arrays; other leaves are ignored), each buffer counted once at its allocated
    size."""
    from kiln.utils import tree_flatten

    seen = {}
    for _, leaf in tree_flatten(list(args)):
        if isinstance(leaf, _k.array):
            info = _k._buffer_info(leaf)
            if info is None:
                raise ValueError(
                    "[get_array_buffer_size] Arrays must be evaluated before querying buffer size."
                )
            seen[info[0]] = info[1]
    return sum(seen.values())


def convolve(a, v, /, mode="full", *, stream=None):
    """The discrete convolution of 1-D arrays (``v`` flipped, as in signal processing);
    ``mode`` is ``"full"``, ``"same"`` or ``"valid"``. The longer input is the signal."""
    a = a if isinstance(a, _k.array) else _k.array(a)
    v = v if isinstance(v, _k.array) else _k.array(v)
    if a.ndim != 1 or v.ndim != 1:
        raise ValueError("[convolve] Inputs must be 1D.")
    if a.size == 0 or v.size == 0:
        raise ValueError("[convolve] Inputs cannot be empty.")
    if mode not in ("full", "same", "valid"):
        raise ValueError("[convolve] Invalid mode.")
    if v.size > a.size:
        a, v = v, a
    n, m = a.size, v.size
    if mode == "full":
        lo = hi = m - 1
    elif mode == "same":
        lo = (m - 1) // 2 if m % 2 else m // 2
        hi = m - 1 - lo
    else:
        lo = hi = 0
    out = _k.conv_general(
        a.reshape(1, n, 1), v.reshape(1, m, 1), padding=([lo], [hi]), flip=True, stream=stream
    )
    return out.reshape(-1)


def _circulant(row):
    n = len(row)
    return [[row[(j - i) % n] for j in range(n)] for i in range(n)]


def _paley2(q):
    """Paley's second construction of a Hadamard matrix of order 2 (q + 1), q a prime
    = 1 mod 4: the symmetric conference matrix C = [[0, 1^T], [1, Q]] (Q the Jacobsthal
    matrix, Q_ij = chi(j - i), chi the quadratic character mod q), and
    H = C (x) [[1, 1], [1, -1]] + I (x) [[1, -1], [-1, -1]]."""
    squares = {(i * i) % q for i in range(1, q)}
    chi = [0] + [1 if a in squares else -1 for a in range(1, q)]
    c = [[0] + [1] * q] + [[1] + [chi[(j - i) % q] for j in range(q)] for i in range(q)]
    a, b = [[1, 1], [1, -1]], [[1, -1], [-1, -1]]
    n = q + 1
    return [[c[i][j] * a[r][s] + (b[r][s] if i == j else 0) for j in range(n) for s in range(2)]
            for i in range(n) for r in range(2)]


def _williamson(a, b, c, d):
    """Williamson's construction of a Hadamard matrix of order 4n from symmetric circulant
    +-1 matrices A, B, C, D of order n with A^2 + B^2 + C^2 + D^2 = 4n I (given by their
    first rows): [[A, B, C, D], [-B, A, -D, C], [-C, D, A, -B], [-D, -C, B, A]]."""
    A, B, C, D = (_circulant(r) for r in (a, b, c, d))
    neg = lambda m: [[-v for v in row] for row in m]  # noqa: E731
    blocks = [[A, B, C, D], [neg(B), A, neg(D), C], [neg(C), D, A, neg(B)],
              [neg(D), neg(C), B, A]]
    n = len(a)
    return [[blocks[bi][bj][i][j] for bj in range(4) for j in range(n)]
            for bi in range(4) for i in range(n)]


def _hadamard_base(m):
    """The order-12, 20 and 28 Hadamard matrices MLX composes with Sylvester's: 12 is
    Paley's second construction for q = 5; 20 and 28 are Williamson's with n = 5 and 7
    (A = 2I - J, the other three from the first rows below), transposed; checked against MLX's results
    in tests/python/test_issue22_rest.py."""
    if m == 12:
        return _paley2(5)  # symmetric
    if m == 20:
        w = _williamson([1, -1, -1, -1, -1], [-1, 1, 1, 1, 1], [-1, -1, 1, 1, -1],
                        [-1, 1, -1, -1, 1])
    else:
        w = _williamson([1, -1, -1, -1, -1, -1, -1], [-1, -1, 1, 1, 1, 1, -1],
                        [-1, 1, -1, 1, 1, -1, 1], [-1, 1, 1, -1, -1, 1, 1])
    return [list(col) for col in zip(*w)]  # the transform multiplies by the transpose


def hadamard_transform(a, scale=None, stream=None):
    """The Hadamard transform along the last axis, times ``scale`` (default ``1/sqrt(n)``,
    which makes it orthonormal), for ``n = m 2^k`` with ``m`` in 1, 12, 20, 28, as MLX:
    ``x @ H_n^T`` with ``H_n = H_m (x) S_k`` (``S_k`` Sylvester's matrix of order ``2^k``,
    ``H_m`` the fixed order-m matrix of ``_hadamard_base``). Integer inputs give float32."""
    a = a if isinstance(a, _k.array) else _k.array(a)
    if a.size == 0:
        raise ValueError("[hadamard_transform] Does not support empty arrays.")
    n = a.shape[-1] if a.ndim else 1
    m = next((m for m in (1, 12, 20, 28) if n % m == 0 and not (n // m) & (n // m - 1)), None)
    if m is None:
        raise ValueError("[hadamard] Only supports n = m*2^k where m in (1, 12, 20, 28).")
    dtype = a.dtype if _k.issubdtype(a.dtype, _k.floating) else _k.float32
    scale = 1.0 / (n**0.5) if scale is None else scale
    shape = a.shape
    p = n // m
    x = a.astype(_k.float32).reshape(-1, p)
    h = 1
    while h < p:  # one butterfly per bit of the index: H_2n = [[H, H], [H, -H]]
        y = x.reshape(-1, p // (2 * h), 2, h)
        lo, hi = y[:, :, 0, :], y[:, :, 1, :]
        x = _k.stack([lo + hi, lo - hi], axis=2).reshape(-1, p)
        h *= 2
    if m > 1:  # H_m on the axis of m: out[i, j] = sum_l H_m[i, l] x[l, j]
        hm = _k.array(_hadamard_base(m), dtype=_k.float32)
        x = _k.matmul(hm, x.reshape(-1, m, p))
    return _k.multiply(x, scale, stream=stream).reshape(shape).astype(dtype)


def unique(a, /, size, return_index=False, return_inverse=False, return_counts=False,
           fill_value=None, *, stream=None):
    """The sorted unique elements of the flattened ``a``, exactly ``size`` of them: a longer
    list is truncated to the smallest ``size``, a shorter one padded with ``fill_value``
    (default: the first unique element). Optionally also the index of each value's first
    occurrence (uint32), the ``inverse`` indices rebuilding ``a`` (uint32, shape of ``a``;
    clamped to ``size - 1`` when truncated) and the counts (int32, 0 for padding). NaNs are
    all distinct. Returns the values, or a tuple in the order values, index, inverse, counts.
    """
    a = a if isinstance(a, _k.array) else _k.array(a)
    size = int(size)
    if size < 0:
        raise ValueError(f"[unique] Received negative size {size}.")
    flat = a.reshape(-1)
    n = flat.size
    if n == 0 and size > 0 and fill_value is None:
        raise ValueError("[unique] A fill value is required for an empty input with a non-zero size.")
    if n:
        order = _k.argsort(flat, stream=stream)  # stable: ties keep their first occurrence first
        s = _k.take(flat, order, stream=stream)
        new = _k.concatenate([_k.array([True]), s[1:] != s[:-1]]) if n > 1 else _k.array([True])
        group = _k.cumsum(new.astype(_k.int32)) - 1
        # new elements land at their group; repeats and groups past `size` at `size`,
        # which the scatters drop
        slot = _k.where(new & (group < size), group, size)
    fill = (s[0] if n else _k.array(0, dtype=a.dtype)) if fill_value is None else _k.array(fill_value).astype(a.dtype)
    values = _k.broadcast_to(fill.astype(a.dtype), (size,))
    if n and size:
        values = _k.array(values)
        values[slot] = s
    outs = [values]
    if return_index:
        index = _k.zeros((size,), dtype=_k.uint32)
        if n and size:
            index[slot] = order.astype(_k.uint32)
            index = _k.where(_k.arange(size) < _k.minimum(group[-1] + 1, size), index, index[0])
        outs.append(index)
    if return_inverse:
        if n and size:
            inv = _k.zeros((n,), dtype=_k.uint32)
            inv[order] = _k.minimum(group, size - 1).astype(_k.uint32)
        else:
            inv = _k.zeros((n,), dtype=_k.uint32)
        outs.append(inv.reshape(a.shape))
    if return_counts:
        counts = _k.zeros((size,), dtype=_k.int32)
        if n and size:
            counts = counts.at[_k.where(group < size, group, size)].add(1)
        outs.append(counts)
    return outs[0] if len(outs) == 1 else tuple(outs)


def _fp8_table():
    """The float32 value of each e4m3 (fn) code: sign, 4 exponent bits (bias 7), 3 mantissa
    bits; exponent 0 is subnormal; codes 0x7F and 0xFF are NaN."""
    vals = []
    for c in range(256):
        e, m = (c >> 3) & 15, c & 7
        v = m * 2.0**-9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
        if e == 15 and m == 7:
            v = float("nan")
        vals.append(-v if c & 128 else v)
    return vals


_FP8 = None


def _fp8_values():
    global _FP8
    if _FP8 is None:
        _FP8 = _k.array(_fp8_table(), dtype=_k.float32)
    return _FP8


def to_fp8(x, *, stream=None):
    """Convert a floating array to fp8 (e4m3) codes, dtype uint8: round to nearest, ties
    to even; magnitudes past 448 (and infinities) saturate to +-448, NaN becomes 0x7E, as
    MLX."""
    if not _k.issubdtype(x.dtype, _k.floating):
        raise ValueError(
            f"[to_fp8] Only real floating types are supported but x.dtype() == {_dtype_name(x.dtype)}."
        )
    f = x.astype(_k.float32)
    pos = _fp8_values()[:127]  # the finite non-negative codes, ascending
    a = _k.minimum(_k.abs(f), 448.0)
    lo = _k.clip(_k.searchsorted(pos, a, side="right") - 1, 0, 126)
    hi = _k.minimum(lo + 1, 126)
    d_lo, d_hi = a - _k.take(pos, lo), _k.take(pos, hi) - a  # exact (Sterbenz)
    up = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    code = _k.where(up, hi, lo).astype(_k.uint8)
    sign = (_k.view(f, _k.uint32) >> 31).astype(_k.uint8) << 7
    return _k.where(_k.isnan(f), _k.array(126, dtype=_k.uint8), code | sign, stream=stream)


def from_fp8(x, dtype=None, *, stream=None):
    """Convert fp8 (e4m3) codes (uint8) to ``dtype`` (default bfloat16)."""
    dtype = _k.bfloat16 if dtype is None else dtype
    if x.dtype != _k.uint8:
        raise ValueError(
            f"[from_fp8] Input must have type uint8 but x.dtype() == {_dtype_name(x.dtype)}."
        )
    if not _k.issubdtype(dtype, _k.floating):
        raise ValueError(
            f"[from_fp8] Only real floating types are supported but dtype == {_dtype_name(dtype)}."
        )
    return _k.take(_fp8_values(), x.astype(_k.int32), stream=stream).astype(dtype)


def _dtype_name(d):
    return str(d).rsplit(".", 1)[-1]


def gather_mm(a, b, /, lhs_indices=None, rhs_indices=None, *, sorted_indices=False, stream=None):
    """Matrix multiplication after gathering matrices from the batch axes of ``a`` and
    ``b``: the indices are flat indices over all but the last two axes (every batch element
    when None); the output's batch shape is the indices' broadcast shape. Each picked matrix
    is read in place (on the CPU, one product per group of equal indices, sorted or not)."""
    return _k.gather_mm(a, b, lhs_indices, rhs_indices, sorted_indices=sorted_indices,
                        stream=stream)


def _expand_mask(mask, rows, cols, block_size):
    """A block mask ``(..., ceil(rows/bs), ceil(cols/bs))`` as an element mask
    ``(..., rows, cols)``."""
    m = _k.repeat(_k.repeat(mask, block_size, axis=-2), block_size, axis=-1)
    return m[..., :rows, :cols]


def block_masked_mm(a, b, /, block_size=64, mask_out=None, mask_lhs=None, mask_rhs=None,
                    *, stream=None):
    """Matrix multiplication with ``block_size x block_size`` blocks masked: boolean masks
    drop blocks, float masks scale them (``mask_lhs``/``mask_rhs`` on the inputs, ``mask_out``
    on the product). ``block_size`` must be 32 or 64."""
    if block_size not in (32, 64):
        raise ValueError(
            f"[block_masked_mm] Only block_sizes 32, 64 are supported. Got block size {block_size}."
        )
    if a.ndim < 2 or b.ndim < 2:
        raise ValueError("[block_masked_mm] Inputs must have at least 2 dimensions.")
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]

    def apply(x, mask, rows, cols):
        if mask is None:
            return x
        full = _expand_mask(mask, rows, cols, block_size)
        if full.dtype == _k.bool_:
            return _k.where(full, x, _k.zeros((), dtype=x.dtype), stream=stream)
        return _k.multiply(x, full, stream=stream)

    out = _k.matmul(apply(a, mask_lhs, m, k), apply(b, mask_rhs, k, n), stream=stream)
    return apply(out, mask_out, m, n)


def segmented_mm(a, b, /, segments, *, stream=None):
    """``a @ b`` restricted to each segment ``[start, end)`` of the inner axis:
    ``segments`` has shape ``(..., 2)`` and the result ``(..., M, N)``."""
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError("[segmented_mm] a and b must be matrices.")
    if segments.ndim < 1 or segments.shape[-1] != 2:
        raise ValueError("[segmented_mm] The last dimension of segments must be 2.")
    k = a.shape[-1]
    pos = _k.arange(k, dtype=_k.int32)
    seg = segments.astype(_k.int32)[..., None, :]  # (..., 1, 2)
    inside = (pos >= seg[..., 0]) & (pos < seg[..., 1])  # (..., K)
    masked = _k.where(inside[..., None, :], a, _k.zeros((), dtype=a.dtype))  # (..., M, K)
    return _k.matmul(masked, b, stream=stream)


__all__ = [
    "block_masked_mm", "can_cast", "contiguous", "convolve", "gather_mm",
    "from_fp8", "get_array_buffer_size", "hadamard_transform", "isdtype", "matrix_norm",
    "segmented_mm", "to_fp8", "unique",
]


def depends(inputs, dependencies):
    """Returns ``inputs`` (an array or a sequence of arrays) made to depend on
    ``dependencies``: evaluating an output first evaluates them. The values (and dtypes)
    are the inputs'; gradients flow to the inputs only."""
    single = isinstance(inputs, _k.array)
    ins = [inputs] if single else list(inputs)
    deps = [dependencies] if isinstance(dependencies, _k.array) else list(dependencies)
    for x in ins + deps:
        if not isinstance(x, _k.array):
            raise TypeError("[depends] inputs and dependencies must be arrays.")
    # An always-true condition computed from one element of each dependency: `where`
    # then returns the input unchanged, but only after the dependencies are evaluated.
    cond = _k.array(True)
    for d in deps:
        first = _k.stop_gradient(d.reshape(-1)[:1])
        cond = cond | _k.any(first != first)
    outs = [_k.where(cond, x, x) for x in ins]
    return outs[0] if single else outs


def einsum_path(subscripts, *operands):
    """The contraction order ``einsum`` would use for these operands (a greedy pairwise
    order) and a text summary: ``(path, info)``, ``path`` listing the operand positions
    contracted at each step."""
    import numpy as np

    shapes = [np.empty(tuple(o.shape), dtype=np.int8) for o in operands]
    path, _ = np.einsum_path(subscripts, *shapes, optimize="greedy")
    path = [tuple(p) for p in path[1:]]
    lhs, _, out = subscripts.replace(" ", "").partition("->")
    terms = lhs.split(",")
    sizes = {}
    for term, o in zip(terms, operands):
        for c, n in zip(term, o.shape):
            sizes[c] = n

    def cost(in_terms, result):
        idx = set("".join(in_terms))
        total = 1
        for c in idx:
            total *= sizes[c]
        inner = bool(idx - set(result))
        return total * (max(1, len(in_terms) - 1) + int(inner)), len(idx)

    naive, naive_scaling = cost(terms, out)
    live, opt, opt_scaling = list(terms), 0, 0
    for step in path:
        picked = [live[i] for i in step]
        for i in sorted(step, reverse=True):
            live.pop(i)
        rest = set(out).union(*live) if live else set(out)
        result = "".join(sorted(set("".join(picked)) & rest))
        c, s = cost(picked, result)
        opt, opt_scaling = opt + c, max(opt_scaling, s)
        live.append(result)
    info = (
        f"  Complete contraction:  {subscripts}\n"
        f"         Naive scaling:  {naive_scaling}\n"
        f"     Optimized scaling:  {opt_scaling}\n"
        f"      Naive FLOP count:  {naive}\n"
        f"  Optimized FLOP count:  {opt}\n"
    )
    return path, info


def gather_qmm(x, w, /, scales, biases=None, lhs_indices=None, rhs_indices=None,
               transpose=True, group_size=None, bits=None, mode="affine", global_scale=None,
               *, sorted_indices=False, stream=None):
    """Quantized ``gather_mm`` (affine): ``x[lhs] @ dequantize(w[rhs]).T`` (``w`` with its
    ``scales`` and ``biases`` sharing ``w``'s batch axes), each picked expert's packed
    matrix read in place on the CPU."""
    return _k.gather_qmm(
        x, w, scales, biases, lhs_indices, rhs_indices, transpose,
        64 if group_size is None else group_size, 4 if bits is None else bits,
        sorted_indices=sorted_indices, stream=stream)


__all__ += ["depends", "einsum_path", "gather_qmm"]


def from_dlpack(x, /, *, copy=None):
    """Create an array from an object that supports DLPack (``__dlpack__`` and
    ``__dlpack_device__``) on the CPU. kiln arrays own their memory, so the data are always
    copied; ``copy=False`` raises ``ValueError``."""
    import numpy as np

    if copy is False:
        raise ValueError("[from_dlpack] kiln cannot share external memory; use copy=None or True.")
    return _k.array(np.from_dlpack(x))


__all__ += ["from_dlpack"]


class ArrayLike:
    """Any Python object which has an ``__mlx_array__`` method that returns an
    :obj:`array` (for annotations; ``mx.array(obj)`` calls the method)."""


__all__ += ["ArrayLike"]
