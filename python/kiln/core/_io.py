"""Saving and loading arrays: .npy, .npz and .safetensors, as mlx.core's save/load.

bfloat16 has no numpy dtype: in .npy/.npz it is stored as raw 2-byte values ('<V2'), the way
MLX writes it, and read back as bfloat16.

Loading trusts nothing in a file: every length, count, shape, dtype and offset is checked
against the bytes there before anything is allocated, and a corrupt file raises one
ValueError, "[load] <file>: <what is wrong>" (naming the tensor or zip member concerned).
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import math
import os
import struct
import warnings
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


# --- loading: every check names the file (and the tensor or zip member) in one ValueError ---

_NPY_MAGIC = b"\x93NUMPY"
_NPY_MAX_HEADER = 10000  # numpy's own cap: literal_eval on a long hostile header is slow
_MAX_BYTES = 1 << 63  # kiln sizes and strides are 64-bit: larger element counts would wrap
_CHUNK = 1 << 26  # reads of unknown length grow by at most this much per step
_REAL_FILES = (io.FileIO, io.BufferedReader, io.BufferedRandom)  # np.fromfile reads these
_ITEMSIZE = {k: np.dtype(v).itemsize for k, v in _NUMPY.items()}
# (numpy kind, item size) -> kiln dtype name, for a .npy descr in any byte order
_NPY_KINDS = {(np.dtype(v).kind, np.dtype(v).itemsize): k for k, v in _NUMPY.items()}


def _label(file) -> str:
    """The file's name for error messages."""
    if isinstance(file, (str, os.PathLike)):
        return os.fsdecode(file)
    name = getattr(file, "name", None)
    return name if isinstance(name, str) else f"<{type(file).__name__}>"


def _corrupt(where: str, what: str) -> ValueError:
    return ValueError(f"[load] {where}: {what}")


def _why(e: Exception) -> str:
    """A library's exception, as the reason in a load error."""
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def _nbytes(where: str, shape, itemsize: int) -> int:
    """The byte size of ``shape``, after checking it is a list of non-negative ints whose
    element count (zero dimensions aside, as strides still use the others) fits 63 bits."""
    if not isinstance(shape, (list, tuple)) or not all(
        type(d) is int and d >= 0 for d in shape
    ):
        raise _corrupt(where, f"shape {shape!r} is not a list of non-negative integers")
    if math.prod(d for d in shape if d) * itemsize >= _MAX_BYTES:
        raise _corrupt(where, f"shape {list(shape)} is too large")
    return math.prod(shape) * itemsize


def _to_kiln(a: np.ndarray, name: str):
    """A kiln array of dtype ``name`` with the values of ``a`` (bfloat16: raw 2-byte ones)."""
    if name == "bool":
        a = a.view(np.uint8) != 0  # kiln bools must be 0 or 1
    if not (a.flags.c_contiguous and a.flags.aligned):
        a = a.copy(order="C")  # kiln reads numpy arrays through aligned typed slices
    if name == "bfloat16":
        return _core._from_raw_bytes(a.tobytes(), list(a.shape), _core.bfloat16)
    return _core.array(a, dtype=_dtype(name))


def _available(f):
    """Bytes left in ``f`` from its position, or None when it cannot tell cheaply."""
    try:
        if not f.seekable():
            return None
        pos = f.tell()
        end = f.seek(0, os.SEEK_END)
        f.seek(pos)
        return end - pos
    except (AttributeError, OSError, ValueError):
        return None


