"""GGUF files (version 3), as ``mx.save_gguf`` writes and ``mx.load`` reads them: unquantized
tensors (float32, float16, int8, int16, int32; loading also bfloat16, int64, float64) and
metadata (scalars and 1-D arrays of integer, float32 or bool type, strings, lists of
strings). Quantized GGUF tensor types are not supported.

Loading bounds every count and length by the bytes left before reading it, and checks types,
the alignment, shapes and offsets; a corrupt file raises ValueError("[load] <file>: ...").
"""

from __future__ import annotations

import os
import struct

import numpy as np

from kiln import _core
from kiln.core._io import _corrupt, _nbytes, _to_kiln

_ALIGN = 32
# ggml tensor types
_SAVE_TENSOR = {"float32": 0, "float16": 1, "int8": 24, "int16": 25, "int32": 26}
_LOAD_TENSOR = {0: "float32", 1: "float16", 24: "int8", 25: "int16", 26: "int32",
                27: "int64", 28: "float64", 30: "bfloat16"}
# ggml's block-quantized types kiln reads (32 values a block) into MLX's affine layout:
# type -> (name, bytes per block, bits).
_QUANTIZED = {2: ("q4_0", 18, 4), 3: ("q4_1", 20, 4), 8: ("q8_0", 34, 8)}
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


# Smallest encodings, to bound hostile counts by the bytes left before allocating anything:
# a key/value is a key length (8), a type (4) and at least a 1-byte value; a tensor info is
# a name length (8), a dimension count (4), a type (4) and an offset (8).
_MIN_KV, _MIN_INFO = 13, 24
_INT_TYPES = (0, 1, 2, 3, 4, 5, 10, 11)  # metadata types holding integers


class _Reader:
    """Reads a GGUF file's bytes in order; every failure names the file and what is wrong."""

    def __init__(self, data: bytes, where: str):
        self.data, self.pos, self.where = data, 0, where

    def fail(self, what: str) -> ValueError:
        return _corrupt(self.where, what)

    def left(self) -> int:
        return len(self.data) - self.pos

    def take(self, fmt: str, what: str):
        size = struct.calcsize(fmt)
        if size > self.left():
            raise self.fail(f"truncated GGUF file: {what} at byte {self.pos} needs {size} "
                            f"bytes, only {self.left()} are left")
        out = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return out if len(out) > 1 else out[0]

    def count(self, what: str, unit: int) -> int:
        """A uint64 count of items of at least ``unit`` bytes, bounded by the bytes left."""
        n = self.take("<Q", what)
        if n * unit > self.left():
            raise self.fail(f"{what} {n} needs more than the {self.left()} bytes left")
        return n

    def string(self, what: str) -> str:
        n = self.count(f"{what} length", 1)
        raw = self.data[self.pos:self.pos + n]
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} at byte {self.pos - n} is not valid UTF-8") from None

    def values(self, key: str, t: int, count: int):
        """``count`` values of metadata type ``t`` (already bounded by the caller)."""
        if t == _STRING:
            return [self.string(f"a string in {key!r}") for _ in range(count)]
        dt = np.dtype(_META_NP[t])
        # aligned copy: kiln reads numpy arrays through aligned typed slices
        a = np.frombuffer(self.data, dtype=dt, count=count, offset=self.pos).copy()
        self.pos += dt.itemsize * count
        return a.astype(bool) if t == 7 else a

    def value(self, key: str):
        """The metadata value after ``key``: a string, a list of strings or an array."""
        t = self.take("<I", f"the type of {key!r}")
        if t == _ARRAY:
            et = self.take("<I", f"the element type of {key!r}")
            unit = 8 if et == _STRING else self.item_size(key, et)
            vals = self.values(key, et, self.count(f"the length of {key!r}", unit))
            return t, (vals if et == _STRING else _core.array(vals))
        if t == _STRING:
            return t, self.string(f"the value of {key!r}")
        size = self.item_size(key, t)
        if size > self.left():
            raise self.fail(f"truncated GGUF file: the value of {key!r} at byte {self.pos}")
        return t, _core.array(self.values(key, t, 1).reshape(()))

    def item_size(self, key: str, t: int) -> int:
        if t not in _META_NP:
            raise self.fail(f"metadata {key!r} has unknown or unsupported value type {t}")
        return np.dtype(_META_NP[t]).itemsize


def _alignment(r: _Reader, t: int, value) -> int:
    align = int(np.asarray(value)) if t in _INT_TYPES else 0
    if align <= 0 or align & (align - 1):
        raise r.fail(f"general.alignment {value!r} is not a positive power of two")
    return align


def _header(r: _Reader):
    """The metadata, the alignment and the tensor infos of a GGUF file."""
    if r.take("<4s", "the magic") != b"GGUF":
        raise r.fail("not a GGUF file (bad magic)")
    version = r.take("<I", "the version")
    if version not in (2, 3):
        raise r.fail(f"unsupported GGUF version {version}")
    n_tensors, n_kv = r.take("<QQ", "the tensor and metadata counts")
    if n_tensors * _MIN_INFO + n_kv * _MIN_KV > r.left():
        raise r.fail(f"{n_tensors} tensors and {n_kv} metadata entries need more than the "
                     f"{r.left()} bytes left")
    meta, align = {}, _ALIGN
    for _ in range(n_kv):
        key = r.string("a metadata key")
        t, meta[key] = r.value(key)
        if key == "general.alignment":
            align = _alignment(r, t, meta[key])
    infos = {}
    for _ in range(n_tensors):
        info = _tensor_info(r)
        if info[0] in infos:  # which one the file means is unknowable
            raise r.fail(f"tensor {info[0]!r} appears twice")
        infos[info[0]] = info
    return meta, align, list(infos.values())


