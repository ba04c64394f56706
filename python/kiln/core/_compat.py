"""mlx.core names that are aliases or short compositions of kiln's ops, written once here.

Each is the same function MLX documents; none adds a primitive, so gradients, vmap and (later)
compile see the ops they are made of.
"""

from __future__ import annotations

import math as _math

from kiln import _core as _k

# ---- constants ---------------------------------------------------------------------------
pi = _math.pi
e = _math.e
inf = float("inf")
nan = float("nan")
euler_gamma = 0.5772156649015329
newaxis = None

# ---- aliases (array API names) -----------------------------------------------------------
acos, acosh, asin, asinh = _k.arccos, _k.arccosh, _k.arcsin, _k.arcsinh
atan, atan2, atanh = _k.arctan, _k.arctan2, _k.arctanh
bitwise_left_shift, bitwise_right_shift = _k.left_shift, _k.right_shift
concat = _k.concatenate
pow = _k.power  # noqa: A001 (the array API name)
permute_dims = _k.transpose


def asarray(a, dtype=None, *, copy=None):
    """``a`` as a new array object (values shared when nothing converts them: arrays are
    immutable). As MLX, ``copy=False`` raises ValueError: creating an array always copies."""
    if copy is False:
        raise ValueError("Unable to avoid copy while creating an array as requested.")
    return _k.array(a, dtype=dtype)


def stop_gradient(a, /, *, stream=None):
    """``a`` unchanged, with no gradient flowing through it. As MLX, ``a`` must be an array
    (a list, scalar or numpy array raises TypeError rather than being converted)."""
    if not isinstance(a, _k.array):
        raise TypeError(
            "stop_gradient(): incompatible function arguments. The following argument types "
            "are supported:\n    1. stop_gradient(a: array, /, *, stream=None) -> array\n\n"
            f"Invoked with types: {type(a).__name__}"
        )
    return _k.stop_gradient(a, stream=stream)


def positive(a, stream=None):
    """``+a``."""
    return asarray(a)


def empty(shape, dtype=_k.float32, stream=None):
    """An array of ``shape`` (kiln fills it with zeros)."""
    return _k.zeros(shape, dtype=dtype)


def empty_like(a, stream=None):
    """An array like ``a`` (kiln fills it with zeros)."""
    return _k.zeros_like(a)


def _atleast(n, arrays):
    """numpy's placement of new axes: (N,) -> (1, N) -> (1, N, 1); (M, N) -> (M, N, 1)."""
    out = []
    for a in arrays:
        a = asarray(a)
        shape = list(a.shape)
        if a.ndim < n:
            if a.ndim == 0:
                shape = [1] * n
            elif a.ndim == 1:
                shape = [1, shape[0]] + [1] * (n - 2)
            else:
                shape = shape + [1]
            a = a.reshape(shape)
        out.append(a)
    return out[0] if len(out) == 1 else out


def atleast_1d(*arrays, stream=None):
    """Each input with at least one dimension."""
    return _atleast(1, arrays)


def atleast_2d(*arrays, stream=None):
    """Each input with at least two dimensions."""
    return _atleast(2, arrays)


def atleast_3d(*arrays, stream=None):
    """Each input with at least three dimensions."""
    return _atleast(3, arrays)


def broadcast_shapes(*shapes):
    """numpy's broadcast of several shapes."""
    out: list[int] = []
    for s in shapes:
        s = list(s)
        n = max(len(out), len(s))
        a, b = [1] * (n - len(out)) + out, [1] * (n - len(s)) + s
        merged = []
        for x, y in zip(a, b):
            if x != y and 1 not in (x, y):
                raise ValueError(f"[broadcast_shapes] Shapes {tuple(out)} and {tuple(s)} cannot be broadcast.")
            merged.append(y if x == 1 else x)
        out = merged
    return tuple(out)


def degrees(a, stream=None):
    """Radians to degrees."""
    return _k.multiply(a, 180.0 / _math.pi)


def radians(a, stream=None):
    """Degrees to radians."""
    return _k.multiply(a, _math.pi / 180.0)


def trunc(a, stream=None):
    """Rounds toward zero."""
    a = asarray(a)
    if not _k.issubdtype(a.dtype, _k.floating):
        return a
    return _k.where(a < 0, _k.ceil(a), _k.floor(a))


def logical_xor(a, b, stream=None):
    """Elementwise logical exclusive or."""
    return _k.not_equal(_k.astype(asarray(a), _k.bool_), _k.astype(asarray(b), _k.bool_))