def _take(f, n: int, where: str, what: str, known: bool) -> bytes:
    """Exactly ``n`` bytes of ``f``. Unless ``n`` is known to be there, reads in chunks, so a
    hostile length cannot make one huge allocation."""
    parts, left = [], n
    while left:
        part = f.read(left if known else min(left, _CHUNK))
        if not part:
            break
        parts.append(bytes(part))
        left -= len(part)
    if left:
        raise _corrupt(where, f"truncated: {what} needs {n} bytes, only {n - left} are left")
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _npy_dtype(where: str, descr):
    """The numpy dtype and kiln dtype name of a .npy ``descr``."""
    dt = None
    if isinstance(descr, str) and len(descr) <= 16:
        try:
            dt = np.dtype(descr)
        except Exception:  # numpy raises TypeError, ValueError or SyntaxError here
            dt = None
    name = None
    if dt is not None and dt.fields is None and dt.subdtype is None:
        name = _NPY_KINDS.get((dt.kind, dt.itemsize))
    if name is None:
        raise _corrupt(where, f"unsupported .npy dtype {descr!r}")
    return dt, name


def _npy_header(where: str, text: str):
    """(numpy dtype, kiln dtype name, fortran order, shape) of a .npy header dict."""
    try:
        with warnings.catch_warnings():  # a hostile header's bad escapes warn, then fail
            warnings.simplefilter("ignore")
            d = ast.literal_eval(text)
    except Exception:  # SyntaxError, ValueError, MemoryError, RecursionError...
        raise _corrupt(where, "the .npy header is not a valid Python literal") from None
    if not isinstance(d, dict) or set(d) != {"descr", "fortran_order", "shape"}:
        raise _corrupt(where, "the .npy header is not a dict of descr, fortran_order, shape")
    if not isinstance(d["fortran_order"], bool):
        raise _corrupt(where, f"fortran_order {d['fortran_order']!r} is not a bool")
    if not isinstance(d["shape"], tuple):
        raise _corrupt(where, f"shape {d['shape']!r} is not a tuple")
    dt, name = _npy_dtype(where, d["descr"])
    return dt, name, d["fortran_order"], d["shape"]


def _npy_text(f, where: str):
    """The header text of a .npy stream positioned at its start, and its byte length
    (header reads are small, so they need no size check before reading)."""
    magic = _take(f, 8, where, "the .npy magic", known=False)
    if magic[:6] != _NPY_MAGIC:
        raise _corrupt(where, "not a .npy file (bad magic)")
    version = (magic[6], magic[7])
    if version not in ((1, 0), (2, 0), (3, 0)):
        raise _corrupt(where, f"unsupported .npy version {version[0]}.{version[1]}")
    width = 2 if version == (1, 0) else 4
    raw = _take(f, width, where, "the header length", known=False)
    (n,) = struct.unpack("<H" if width == 2 else "<I", raw)
    if n > _NPY_MAX_HEADER:
        raise _corrupt(where, f"header length {n} is over the {_NPY_MAX_HEADER}-byte limit")
    raw = _take(f, n, where, "the header", known=False)
    try:
        return raw.decode("utf-8" if version == (3, 0) else "latin1"), 8 + width + n
    except UnicodeDecodeError:
        raise _corrupt(where, "the .npy header is not valid UTF-8") from None