def _tensor_info(r: _Reader):
    name = r.string("a tensor name")
    nd = r.take("<I", f"the dimension count of {name!r}")
    if nd * 8 > r.left():
        raise r.fail(f"tensor {name!r}: {nd} dimensions need more than the {r.left()} bytes left")
    dims = r.take(f"<{nd}Q", f"the dimensions of {name!r}") if nd else ()
    dims = (dims,) if nd == 1 else dims
    t, off = r.take("<IQ", f"the type and offset of {name!r}")
    if t in _QUANTIZED:
        return name, tuple(reversed(dims)), _QUANTIZED[t][0], off
    if t not in _LOAD_TENSOR:
        raise r.fail(f"tensor {name!r}: unknown or unsupported GGUF tensor type {t}")
    return name, tuple(reversed(dims)), _LOAD_TENSOR[t], off


def _tensor(data: bytes, where: str, start: int, align: int, info):
    name, shape, dname, off = info
    dt = np.dtype(_NP[dname]).newbyteorder("<")
    n = _nbytes(where, shape, dt.itemsize)
    begin = _span(data, where, start, off, n, align)
    return _to_kiln(np.frombuffer(data, dt, count=n // dt.itemsize, offset=begin).reshape(shape),
                    dname)


def _span(data: bytes, where: str, start: int, off: int, n: int, align: int) -> int:
    """Where a tensor's ``n`` bytes at offset ``off`` of the data section (at ``start``)
    begin, once checked to be aligned and inside the file."""
    if off % align:
        raise _corrupt(where, f"offset {off} is not a multiple of the alignment {align}")
    begin = start + off
    if begin + n > len(data):
        raise _corrupt(where, f"data [{begin}, {begin + n}) run past the end of the file "
                              f"({len(data)} bytes)")
    return begin


def _quantized(data: bytes, where: str, start: int, align: int, info):
    """A Q4_0, Q4_1 or Q8_0 tensor as MLX loads it: the packed uint32 weights of
    ``mx.quantize(..., group_size=32)`` and float16 scales and biases (``w = scale * q +
    bias``): Q4_0 is ``d * (q - 8)``, Q4_1 ``d * q + m``, Q8_0 ``d * q`` with q int8 (so
    the unsigned value is q + 128)."""
    name, shape, kind, off = info
    _, block, bits = next(v for v in _QUANTIZED.values() if v[0] == kind)
    if not shape or shape[-1] % 32:
        raise _corrupt(where, f"a {kind} tensor needs a last axis that is a multiple of 32, "
                              f"got shape {shape}")
    blocks = _nbytes(where, shape, 1) // 32
    n = blocks * block
    begin = _span(data, where, start, off, n, align)
    raw = np.frombuffer(data, np.uint8, count=n, offset=begin).reshape(blocks, block)
    d = raw[:, :2].copy().view("<f2")[:, 0]
    if kind == "q8_0":
        q = (raw[:, 2:].view(np.int8).astype(np.int16) + 128).astype(np.uint32)
        scales, biases = d, d * np.float16(-128)
    else:
        nib = raw[:, 4 if kind == "q4_1" else 2:]
        # A block's 16 bytes hold values j (low nibble) and j + 16 (high nibble).
        q = np.concatenate([nib & 0xF, nib >> 4], axis=1).astype(np.uint32)
        scales = d
        biases = raw[:, 2:4].copy().view("<f2")[:, 0] if kind == "q4_1" else d * np.float16(-8)
    per = 32 // bits  # values per uint32, little-endian within the word
    q = q.reshape(-1, per) << (np.arange(per, dtype=np.uint32) * bits)
    packed = np.bitwise_or.reduce(q, axis=1).astype(np.uint32)
    rows = shape[:-1]
    stem = name[: -len(".weight")] if name.endswith(".weight") else name
    groups = rows + (shape[-1] // 32,)
    return {
        name: _to_kiln(packed.reshape(rows + (shape[-1] * bits // 32,)), "uint32"),
        f"{stem}.scales": _to_kiln(scales.reshape(groups), "float16"),
        f"{stem}.biases": _to_kiln(biases.reshape(groups), "float16"),
    }


def load_gguf(data: bytes, return_metadata: bool, where: str = "<bytes>"):
    """The arrays (and metadata) of a GGUF file's bytes; ``where`` names it in errors.
    Block-quantized tensors (Q4_0, Q4_1, Q8_0) become MLX's affine triplet: ``name``
    (packed), ``<stem>.scales`` and ``<stem>.biases``."""
    r = _Reader(data, where)
    meta, align, infos = _header(r)
    start = r.pos + (-r.pos) % align
    arrays = {}
    for info in infos:
        at = f"{where}: tensor {info[0]!r}"
        if info[2] in ("q4_0", "q4_1", "q8_0"):
            arrays.update(_quantized(data, at, start, align, info))
        else:
            arrays[info[0]] = _tensor(data, at, start, align, info)
    return (arrays, meta) if return_metadata else arrays
