"""GGUF files (version 3), as ``mx.save_gguf`` writes and ``mx.load`` reads them: unquantized
tensors (float32, float16, int8, int16, int32; loading also bfloat16, int64, float64) and
metadata (scalars and 1-D arrays of integer, float32 or bool type, strings, lists of
strings). Quantized GGUF tensor types are not supported."""

from __future__ import annotations

import os
import struct

import numpy as np

from kiln import _core

_ALIGN = 32
# ggml tensor types
_SAVE_TENSOR = {"float32": 0, "float16": 1, "int8": 24, "int16": 25, "int32": 26}
_LOAD_TENSOR = {0: "float32", 1: "float16", 24: "int8", 25: "int16", 26: "int32",
                27: "int64", 28: "float64", 30: "bfloat16"}
_NP = {"float32": np.float32, "float16": np.float16, "int8": np.int8, "int16": np.int16,
       "int32": np.int32, "int64": np.int64, "float64": np.float64, "bfloat16": np.uint16}
# GGUF metadata value types
_META = {"uint8": 0, "int8": 1, "uint16": 2, "int16": 3, "uint32": 4, "int32": 5,
         "float32": 6, "bool": 7, "uint64": 10, "int64": 11}
_STRING, _ARRAY = 8, 9
_META_NP = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "<u1",
            10: "<u8", 11: "<i8", 12: "<f8"}


def _name(dtype) -> str:
    return repr(dtype).rsplit(".", 1)[-1]


def _string(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _meta_value(key: str, value) -> bytes:
    if isinstance(value, str):
        return struct.pack("<I", _STRING) + _string(value)
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        out = struct.pack("<IIQ", _ARRAY, _STRING, len(value))
        return out + b"".join(_string(v) for v in value)
    if not isinstance(value, _core.array):
        raise ValueError(
            f"[save_gguf] Metadata {key!r} must be an array, a string or a list of strings."
        )
    if value.ndim > 1:
        raise ValueError("[save_gguf] Cannot save arrays with more than one dimension.")
    name = _name(value.dtype)
    if name not in _META:
        raise ValueError(f"[save_gguf] array type {name} not support for metadata.")
    t = _META[name]
    data = np.asarray(value.astype(_core.uint8) if name == "bool" else value).astype(_META_NP[t])
    if value.ndim == 0:
        return struct.pack("<I", t) + data.tobytes()
    return struct.pack("<IIQ", _ARRAY, t, value.size) + data.tobytes()


def _pad(n: int) -> int:
    return (-n) % _ALIGN


def save_gguf(file, arrays: dict, metadata: dict | None = None) -> None:
    """Save arrays to a binary file in ``.gguf`` format (the suffix is added when missing).

    Args:
        file (str or pathlib.Path): The file to write.
        arrays (dict(str, array)): Names to arrays (float32, float16, int8, int16, int32).
        metadata (dict(str, array | str | list(str))): Scalars or 1-D arrays, strings and
            lists of strings.
    """
    if isinstance(file, (str, os.PathLike)):
        file = os.fspath(file)
        file = file if file.endswith(".gguf") else file + ".gguf"
    metadata = metadata or {}
    blobs, infos, offset = [], [], 0
    for name, arr in arrays.items():
        if not isinstance(arr, _core.array):
            raise ValueError(f"[save_gguf] Expected an array for {name!r}.")
        dname = _name(arr.dtype)
        if dname not in _SAVE_TENSOR:
            raise RuntimeError(f"[save_gguf] dtype {dname} is not supported")
        data = np.ascontiguousarray(np.asarray(arr)).tobytes()
        dims = list(reversed(arr.shape))  # ggml lists the fastest-varying axis first
        info = _string(name) + struct.pack("<I", len(dims))
        info += b"".join(struct.pack("<Q", d) for d in dims)
        info += struct.pack("<IQ", _SAVE_TENSOR[dname], offset)
        infos.append(info)
        blobs.append(data + b"\0" * _pad(len(data)))
        offset += len(blobs[-1])
    kvs = [_string(k) + _meta_value(k, v) for k, v in metadata.items()]
    head = b"GGUF" + struct.pack("<IQQ", 3, len(infos), len(kvs)) + b"".join(kvs)
    head += b"".join(infos)
    head += b"\0" * _pad(len(head))
    payload = head + b"".join(blobs)
    if isinstance(file, str):
        with open(file, "wb") as f:
            f.write(payload)
    else:
        file.write(payload)


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise ValueError("[load] Truncated GGUF file.")
        out = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return out if len(out) > 1 else out[0]

    def string(self) -> str:
        n = self.take("<Q")
        if self.pos + n > len(self.data):
            raise ValueError("[load] Truncated GGUF file.")
        s = self.data[self.pos:self.pos + n].decode("utf-8")
        self.pos += n
        return s

    def values(self, t: int, count: int):
        if t == _STRING:
            return [self.string() for _ in range(count)]
        if t not in _META_NP:
            raise ValueError(f"[load] Unsupported GGUF metadata type {t}.")
        dt = np.dtype(_META_NP[t])
        end = self.pos + dt.itemsize * count
        if end > len(self.data):
            raise ValueError("[load] Truncated GGUF file.")
        # aligned copy: kiln reads numpy arrays through aligned typed slices
        a = np.frombuffer(self.data, dtype=dt, count=count, offset=self.pos).copy()
        self.pos = end
        return a.astype(bool) if t == 7 else a


def load_gguf(data: bytes, return_metadata: bool):
    """The arrays (and metadata) of a GGUF file's bytes."""
    r = _Reader(data)
    if r.take("<4s") != b"GGUF":
        raise ValueError("[load] Not a GGUF file.")
    version, n_tensors, n_kv = r.take("<IQQ")
    if version not in (2, 3):
        raise ValueError(f"[load] Unsupported GGUF version {version}.")
    meta, align = {}, _ALIGN
    for _ in range(n_kv):
        key, t = r.string(), r.take("<I")
        if t == _ARRAY:
            et, count = r.take("<IQ")
            vals = r.values(et, count)
            meta[key] = vals if et == _STRING else _core.array(vals)
        elif t == _STRING:
            meta[key] = r.string()
        else:
            meta[key] = _core.array(r.values(t, 1).reshape(()))
        if key == "general.alignment" and t != _STRING:
            align = int(np.asarray(meta[key]))
    infos = []
    for _ in range(n_tensors):
        name, nd = r.string(), r.take("<I")
        dims = [r.take("<Q") for _ in range(nd)]
        t, off = r.take("<IQ")
        if t not in _LOAD_TENSOR:
            raise ValueError(f"[load] Unsupported GGUF tensor type {t} for {name!r}.")
        infos.append((name, tuple(reversed(dims)), _LOAD_TENSOR[t], off))
    start = r.pos + (-r.pos) % align
    arrays = {}
    for name, shape, dname, off in infos:
        count = int(np.prod(shape, dtype=np.int64))
        dt = np.dtype(_NP[dname]).newbyteorder("<")
        begin = start + off
        if begin + count * dt.itemsize > len(data):
            raise ValueError(f"[load] Truncated GGUF tensor {name!r}.")
        a = np.frombuffer(data, dtype=dt, count=count, offset=begin).reshape(shape)
        a = np.require(a, requirements="A")  # copies only when misaligned
        if dname == "bfloat16":
            arrays[name] = _core._from_raw_bytes(a.tobytes(), list(shape), _core.bfloat16)
        else:
            arrays[name] = _core.array(a, dtype=getattr(_core, dname))
    return (arrays, meta) if return_metadata else arrays