class _Bytes:
    """Bytes in memory read like a stream; the array data are viewed in place, not copied."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def read(self, n: int) -> bytes:
        out = self.data[self.pos : self.pos + n]
        self.pos += len(out)
        return out

    def array(self, dt, count: int) -> np.ndarray:
        return np.frombuffer(self.data, dt, count=count, offset=self.pos)


def _npy_data(f, where: str, dt, n: int, size, limit) -> np.ndarray:
    """The ``n`` data bytes of a .npy stream as a flat array of ``dt``."""
    if isinstance(f, _Bytes):
        return f.array(dt, n // dt.itemsize)
    if limit is None and size is not None and isinstance(f, _REAL_FILES):
        a = np.fromfile(f, dtype=dt, count=n // dt.itemsize)  # fastest: no bytes object
        if a.nbytes != n:  # the file shrank since its size was read
            raise _corrupt(where, f"truncated: the array data need {n} bytes")
        return a
    one_read = limit is None and size is not None  # else a hostile size could be declared
    return np.frombuffer(_take(f, n, where, "the array data", known=one_read), dt)


def _read_npy(f, where: str, limit=None):
    """An array from a .npy stream: a file object, a zip member or ``_Bytes``. ``limit``
    bounds the bytes it holds (a zip member's declared size: the data may still end
    sooner); without it, a seekable stream says how many are there."""
    size = _available(f) if limit is None else limit
    text, used = _npy_text(f, where)
    dt, name, fortran, shape = _npy_header(where, text)
    n = _nbytes(where, shape, dt.itemsize)
    if size is not None and n > size - used:
        raise _corrupt(where, f"truncated: shape {list(shape)} of {dt.str} needs {n} bytes "
                              f"of data, only {size - used} are left")
    a = _npy_data(f, where, dt, n, size, limit)
    a = a.reshape(shape[::-1]).T if fortran else a.reshape(shape)
    if dt.str.startswith(">"):
        a = a.astype(dt.newbyteorder("<"))
    return _to_kiln(a, name)


class _Member:
    """A zip member stream whose read errors (bad CRC, bad deflate data, short member)
    become load errors naming the member."""

    def __init__(self, f, where: str):
        self.f, self.where = f, where

    def read(self, n: int = -1) -> bytes:
        try:
            return self.f.read(n)
        except Exception as e:
            raise _corrupt(self.where, f"corrupt zip member ({_why(e)})") from None

    def drain(self) -> None:
        """Reads to the member's end: only there does zipfile check the CRC."""
        while self.read(_CHUNK):
            pass


def _load_member(z, info, where: str, total):
    """The array of one zip member; ``total`` is the archive's size, when known."""
    try:
        stream = z.open(info)
    except Exception as e:  # BadZipFile, NotImplementedError (method), RuntimeError (password)
        raise _corrupt(where, f"cannot open the zip member ({_why(e)})") from None
    with stream:
        member = _Member(stream, where)
        if total is not None and info.header_offset + info.compress_size <= total:
            # its bytes are in the archive: read it whole, the fastest way (CRC checked)
            data = member.read()
            return _read_npy(_Bytes(data), where, limit=len(data))
        # a declared size past the archive's end may be hostile: read in chunks
        arr = _read_npy(member, where, limit=info.file_size)
        member.drain()
    return arr


def _load_npz(f, where: str) -> dict:
    total = _available(f)
    try:
        z = zipfile.ZipFile(f)
    except Exception as e:  # BadZipFile, or OSError/ValueError from seeks at bad offsets
        raise _corrupt(where, f"not a valid zip file ({_why(e)})") from None
    with z:
        out = {}
        for info in z.infolist():
            n = info.filename
            out[n[:-4] if n.endswith(".npy") else n] = _load_member(
                z, info, f"{where}: member {n!r}", total
            )
    return out


def _st_header(data: bytes, where: str):
    """The parsed JSON header of a .safetensors file and where its data begin."""
    if len(data) < 8:
        raise _corrupt(where, f"{len(data)} bytes are too few for the 8-byte header length")
    (n,) = struct.unpack_from("<Q", data)
    if n > len(data) - 8:
        raise _corrupt(where, f"header length {n} is more than the {len(data) - 8} bytes "
                              "after it")
    try:
        text = data[8 : 8 + n].decode("utf-8")
    except UnicodeDecodeError:
        raise _corrupt(where, "the header is not valid UTF-8") from None
    try:
        header = json.loads(text)
    except Exception:  # JSONDecodeError, RecursionError on deep nesting
        raise _corrupt(where, "the header is not valid JSON") from None
    if not isinstance(header, dict):
        raise _corrupt(where, f"the header is a JSON {type(header).__name__}, not an object")
    return header, 8 + n