def flip(a, axis=None, stream=None):
    """Reverses the order of elements along ``axis`` (all axes when None)."""
    a = asarray(a)
    axes = range(a.ndim) if axis is None else ([axis] if isinstance(axis, int) else axis)
    index = [slice(None)] * a.ndim
    for ax in axes:
        index[ax % a.ndim] = slice(None, None, -1)
    return a[tuple(index)]


def matrix_transpose(a, stream=None):
    """Swaps the last two axes."""
    return _k.swapaxes(a, -1, -2)


def trace(a, offset=0, axis1=0, axis2=1, dtype=None, stream=None):
    """The sum along a diagonal."""
    out = _k.sum(_k.diagonal(a, offset, axis1, axis2), axis=-1)
    return out if dtype is None else out.astype(dtype)


def diff(a, n=1, axis=-1, stream=None):
    """The n-th discrete difference along ``axis``."""
    a = asarray(a)
    for _ in range(n):
        size = a.shape[axis]
        head = [slice(None)] * a.ndim
        tail = [slice(None)] * a.ndim
        head[axis], tail[axis] = slice(1, size), slice(0, size - 1)
        a = a[tuple(head)] - a[tuple(tail)]
    return a


def kron(a, b, stream=None):
    """The Kronecker product."""
    a, b = asarray(a), asarray(b)
    n = max(a.ndim, b.ndim)
    a = a.reshape([1] * (n - a.ndim) + list(a.shape))
    b = b.reshape([1] * (n - b.ndim) + list(b.shape))
    inter_a = [d for s in a.shape for d in (s, 1)]
    inter_b = [d for s in b.shape for d in (1, s)]
    out = a.reshape(inter_a) * b.reshape(inter_b)
    return out.reshape([x * y for x, y in zip(a.shape, b.shape)])


def unstack(a, axis=0, stream=None):
    """The slices of ``a`` along ``axis``, as a list."""
    a = asarray(a)
    return [_k.squeeze(p, axis) for p in _k.split(a, a.shape[axis], axis=axis)]


def vecdot(a, b, axis=-1, stream=None):
    """The dot product of vectors along ``axis``."""
    return _k.sum(_k.multiply(a, b), axis=axis)


def result_type(*arrays_and_dtypes):
    """The dtype of an op over these operands (MLX's promotion; Python scalars are weak)."""
    probe = None
    for x in arrays_and_dtypes:
        if isinstance(x, _k.Dtype):
            x = _k.zeros((), dtype=x)
        probe = x if probe is None else _k.add(probe, x) if isinstance(probe, _k.array) or isinstance(x, _k.array) else probe + x
    return probe.dtype if isinstance(probe, _k.array) else _k.array(probe).dtype


def get_memory_limit():
    """The memory limit in bytes (see ``set_memory_limit``)."""
    limit = _k.set_memory_limit(0)
    _k.set_memory_limit(limit)
    return limit


def async_eval(*args):
    """Evaluates like ``eval`` but returns once the work is issued: GPU kernels may still
    run (``mx.synchronize()`` or reading a value waits). The CPU evaluates synchronously.

    As MLX, it is refused inside a graph transformation (grad, vjp, jvp, vmap, compile):
    kiln sees that through the arrays given, which then depend on the transform's inputs."""
    if any(_k._is_tracer(a) for a in _tree_arrays(args)):
        raise ValueError("[async_eval] Not allowed inside a graph transformation.")
    _k.async_eval(*args)


def _tree_arrays(tree):
    """The arrays in a tree of lists, tuples and dicts (other leaves are skipped)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, _k.array):
            yield node
        elif isinstance(node, (list, tuple)):
            stack.extend(node)
        elif isinstance(node, dict):
            stack.extend(node.values())


def _window(m, fn):
    if m < 1:
        return _k.array([], dtype=_k.float32)
    if m == 1:
        return _k.ones((1,))
    n = _k.arange(m, dtype=_k.float32)
    return fn(n, m - 1)


def hanning(m, stream=None):
    """The Hann window of ``m`` points."""
    return _window(m, lambda n, d: 0.5 - 0.5 * _k.cos(2 * _math.pi * n / d))


def hamming(m, stream=None):
    """The Hamming window of ``m`` points."""
    return _window(m, lambda n, d: 0.54 - 0.46 * _k.cos(2 * _math.pi * n / d))


def blackman(m, stream=None):
    """The Blackman window of ``m`` points."""
    return _window(m, lambda n, d: 0.42 - 0.5 * _k.cos(2 * _math.pi * n / d)
                   + 0.08 * _k.cos(4 * _math.pi * n / d))


def bartlett(m, stream=None):
    """The Bartlett (triangular) window of ``m`` points."""
    return _window(m, lambda n, d: 1 - _k.abs(2 * n / d - 1))
