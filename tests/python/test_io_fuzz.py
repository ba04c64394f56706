"""Corrupt and hostile files for every loader (npy, npz, safetensors, gguf).

The property: ``mx.load`` either returns what the file's header says (names, shapes, dtypes,
and data that are bytes of the file) or raises a ValueError whose message starts with
``[load]`` and names the file; never another exception, a crash or a hang. Valid files are
written by kiln, then truncated, bit-flipped, overwritten and replaced by hand-written hostile
headers. ``KILN_FUZZ_LONG=1`` multiplies the iteration counts by 50.
"""

import collections
import io
import json
import os
import random
import signal
import struct
import warnings
import zipfile

import kiln.core as mx
import numpy as np
import pytest
from kiln import _core

LONG = 50 if os.environ.get("KILN_FUZZ_LONG") else 1
FORMATS = ["npy", "npz", "npz_compressed", "safetensors", "gguf"]
SUFFIX = {"npz_compressed": "npz"}

# (numpy kind, item size) -> kiln dtype name
KIND = {("b", 1): "bool", ("u", 1): "uint8", ("u", 2): "uint16", ("u", 4): "uint32",
        ("u", 8): "uint64", ("i", 1): "int8", ("i", 2): "int16", ("i", 4): "int32",
        ("i", 8): "int64", ("f", 2): "float16", ("V", 2): "bfloat16", ("f", 4): "float32",
        ("f", 8): "float64", ("c", 8): "complex64"}
ST_DTYPES = {"BOOL": "bool", "U8": "uint8", "U16": "uint16", "U32": "uint32", "U64": "uint64",
             "I8": "int8", "I16": "int16", "I32": "int32", "I64": "int64", "F16": "float16",
             "BF16": "bfloat16", "F32": "float32", "F64": "float64", "C64": "complex64"}
GGUF_TENSOR = {0: ("float32", 4), 1: ("float16", 2), 24: ("int8", 1), 25: ("int16", 2),
               26: ("int32", 4), 27: ("int64", 8), 28: ("float64", 8), 30: ("bfloat16", 2)}
GGUF_META_SIZE = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


@pytest.fixture(autouse=True)
def no_hang():
    """A loader that loops on a hostile count fails the test instead of hanging it."""
    def stop(*_):
        raise TimeoutError("a load did not finish")

    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(120 * LONG)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def sample(name, shape):
    n = int(np.prod(shape))
    return (mx.arange(n).reshape(*shape) * 3 - 5).astype(getattr(mx, name))


def write_valid(fmt, path):
    """A valid file of ``fmt`` at ``path``, written by kiln."""
    arrays = {"w": sample("float32", (2, 3)), "b": sample("bfloat16", (4,)),
              "i": sample("int16", (3, 1, 2)), "e": sample("int32", (0, 2))}
    if fmt == "npy":
        mx.save(path, arrays["w"])
    elif fmt.startswith("npz"):
        save = mx.savez_compressed if fmt == "npz_compressed" else mx.savez
        save(path, sample("uint8", (5,)), t=mx.array([True, False, True]), **arrays)
    elif fmt == "safetensors":
        arrays["t"] = mx.array([True, False])
        mx.save_safetensors(path, arrays, metadata={"format": "mlx", "k": "v"})
    else:
        del arrays["b"]
        meta = {"general.alignment": mx.array(32, dtype=mx.uint32), "general.name": "fuzz",
                "tokens": ["a", "bc", ""], "n": mx.array(7),
                "f": mx.array([1.5, -2.0]), "flag": mx.array([True, False])}
        mx.save_gguf(path, arrays, meta)


# --- file builders, for hand-written files and rewritten headers ---

def npy_file(header: str, data: bytes = b"", version=(1, 0), length=None) -> bytes:
    h = header.encode("utf-8" if version == (3, 0) else "latin1")
    width = 2 if version == (1, 0) else 4
    n = len(h) if length is None else length
    return (b"\x93NUMPY" + bytes(version) + n.to_bytes(width, "little") + h + data)


