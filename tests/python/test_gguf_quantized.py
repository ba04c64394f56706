"""GGUF block-quantized tensors (Q4_0, Q4_1, Q8_0) load into MLX's affine layout: packed
uint32 weights with group size 32 and float16 scales and biases, equal to ggml's own
dequantization, and bit-identical to what MLX loads from the same file (when installed).
The files are written here block by block (no gguf package needed)."""

import struct

import numpy as np
import pytest

import kiln.core as mx

RNG = np.random.default_rng(8)


def blocks(kind, x):
    """ggml's blocks of 32 for ``x`` (rows, k), and the values ggml dequantizes them to."""
    b = x.reshape(-1, 32)
    if kind == "q8_0":
        d = (np.abs(b).max(1) / 127).astype(np.float16)
        q = np.round(b / np.maximum(d.astype(np.float32), 1e-12)[:, None]).clip(-127, 127)
        q = q.astype(np.int8)
        raw = [d[i].tobytes() + q[i].tobytes() for i in range(len(b))]
        values = d.astype(np.float32)[:, None] * q
    else:
        lo, hi = b.min(1), b.max(1)
        if kind == "q4_0":
            d = (np.where(-lo > hi, lo, hi) / -8).astype(np.float16)
            m = None
            q = np.round(b / np.where(d == 0, 1, d.astype(np.float32))[:, None] + 8).clip(0, 15)
        else:
            d = ((hi - lo) / 15).astype(np.float16)
            m = lo.astype(np.float16)
            q = np.round((b - m[:, None]) / np.where(d == 0, 1, d.astype(np.float32))[:, None])
            q = q.clip(0, 15)
        q = q.astype(np.uint8)
        packed = q[:, :16] | (q[:, 16:] << 4)
        head = [d[i].tobytes() + (m[i].tobytes() if m is not None else b"") for i in range(len(b))]
        raw = [head[i] + packed[i].tobytes() for i in range(len(b))]
        offset = m.astype(np.float32)[:, None] if m is not None else -8 * d.astype(np.float32)[:, None]
        values = d.astype(np.float32)[:, None] * q + offset
    return b"".join(raw), values.reshape(x.shape)


TYPES = {"q4_0": 2, "q4_1": 3, "q8_0": 8}


def write_gguf(path, tensors):
    """A GGUF v3 file of ``(name, kind, shape, data bytes)`` tensors and no metadata."""
    def string(s):
        return struct.pack("<Q", len(s)) + s.encode()

    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 0)
    infos, body = b"", b""
    for name, kind, shape, data in tensors:
        body += b"\0" * (-len(body) % 32)
        dims = tuple(reversed(shape))
        infos += string(name) + struct.pack(f"<I{len(dims)}Q", len(dims), *dims)
        infos += struct.pack("<IQ", TYPES[kind], len(body))
        body += data
    header = head + infos
    header += b"\0" * (-len(header) % 32)
    with open(path, "wb") as f:
        f.write(header + body)


@pytest.mark.parametrize("kind", ["q4_0", "q4_1", "q8_0"])
def test_quantized_tensors_load_as_affine_triplets(tmp_path, kind):
    x = RNG.normal(size=(6, 96)).astype(np.float32)
    data, values = blocks(kind, x)
    path = str(tmp_path / f"{kind}.gguf")
    write_gguf(path, [("blk.0.ffn_up.weight", kind, (6, 96), data), ("v", kind, (2, 3, 32),
                      blocks(kind, x[:6, :32].reshape(2, 3, 32))[0])])
    loaded = mx.load(path)
    assert sorted(loaded) == ["blk.0.ffn_up.biases", "blk.0.ffn_up.scales", "blk.0.ffn_up.weight",
                              "v", "v.biases", "v.scales"]
    w, s, b = (loaded[f"blk.0.ffn_up.{k}"] for k in ("weight", "scales", "biases"))
    bits = 8 if kind == "q8_0" else 4
    assert w.dtype == mx.uint32 and w.shape == (6, 96 * bits // 32)
    assert s.dtype == b.dtype == mx.float16 and s.shape == (6, 3)
    deq = np.array(mx.dequantize(w, s, b, 32, bits).astype(mx.float32))
    np.testing.assert_allclose(deq, values, rtol=2e-3, atol=2e-3)
    assert loaded["v"].shape == (2, 3, 32 * bits // 32) and loaded["v.scales"].shape == (2, 3, 1)
    mlx = pytest.importorskip("mlx.core")
    theirs = mlx.load(path)
    for key in ("blk.0.ffn_up.weight", "blk.0.ffn_up.scales", "blk.0.ffn_up.biases", "v"):
        np.testing.assert_array_equal(np.array(loaded[key]), np.array(theirs[key]))


def test_bad_quantized_tensors_raise_clear_errors(tmp_path):
    x = RNG.normal(size=(2, 64)).astype(np.float32)
    data, _ = blocks("q8_0", x)
    path = str(tmp_path / "short.gguf")
    write_gguf(path, [("w", "q8_0", (2, 64), data[:-10])])
    with pytest.raises(ValueError, match=r"\[load\].*'w'.*past the end"):
        mx.load(path)
    path = str(tmp_path / "odd.gguf")
    write_gguf(path, [("w", "q8_0", (2, 48), data[: 3 * 34])])
    with pytest.raises(ValueError, match="multiple of 32"):
        mx.load(path)
