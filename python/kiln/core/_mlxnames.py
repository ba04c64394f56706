"""MLX's names for graph nodes, shared by ``export_to_dot`` and the callback form of
``export_function``: arrays are named by a counter written as spreadsheet columns (``A`` ..
``Z``, ``AA`` ..), primitives by MLX's class names (``Add``, ``Broadcast``, ``Sum`` ..)."""

from __future__ import annotations

import io
import os
import re
from typing import Any

from kiln import _core


def letters(i: int) -> str:
    """The ``i``-th (from 0) array name: A .. Z, AA .. ZZ, AAA .."""
    s = ""
    i += 1
    while i > 0:
        i, r = divmod(i - 1, 26)
        s = chr(ord("A") + r) + s
    return s


# kiln's primitive names (``Primitive::name``) -> MLX's primitive class names, as MLX's
# ``export_to_dot`` labels them. Names missing here are shown capitalised.
_CLASS = {
    # The elementwise ops: their table rows carry MLX's class name.
    **{row[0]: row[1] for row in _core._elementwise_ops()},
    "where": "Select", "astype": "AsType", "copy": "Copy", "identity": "Identity",
    "sum": "Sum", "prod": "Prod", "max": "Max", "min": "Min", "all": "And", "any": "Or",
    "argmax": "ArgReduce", "argmin": "ArgReduce", "softmax": "Softmax",
    "logsumexp": "LogSumExp",
    "number_of_elements": "NumberOfElements", "reshape": "Reshape",
    "transpose": "Transpose", "broadcast_to": "Broadcast", "slice": "Slice",
    "concatenate": "Concatenate", "cumsum": "CumSum", "cumprod": "CumProd",
    "cummax": "CumMax", "cummin": "CumMin", "logcumsumexp": "CumLogAddExp", "sort": "Sort",
    "argsort": "ArgSort", "partition": "Partition", "argpartition": "ArgPartition",
    "searchsorted": "SearchSorted", "matmul": "Matmul", "random_bits": "RandomBits",
    "stop_gradient": "StopGradient", "conv": "Convolution", "arange": "Arange",
    "custom_function": "CustomTransforms", "real": "Real", "imag": "Imag",
    "conjugate": "Conjugate", "fft": "FFT", "ifft": "FFT", "rfft": "FFT", "irfft": "FFT",
    "gather": "Gather", "scatter": "Scatter", "scatter_add": "Scatter Sum",
    "scatter_prod": "Scatter Prod", "scatter_max": "Scatter Max",
    "scatter_min": "Scatter Min", "slice_update": "SliceUpdate",
    "masked_scatter": "MaskedScatter", "view": "View", "as_strided": "AsStrided",
    "linalg::inv": "Inverse", "linalg::tri_inv": "Inverse", "linalg::cholesky": "Cholesky",
    "linalg::qr": "QRF", "linalg::svd": "SVD", "linalg::eigh": "Eigh", "linalg::eig": "Eig",
    "linalg::lu": "LUF", "linalg::lu_factor": "LUF", "layer_norm": "LayerNorm",
    "rms_norm": "RMSNorm", "rope": "RoPE",
    "scaled_dot_product_attention": "ScaledDotProductAttention",
    "quantized_matmul": "QuantizedMatmul", "gather_mm": "GatherMM",
    "gather_qmm": "GatherQMM",
}


# Where MLX's exported graphs (the callback form of export_function) name the primitive
# class itself, not the variant export_to_dot shows.
_EXPORT_CLASS = {
    "sum": "Reduce", "prod": "Reduce", "max": "Reduce", "min": "Reduce", "all": "Reduce",
    "any": "Reduce", "scatter_add": "Scatter", "scatter_prod": "Scatter",
    "scatter_max": "Scatter", "scatter_min": "Scatter",
}


def class_name(kiln_name: str, exported: bool = False) -> str:
    """MLX's class name for a kiln primitive name (fused kernels keep theirs); as in
    exported graphs when ``exported``."""
    if exported and kiln_name in _EXPORT_CLASS:
        return _EXPORT_CLASS[kiln_name]
    if kiln_name in _CLASS:
        return _CLASS[kiln_name]
    if kiln_name.startswith("Compiled"):
        return kiln_name
    return "".join(p[:1].upper() + p[1:] for p in re.split(r"[_:]+", kiln_name))


_QUOTED = re.compile(r'(label =)?"([^"]*)"')


def mlx_dot(text: str, named: set, n_named: int) -> str:
    """kiln's DOT text with MLX's names: unnamed arrays lettered in order of first
    appearance after one letter per named array, labels as MLX's classes."""
    names: dict = {}
    counter = [n_named]

    def sub(m: "re.Match") -> str:
        if m.group(1):
            return f'label ="{class_name(m.group(2))}"'
        node = m.group(2)
        if node in named:
            return m.group(0)
        if node not in names:
            names[node] = letters(counter[0])
            counter[0] += 1
        return f'"{names[node]}"'

    # MLX's text ends at the closing brace.
    return _QUOTED.sub(sub, text).rstrip("\n")


def export_to_dot(file: Any, *args: Any, **kwargs: Any) -> None:
    """Writes the graph behind ``args`` to ``file`` (a path or an object with ``write``)
    in Graphviz's DOT format, as MLX's ``export_to_dot``: keyword arguments name arrays,
    other arrays are named ``A``, ``B``, .. (each named array takes one letter first),
    primitives are labelled with MLX's class names."""
    buf = io.StringIO()
    _core.export_to_dot(buf, *args, **kwargs)
    named = {k.replace('"', "'") for k in kwargs}
    text = mlx_dot(buf.getvalue(), named, len(kwargs))
    if hasattr(file, "write"):
        file.write(text)
        return
    try:
        path = os.fspath(file)
    except TypeError:
        raise TypeError(
            f"[export_to_dot] Expected a file path or a writable file, got "
            f"{type(file).__name__}."
        ) from None
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as e:
        raise OSError(f"[export_to_dot] Cannot write {path}: {e}") from None