def npy_dict(descr="'<f4'", fortran="False", shape="(2, 3)") -> str:
    return f"{{'descr': {descr}, 'fortran_order': {fortran}, 'shape': {shape}, }}\n"


def st_file(header, data: bytes = bytes(24), length=None) -> bytes:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    n = len(text) if length is None else length
    return struct.pack("<Q", n) + text + data


def st_tensor(**kw):
    t = {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}
    t.update(kw)
    return {"w": t}


def gguf_file(kvs=(), infos=(), data=b"", n_tensors=None, n_kv=None, version=3, pad=True):
    head = b"GGUF" + struct.pack("<IQQ", version, len(infos) if n_tensors is None else n_tensors,
                                 len(kvs) if n_kv is None else n_kv)
    head += b"".join(kvs) + b"".join(infos)
    return head + (b"\0" * (-len(head) % 32) if pad else b"") + data


def gstr(s) -> bytes:
    b = s if isinstance(s, bytes) else s.encode()
    return struct.pack("<Q", len(b)) + b


def ginfo(name="w", dims=(3, 2), t=0, off=0) -> bytes:
    return gstr(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, t, off)


def gkv(key, t, payload: bytes) -> bytes:
    return gstr(key) + struct.pack("<I", t) + payload


def zip_file(members, method=zipfile.ZIP_STORED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=method) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()



# --- oracles: what the header says, parsed independently of kiln's loaders ---

def dtype_name(a):
    return repr(a.dtype).rsplit(".", 1)[-1]


def same_data(arr, want: bytes):
    """``arr`` holds ``want`` (bools: their truth values, stored as 0 or 1)."""
    got = _core._raw_bytes(arr)
    if dtype_name(arr) == "bool":
        assert set(got) <= {0, 1}
        assert got == (np.frombuffer(want, np.uint8) != 0).tobytes()
    else:
        assert got == want


def check_npy(arr, raw: bytes):
    a = np.lib.format.read_array(io.BytesIO(raw), allow_pickle=False)
    assert arr.shape == a.shape and dtype_name(arr) == KIND[(a.dtype.kind, a.dtype.itemsize)]
    le = a.dtype if a.dtype.kind == "V" else a.dtype.newbyteorder("<")
    same_data(arr, a.astype(le).tobytes(order="C"))


def check_npz(out, raw: bytes):
    want = {}
    with zipfile.ZipFile(io.BytesIO(raw)) as z:
        for info in z.infolist():
            n = info.filename
            want[n[:-4] if n.endswith(".npy") else n] = z.read(info)
    assert sorted(out) == sorted(want)
    for k, arr in out.items():
        check_npy(arr, want[k])


def check_safetensors(out, raw: bytes):
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    header.pop("__metadata__", None)
    assert sorted(out) == sorted(header)
    for k, info in header.items():
        begin, end = info["data_offsets"]
        assert out[k].shape == tuple(info["shape"])
        assert dtype_name(out[k]) == ST_DTYPES[info["dtype"]]
        same_data(out[k], raw[8 + n + begin : 8 + n + end])


