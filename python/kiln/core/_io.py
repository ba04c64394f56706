"""Saving and loading arrays: .npy, .npz and .safetensors, as mlx.core's save/load.

bfloat16 has no numpy dtype: in .npy/.npz it is stored as raw 2-byte values ('<V2'), the way
MLX writes it, and read back as bfloat16.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import struct
import zipfile

import numpy as np

from kiln import _core

_NUMPY = {  # kiln dtype name -> numpy dtype string (little-endian)
    "bool": "|b1", "uint8": "|u1", "uint16": "<u2", "uint32": "<u4", "uint64": "<u8",
    "int8": "|i1", "int16": "<i2", "int32": "<i4", "int64": "<i8", "float16": "<f2",
    "bfloat16": "|V2", "float32": "<f4", "float64": "<f8", "complex64": "<c8",
}
_SAFETENSORS = {
    "bool": "BOOL", "uint8": "U8", "uint16": "U16", "uint32": "U32", "uint64": "U64",
    "int8": "I8", "int16": "I16", "int32": "I32", "int64": "I64", "float16": "F16",
    "bfloat16": "BF16", "float32": "F32", "float64": "F64", "complex64": "C64",
}
_FROM_SAFETENSORS = {v: k for k, v in _SAFETENSORS.items()}


def _name(dtype) -> str:
    return repr(dtype).rsplit(".", 1)[-1]


def _dtype(name: str):
    return getattr(_core, "bool_" if name == "bool" else name)


def _path(file, suffix: str):
    if isinstance(file, (str, os.PathLike)):
        file = os.fspath(file)
        return file if file.endswith(suffix) else file + suffix
    return file


def _check_array(op: str, arr) -> None:
    if not isinstance(arr, _core.array):
        raise ValueError(f"[{op}] Expected an array, got {type(arr).__name__}.")


def _to_numpy(arr) -> np.ndarray:
    """A numpy array with the exact bytes of ``arr`` (bfloat16 as raw 2-byte values)."""
    raw = _core._raw_bytes(arr)
    return np.frombuffer(raw, dtype=_NUMPY[_name(arr.dtype)]).reshape(arr.shape)


def _from_numpy(a: np.ndarray):
    a = np.ascontiguousarray(a)
    if a.dtype.kind == "V" and a.dtype.itemsize == 2:
        return _core._from_raw_bytes(a.tobytes(), list(a.shape), _core.bfloat16)
    return _core.array(a, dtype=_dtype(str(a.dtype)) if a.dtype.kind != "V" else None)


def save(file, arr) -> None:
    """Saves an array to ``file`` in .npy format (``.npy`` is appended to a path without it)."""
    _check_array("save", arr)
    target = _path(file, ".npy")
    data = _to_numpy(arr)
    if isinstance(target, str):
        with open(target, "wb") as f:
            np.lib.format.write_array(f, data, allow_pickle=False)
    else:
        np.lib.format.write_array(target, data, allow_pickle=False)


def _savez(op: str, file, compress: bool, args, kwargs) -> None:
    named = {f"arr_{i}": a for i, a in enumerate(args)}
    for k, a in kwargs.items():
        if k in named:
            raise ValueError(f"[{op}] Cannot use un-named variables and keyword {k}.")
        named[k] = a
    mode = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    target = _path(file, ".npz")
    with zipfile.ZipFile(target, "w", compression=mode) as z:
        for k, a in named.items():
            _check_array(op, a)
            buf = io.BytesIO()
            np.lib.format.write_array(buf, _to_numpy(a), allow_pickle=False)
            z.writestr(k + ".npy", buf.getvalue())


def savez(file, *args, **kwargs) -> None:
    """Saves several arrays to an uncompressed .npz file (positional ones as ``arr_0``...)."""
    _savez("savez", file, False, args, kwargs)


def savez_compressed(file, *args, **kwargs) -> None:
    """Saves several arrays to a compressed .npz file."""
    _savez("savez_compressed", file, True, args, kwargs)


def save_safetensors(file, arrays: dict, metadata: dict | None = None) -> None:
    """Saves a dict of arrays (and optional string metadata) in .safetensors format."""
    header: dict = {}
    if metadata:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise ValueError("[save_safetensors] Metadata keys and values must be strings.")
        header["__metadata__"] = dict(metadata)
    blobs, offset = [], 0
    for name in sorted(arrays):
        a = arrays[name]
        _check_array("save_safetensors", a)
        raw = _core._raw_bytes(a)
        header[name] = {
            "dtype": _SAFETENSORS[_name(a.dtype)],
            "shape": list(a.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    with open(_path(file, ".safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def _load_npy(f):
    return _from_numpy(np.lib.format.read_array(f, allow_pickle=False))


def _load_safetensors(data: bytes, return_metadata: bool):
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    metadata = header.pop("__metadata__", {}) or {}
    base = 8 + n
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dtype = _dtype(_FROM_SAFETENSORS[info["dtype"]])
        out[name] = _core._from_raw_bytes(data[base + begin : base + end], info["shape"], dtype)
    return (out, metadata) if return_metadata else out


def load(file, /, format: str | None = None, return_metadata: bool = False, *, stream=None):
    """Loads arrays from .npy (an array), .npz, .safetensors or .gguf (a dict of arrays;
    with ``return_metadata``, also the safetensors/gguf metadata)."""
    if format is None:
        if not isinstance(file, (str, os.PathLike)):
            raise ValueError("[load] Cannot infer the format of a file object: pass format=.")
        format = os.fspath(file).rsplit(".", 1)[-1] if "." in os.fspath(file) else ""
    if format not in ("npy", "npz", "safetensors", "gguf"):
        raise ValueError(
            f"[load] Unsupported format {format!r}: use npy, npz, safetensors or gguf."
        )
    if return_metadata and format not in ("safetensors", "gguf"):
        raise ValueError("[load] return_metadata is only supported for safetensors and gguf files.")

    named = isinstance(file, (str, os.PathLike))
    with open(file, "rb") if named else contextlib.nullcontext(file) as f:
        if format == "npy":
            return _load_npy(f)
        if format == "npz":
            with zipfile.ZipFile(f) as z:
                return {
                    n[:-4] if n.endswith(".npy") else n: _load_npy(io.BytesIO(z.read(n)))
                    for n in z.namelist()
                }
        if format == "gguf":
            from kiln.core._gguf import load_gguf

            return load_gguf(f.read(), return_metadata)
        return _load_safetensors(f.read(), return_metadata)



def _unpickle(data: bytes, shape, dtype_name: str):
    """Rebuilds a pickled array (see ``array.__reduce__``)."""
    return _core._from_raw_bytes(data, list(shape), _dtype(dtype_name))