def _st_metadata(where: str, meta) -> dict:
    if meta is None:
        return {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise _corrupt(where, "__metadata__ is not an object of strings to strings")
    return meta


def _st_tensor(data: bytes, base: int, where: str, info):
    if not isinstance(info, dict):
        raise _corrupt(where, "the entry is not a JSON object")
    dtype, offsets = info.get("dtype"), info.get("data_offsets")
    name = _FROM_SAFETENSORS.get(dtype) if isinstance(dtype, str) else None
    if name is None:
        raise _corrupt(where, f"unknown dtype {dtype!r}")
    if not (isinstance(offsets, list) and len(offsets) == 2
            and all(type(o) is int for o in offsets)):
        raise _corrupt(where, f"data_offsets {offsets!r} is not a list of two integers")
    begin, end = offsets
    if not 0 <= begin <= end <= len(data) - base:
        raise _corrupt(where, f"data_offsets [{begin}, {end}] are outside the "
                              f"{len(data) - base} bytes of data")
    n = _nbytes(where, info.get("shape"), _ITEMSIZE[name])
    if end - begin != n:
        raise _corrupt(where, f"data_offsets [{begin}, {end}] hold {end - begin} bytes, but "
                              f"shape {info['shape']} of {dtype} needs {n}")
    dt = np.dtype(_NUMPY[name])
    a = np.frombuffer(data, dt, count=n // dt.itemsize, offset=base + begin)
    return _to_kiln(a.reshape(info["shape"]), name)


def _load_safetensors(data: bytes, return_metadata: bool, where: str = "<bytes>"):
    header, base = _st_header(data, where)
    metadata = _st_metadata(where, header.pop("__metadata__", None))
    out = {
        name: _st_tensor(data, base, f"{where}: tensor {name!r}", info)
        for name, info in header.items()
    }
    return (out, metadata) if return_metadata else out


def load(file, /, format: str | None = None, return_metadata: bool = False, *, stream=None):
    """Loads arrays from .npy (an array), .npz, .safetensors or .gguf (a dict of arrays;
    with ``return_metadata``, also the safetensors/gguf metadata)."""
    if format is None:
        format = _infer_format(file)
    if format not in ("npy", "npz", "safetensors", "gguf"):
        raise ValueError(
            f"[load] Unsupported format {format!r}: use npy, npz, safetensors or gguf."
        )
    if return_metadata and format not in ("safetensors", "gguf"):
        raise ValueError("[load] return_metadata is only supported for safetensors and gguf files.")

    named = isinstance(file, (str, os.PathLike))
    where = _label(file)
    with open(file, "rb") if named else contextlib.nullcontext(file) as f:
        if format == "npy":
            return _read_npy(f, where)
        if format == "npz":
            return _load_npz(f, where)
        if format == "gguf":
            from kiln.core._gguf import load_gguf

            return load_gguf(f.read(), return_metadata, where)
        return _load_safetensors(f.read(), return_metadata, where)


# Leading bytes of each format, for file objects without a name (safetensors starts with a
# little-endian header length, then '{').
_MAGIC = [(b"\x93NUMPY", "npy"), (b"PK\x03\x04", "npz"), (b"PK\x05\x06", "npz"), (b"GGUF", "gguf")]


def _infer_format(file) -> str:
    """The format from the path's (or a file object's ``name``) extension, as MLX; for an
    unnamed file object, from its first bytes."""
    name = file if isinstance(file, (str, os.PathLike)) else getattr(file, "name", None)
    if isinstance(name, (str, os.PathLike)):
        name = os.fspath(name)
        return name.rsplit(".", 1)[-1] if "." in name else ""
    try:
        start = file.tell()
        head = file.read(9)
        file.seek(start)
    except (AttributeError, OSError, ValueError):
        raise ValueError("[load] Cannot infer the format of a file object: pass format=.") from None
    for magic, format in _MAGIC:
        if head.startswith(magic):
            return format
    if len(head) == 9 and head[8:9] == b"{":
        return "safetensors"
    raise ValueError("[load] Cannot infer the format of a file object: pass format=.")


def _unpickle(data: bytes, shape, dtype_name: str):
    """Rebuilds a pickled array (see ``array.__reduce__``)."""
    return _core._from_raw_bytes(data, list(shape), _dtype(dtype_name))