def gguf_infos(raw: bytes):
    """(alignment, position after the tensor infos, tensor infos) of a GGUF file."""
    n_tensors, n_kv = struct.unpack_from("<QQ", raw, 8)
    pos, align = 24, 32

    def string(pos):
        (n,) = struct.unpack_from("<Q", raw, pos)
        return raw[pos + 8 : pos + 8 + n].decode(), pos + 8 + n

    for _ in range(n_kv):
        key, pos = string(pos)
        (t,) = struct.unpack_from("<I", raw, pos)
        pos += 4
        if t == 8:
            pos = string(pos)[1]
        elif t == 9:
            et, count = struct.unpack_from("<IQ", raw, pos)
            pos += 12
            for _ in range(count if et == 8 else 0):
                pos = string(pos)[1]
            pos += 0 if et == 8 else GGUF_META_SIZE[et] * count
        else:
            if key == "general.alignment":
                align = int.from_bytes(raw[pos : pos + GGUF_META_SIZE[t]], "little")
            pos += GGUF_META_SIZE[t]
    infos = []
    for _ in range(n_tensors):
        name, pos = string(pos)
        (nd,) = struct.unpack_from("<I", raw, pos)
        dims = struct.unpack_from(f"<{nd}Q", raw, pos + 4)
        t, off = struct.unpack_from("<IQ", raw, pos + 4 + 8 * nd)
        pos += 16 + 8 * nd
        infos.append((name, tuple(reversed(dims)), t, off))
    return align, pos, infos


def check_gguf(out, raw: bytes):
    align, pos, infos = gguf_infos(raw)
    start = pos + (-pos) % align
    assert sorted(out) == sorted({i[0] for i in infos})
    for name, shape, t, off in infos:
        dname, size = GGUF_TENSOR[t]
        assert out[name].shape == shape and dtype_name(out[name]) == dname
        nbytes = int(np.prod(shape)) * size
        same_data(out[name], raw[start + off : start + off + nbytes])


CHECK = {"npy": check_npy, "npz": check_npz, "npz_compressed": check_npz,
         "safetensors": check_safetensors, "gguf": check_gguf}


def outcome(fmt, path, raw: bytes, case: str) -> str:
    """Loads ``raw`` from ``path``: "loaded" (checked against the header) or "error"."""
    path.unlink(missing_ok=True)  # ext4 flushes a file rewritten in place: 3 ms a case
    path.write_bytes(raw)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a loader must not warn either
            out = mx.load(str(path))
    except ValueError as e:
        msg = str(e)
        assert msg.startswith("[load] ") and str(path) in msg, f"{case}: {msg}"
        return "error"
    except Exception as e:
        raise AssertionError(f"{case}: {type(e).__name__}: {e}") from e
    try:
        CHECK[fmt](out, raw)
    except Exception as e:
        raise AssertionError(f"{case}: loaded, but not what the header says ({e!r})") from e
    return "loaded"


# --- mutations of a valid file ---

def header_end(fmt, raw: bytes) -> int:
    """Where the header ends, so that some mutations aim at it."""
    if fmt == "npy":
        return 10 + int.from_bytes(raw[8:10], "little")
    if fmt == "safetensors":
        return 8 + int.from_bytes(raw[:8], "little")
    if fmt == "gguf":
        return gguf_infos(raw)[1]
    return len(raw)  # zip: local headers, data and central directory are spread out


def bit_mutations(fmt, raw: bytes, rng: random.Random):
    n, head = len(raw), header_end(fmt, raw)
    step = max(1, n // (300 * LONG))
    for cut in sorted(set(range(0, n, step)) | set(range(max(0, n - 16), n))):
        yield f"truncated at {cut}", raw[:cut]
    for i in range(400 * LONG):
        b = bytearray(raw)
        pos = rng.randrange(head if i % 2 else n)  # half of the flips hit the header
        b[pos] ^= 1 << rng.randrange(8)
        yield f"bit {pos} flipped", bytes(b)
    for _ in range(200 * LONG):
        b = bytearray(raw)
        pos = rng.randrange(n)
        k = rng.choice([1, 1, 2, 4, 8])
        b[pos : pos + k] = bytes(rng.choice([0, 0xFF, 0x7F, 0x80, rng.randrange(256)])
                                 for _ in range(k))
        yield f"bytes at {pos} overwritten", bytes(b[:n])
    for _ in range(50 * LONG):
        b = bytearray(raw)
        for _ in range(rng.randrange(2, 9)):
            b[rng.randrange(n)] = rng.randrange(256)
        yield "several bytes overwritten", bytes(b)


HOSTILE_INTS = [0, 1, 2, 7, 255, 2**15, 2**31 - 1, 2**31, 2**32 - 1, 2**62, 2**63 - 1, 2**63,
                2**64 - 1, -1, -(2**63), 2**70]
HOSTILE_VALUES = HOSTILE_INTS + [None, True, 1.5, "x", "F32", [], [1], [2, 3], {}, {"a": 1}]


def int_overwrites(raw: bytes, rng: random.Random):
    """``raw`` with a hostile 2-, 4- or 8-byte integer written somewhere (counts, lengths,
    sizes and offsets of the binary headers)."""
    b = bytearray(raw)
    width = rng.choice([2, 4, 8])
    v = rng.choice(HOSTILE_INTS) % (1 << (8 * width))
    pos = rng.randrange(max(1, len(b) - width))
    b[pos : pos + width] = v.to_bytes(width, "little")
    return bytes(b[: len(raw)])


def st_rewrites(raw: bytes, rng: random.Random):
    """A safetensors file whose JSON header has one value replaced by a hostile one."""
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    key = rng.choice(sorted(header))
    entry = header[key]
    field = rng.choice(sorted(entry))
    if rng.random() < 0.5 and isinstance(entry[field], list) and entry[field]:
        entry[field][rng.randrange(len(entry[field]))] = rng.choice(HOSTILE_VALUES)
    else:
        entry[field] = rng.choice(HOSTILE_VALUES)
    return st_file(header, raw[8 + n :])


def npy_rewrites(raw: bytes, rng: random.Random):
    """A .npy file whose header dict has hostile values."""
    data = raw[10 + int.from_bytes(raw[8:10], "little") :]
    descr = rng.choice(["'<f4'", "'>f4'", "'|b1'", "'<V2'", "'<U1'", "'|O'", "'<c16'", "None",
                        "'f4,f4'", "4", "'<f2'", "'<i8'", "'|u1'"])
    dims = [rng.choice(HOSTILE_INTS + [2, 3, 6]) for _ in range(rng.randrange(4))]
    shape = rng.choice([f"({', '.join(map(str, dims))},)", "(2, 3)", "(6,)", "(3, 2)", "()",
                        str(dims), "(True,)"])
    fortran = rng.choice(["False", "True", "0", "None"])
    return npy_file(npy_dict(descr, fortran, shape), data)


def mutations(fmt, raw: bytes, rng: random.Random):
    yield from bit_mutations(fmt, raw, rng)
    for _ in range(200 * LONG):
        yield "hostile integer written", int_overwrites(raw, rng)
    rewrite = {"safetensors": st_rewrites, "npy": npy_rewrites}.get(fmt)
    for _ in range(200 * LONG if rewrite else 0):
        yield "header value replaced", rewrite(raw, rng)


def run_fuzz(fmt, tmp_path, seed=0) -> collections.Counter:
    src = tmp_path / f"valid.{SUFFIX.get(fmt, fmt)}"
    write_valid(fmt, src)
    raw = src.read_bytes()
    target = tmp_path / f"case.{SUFFIX.get(fmt, fmt)}"
    counts = collections.Counter({"cases": 0})
    assert outcome(fmt, target, raw, "the valid file") == "loaded"
    for case, data in mutations(fmt, raw, random.Random(seed)):
        counts[outcome(fmt, target, data, case)] += 1
        counts["cases"] += 1
    return counts


@pytest.mark.parametrize("fmt", FORMATS)
def test_fuzz(tmp_path, fmt):
    counts = run_fuzz(fmt, tmp_path)
    assert counts["loaded"] > 0 and counts["error"] > 0
    assert counts["loaded"] + counts["error"] == counts["cases"]


# --- hand-written hostile files ---


NPY_HOSTILE = {
    "empty": b"",
    "bad magic": b"\x93NUMPX\x01\x00" + bytes(40),
    "unknown version": npy_file(npy_dict(), bytes(24), version=(9, 9)),
    "header length 65535": npy_file(npy_dict(), bytes(24), length=65535),
    "v2 header length 2^32-1": npy_file(npy_dict(), bytes(24), (2, 0), length=2**32 - 1),
    "unclosed header": npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3"),
    "header with NUL": npy_file(npy_dict().replace(" ", "\0"), bytes(24)),
    "not a literal": npy_file("{'descr': open('x')}", bytes(24)),
    "deep nesting": npy_file("(" * 5000 + ")" * 5000),
    "huge int": npy_file(npy_dict(shape="(" + "9" * 5000 + ",)")),
    "not a dict": npy_file("[1, 2, 3]"),
    "missing key": npy_file("{'descr': '<f4', 'shape': (2,)}", bytes(8)),
    "extra key": npy_file(npy_dict()[:-3] + " 'x': 1}", bytes(24)),
    "v3 not utf-8": npy_file(npy_dict(), bytes(24), (3, 0))[:20] + b"\xff\xfe" + bytes(80),
    "string descr": npy_file(npy_dict("'<U4'"), bytes(96)),
    "object descr": npy_file(npy_dict("'|O'"), bytes(48)),
    "structured descr": npy_file(npy_dict("[('a', '<f4')]"), bytes(24)),
    "subarray descr": npy_file(npy_dict("'(2,)<f4'"), bytes(48)),
    "complex128": npy_file(npy_dict("'<c16'"), bytes(96)),
    "int descr": npy_file(npy_dict("4"), bytes(24)),
    "fortran not bool": npy_file(npy_dict(fortran="1"), bytes(24)),
    "negative shape": npy_file(npy_dict(shape="(-1,)")),
    "shape 2^64": npy_file(npy_dict(shape="(2**64,)")),
    "shape 2^64 literal": npy_file(npy_dict(shape=f"({2**64},)")),
    "overflowing shape": npy_file(npy_dict(shape=f"({2**40}, {2**40})")),
    "overflowing zero-size shape": npy_file(npy_dict(shape=f"(0, {2**70})")),
    "list shape": npy_file(npy_dict(shape="[2, 3]"), bytes(24)),
    "float shape": npy_file(npy_dict(shape="(2.0, 3)"), bytes(24)),
    "bool shape": npy_file(npy_dict(shape="(True,)"), bytes(4)),
    "int shape": npy_file(npy_dict(shape="6"), bytes(24)),
    "short data": npy_file(npy_dict(shape="(1000,)"), bytes(24)),
    "huge data": npy_file(npy_dict(shape=f"({2**60},)", descr="'|u1'"), bytes(24)),
}


ST_HOSTILE = {
    "empty": b"",
    "7 bytes": b"\x01" * 7,
    "header length 2^60": st_file(st_tensor(), length=2**60),
    "header length 2^64-1": st_file(st_tensor(), length=2**64 - 1),
    "header length past end by one": st_file(st_tensor(), b"",
                                             length=len(json.dumps(st_tensor())) + 1),
    "empty header": st_file(b""),
    "not utf-8": st_file(b'{"w\xff\xfe": 1}'),
    "not json": st_file(b"{'w': 1}"),
    "deep nesting": st_file(b"[" * 100000 + b"]" * 100000),
    "huge int": st_file(b'{"w": {"dtype": "F32", "shape": [' + b"9" * 5000
                        + b'], "data_offsets": [0, 24]}}'),
    "list": st_file([1, 2]),
    "string": st_file("w"),
    "null": st_file(None),
    "metadata list": st_file({"__metadata__": [1], **st_tensor()}),
    "metadata values not strings": st_file({"__metadata__": {"a": 1}, **st_tensor()}),
    "metadata string": st_file({"__metadata__": "x"}),
    "entry not an object": st_file({"w": [1, 2]}),
    "unknown dtype": st_file(st_tensor(dtype="F128")),
    "dtype list": st_file(st_tensor(dtype=["F32"])),
    "dtype missing": st_file({"w": {"shape": [2, 3], "data_offsets": [0, 24]}}),
    "negative shape": st_file(st_tensor(shape=[-2, -3])),
    "shape 2^64": st_file(st_tensor(shape=[2**64], data_offsets=[0, 0])),
    "overflowing shape": st_file(st_tensor(shape=[2**40, 2**40], data_offsets=[0, 0])),
    "overflowing zero-size shape": st_file(st_tensor(shape=[0, 2**70], data_offsets=[0, 0])),
    "bool shape": st_file(st_tensor(shape=[True], data_offsets=[0, 4])),
    "float shape": st_file(st_tensor(shape=[2.0, 3])),
    "string shape": st_file(st_tensor(shape="6")),
    "offsets past end": st_file(st_tensor(data_offsets=[0, 1000])),
    "offsets 2^64": st_file(st_tensor(data_offsets=[2**64 - 24, 2**64])),
    "negative offsets": st_file(st_tensor(data_offsets=[-24, 0])),
    "reversed offsets": st_file(st_tensor(data_offsets=[24, 0])),
    "overlapping past end": st_file(st_tensor(data_offsets=[8, 32])),
    "size mismatch": st_file(st_tensor(data_offsets=[0, 20])),
    "string offsets": st_file(st_tensor(data_offsets=["0", "24"])),
    "one offset": st_file(st_tensor(data_offsets=[24])),
    "three offsets": st_file(st_tensor(data_offsets=[0, 12, 24])),
    "bool offsets": st_file(st_tensor(shape=[1], data_offsets=[False, True], dtype="U8")),
}


def galign(t, payload):
    return gguf_file([gkv("general.alignment", t, payload)], [ginfo()], bytes(32))


GGUF_HOSTILE = {
    "empty": b"",
    "bad magic": b"GGUX" + bytes(40),
    "version 1": gguf_file(version=1),
    "version 99": gguf_file(version=99),
    "truncated counts": b"GGUF\x03\x00\x00\x00\x05",
    "tensor count 2^64-1": gguf_file(n_tensors=2**64 - 1),
    "kv count 2^63": gguf_file(n_kv=2**63),
    "kv count past the bytes": gguf_file([gkv("a", 0, b"\1")], n_kv=2, pad=False),
    "key length 2^64-1": gguf_file([struct.pack("<Q", 2**64 - 1) + b"abc"]),
    "key not utf-8": gguf_file([gkv(b"\xff\xfe", 0, b"\1")]),
    "string length 2^62": gguf_file([gkv("s", 8, struct.pack("<Q", 2**62) + b"x")]),
    "array length 2^64-1": gguf_file([gkv("a", 9, struct.pack("<IQ", 4, 2**64 - 1))]),
    "string array length 2^61": gguf_file([gkv("a", 9, struct.pack("<IQ", 8, 2**61))]),
    "nested array": gguf_file([gkv("a", 9, struct.pack("<IQIQ", 9, 1, 4, 0))]),
    "unknown value type": gguf_file([gkv("a", 13, b"\0" * 8)]),
    "unknown array type": gguf_file([gkv("a", 9, struct.pack("<IQ", 99, 1) + bytes(8))]),
    "truncated scalar": gguf_file([gkv("a", 10, b"\1\2")], pad=False),
    "alignment 0": galign(4, struct.pack("<I", 0)),
    "alignment 3": galign(4, struct.pack("<I", 3)),
    "alignment float": galign(6, struct.pack("<f", 32.0)),
    "alignment string": galign(8, gstr("32")),
    "alignment array": galign(9, struct.pack("<IQII", 4, 2, 32, 32)),
    "quantized tensor type": gguf_file([], [ginfo(t=2)], bytes(32)),
    "unknown tensor type": gguf_file([], [ginfo(t=999)], bytes(32)),
    "dims count 2^32-1": gguf_file([], [gstr("w") + struct.pack("<IQ", 2**32 - 1, 2)]),
    "dim 2^63": gguf_file([], [ginfo(dims=(2**63,))], bytes(32)),
    "overflowing dims": gguf_file([], [ginfo(dims=(2**40, 2**40))], bytes(32)),
    "overflowing zero-size dims": gguf_file([], [ginfo(dims=(2**63, 2**63, 0))], bytes(32)),
    "offset not aligned": gguf_file([], [ginfo(off=4)], bytes(64)),
    "offset past end": gguf_file([], [ginfo(off=2**63)], bytes(32)),
    "data past end": gguf_file([], [ginfo(dims=(1000,))], bytes(32)),
    "tensor name not utf-8": gguf_file([], [ginfo(name=b"\xc3\x28")], bytes(32)),
    "tensor name twice": gguf_file([], [ginfo(), ginfo(dims=(2,), off=32)], bytes(64)),
}


def valid_npy() -> bytes:
    buf = io.BytesIO()
    mx.save(buf, mx.arange(6).reshape(2, 3).astype(mx.float32))
    return buf.getvalue()


def patched(raw: bytes, find: bytes, at: int, value: bytes) -> bytes:
    """``raw`` with ``value`` written ``at`` bytes after the first ``find``."""
    i = raw.index(find) + at
    return raw[:i] + value + raw[i + len(value):]


def npz_hostile():
    ok = zip_file({"a.npy": valid_npy()})
    cases = {
        "empty": (b"", None),
        "not a zip": (b"PK\x03\x04" + bytes(60), None),
        "truncated central directory": (ok[:-10], None),
        "member not npy": (zip_file({"x.npy": b"hello"}), "x.npy"),
        "member bad crc": (patched(ok, b"\x93NUMPY", 70, b"\xff"), "a.npy"),
        "member unknown method": (patched(ok, b"PK\x01\x02", 10, b"\x63\x00"), "a.npy"),
        "member encrypted": (patched(ok, b"PK\x01\x02", 8, b"\x01\x00"), "a.npy"),
        "member past end": (patched(ok, b"PK\x01\x02", 42, struct.pack("<I", 2**31)), None),
        "member sizes 2^32-2": (patched(ok, b"PK\x01\x02", 20, b"\xfe\xff\xff\xff" * 2), "a.npy"),
        "bad deflate data": (patched(zip_file({"a.npy": valid_npy()}, zipfile.ZIP_DEFLATED),
                                     b"a.npy", 5, b"\xff\xff\xff\xff"), "a.npy"),
    }
    for name, raw in NPY_HOSTILE.items():
        cases[f"member {name}"] = (zip_file({"a.npy": raw, "ok.npy": valid_npy()}), "a.npy")
    return cases


def hostile(fmt):
    if fmt == "npz":
        return {name: raw for name, (raw, _) in npz_hostile().items()}
    return {"npy": NPY_HOSTILE, "safetensors": ST_HOSTILE, "gguf": GGUF_HOSTILE}[fmt]


@pytest.mark.parametrize("fmt", ["npy", "npz", "safetensors", "gguf"])
def test_hostile_files(tmp_path, fmt):
    path = tmp_path / f"hostile.{fmt}"
    for case, raw in hostile(fmt).items():
        assert outcome(fmt, path, raw, case) == "error", case


def load_error(tmp_path, name, raw) -> str:
    path = tmp_path / name
    path.write_bytes(raw)
    with pytest.raises(ValueError) as info:
        mx.load(str(path))
    msg = str(info.value)
    assert msg.startswith(f"[load] {path}: "), msg
    return msg


def test_npz_errors_name_the_member(tmp_path):
    for case, (raw, member) in npz_hostile().items():
        msg = load_error(tmp_path, "m.npz", raw)
        assert member is None or f"member {member!r}" in msg, (case, msg)


def test_safetensors_header_length_2_60(tmp_path):
    msg = load_error(tmp_path, "h.safetensors", st_file(st_tensor(), length=2**60))
    assert f"header length {2**60}" in msg


def test_npy_broken_header_is_a_value_error(tmp_path):
    # numpy's header reader raised tokenize.TokenError for this one
    raw = npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3", bytes(24))
    assert "header" in load_error(tmp_path, "b.npy", raw)


def test_offset_past_end_names_the_tensor(tmp_path):
    msg = load_error(tmp_path, "o.safetensors", st_file(st_tensor(data_offsets=[0, 1000])))
    assert "tensor 'w'" in msg and "[0, 1000]" in msg
    msg = load_error(tmp_path, "o.gguf", GGUF_HOSTILE["data past end"])
    assert "tensor 'w'" in msg


def test_file_objects_are_named(tmp_path):
    with open(tmp_path / "f.bin", "wb") as f:
        f.write(b"\x93NUMPY\x01\x00\xff")
    with open(tmp_path / "f.bin", "rb") as f:
        with pytest.raises(ValueError, match=r"^\[load\] .*f\.bin: truncated"):
            mx.load(f, format="npy")
    with pytest.raises(ValueError, match=r"^\[load\] <BytesIO>: .*header length"):
        mx.load(io.BytesIO(st_file(st_tensor(), length=2**60)), format="safetensors")


def test_edge_files_that_are_valid(tmp_path):
    """Hand-written files at the edges of validity load as their headers say."""
    cases = {
        "z.npy": npy_file(npy_dict(shape=f"(0, {2**40})")),
        "be.npy": npy_file(npy_dict("'>i4'", shape="(2,)"), b"\0\0\0\1\0\0\0\2"),
        "f.npy": npy_file(npy_dict(fortran="True", shape="(2, 3)"),
                          np.arange(6, dtype="<f4").tobytes()),
        "v3.npy": npy_file(npy_dict(), bytes(24), (3, 0)),
        "b.npy": npy_file(npy_dict("'|b1'", shape="(3,)"), b"\0\2\xff"),
        "z.safetensors": st_file(st_tensor(shape=[0, 2**40], data_offsets=[0, 0])),
        "m.safetensors": st_file({"__metadata__": None, **st_tensor()}),
        "t.safetensors": st_file(st_tensor(dtype="BOOL", shape=[3], data_offsets=[0, 3]),
                                 b"\0\2\xff"),
        "a.gguf": galign(4, struct.pack("<I", 64)),
        "z.gguf": gguf_file([], [ginfo(dims=(2**40, 0))]),
    }
    for name, raw in cases.items():
        fmt = name.rsplit(".", 1)[1]
        assert outcome(fmt, tmp_path / name, raw, name) == "loaded", name
    assert mx.load(str(tmp_path / "be.npy")).tolist() == [1, 2]
    assert mx.load(str(tmp_path / "f.npy")).tolist() == [[0, 2, 4], [1, 3, 5]]
    assert mx.load(str(tmp_path / "b.npy")).tolist() == [False, True, True]


@pytest.mark.parametrize("fmt", FORMATS)
def test_valid_files_load_as_in_mlx(tmp_path, fmt):
    mlx = pytest.importorskip("mlx.core")
    path = tmp_path / f"v.{SUFFIX.get(fmt, fmt)}"
    write_valid(fmt, path)
    ours, theirs = mx.load(str(path)), mlx.load(str(path))
    if fmt == "npy":
        ours, theirs = {"": ours}, {"": theirs}
    assert sorted(ours) == sorted(theirs)
    for k, a in ours.items():
        b = theirs[k]
        assert a.shape == tuple(b.shape) and dtype_name(a) == str(b.dtype).rsplit(".", 1)[-1]
        assert a.astype(mx.float32).tolist() == b.astype(mlx.float32).tolist()
