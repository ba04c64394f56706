"""GGUF save/load round trips, and files exchanged with MLX in both directions."""

import kiln.core as mx
import numpy as np
import pytest

TENSOR_DTYPES = ["float32", "float16", "int8", "int16", "int32"]


def sample_arrays():
    out = {}
    for i, name in enumerate(TENSOR_DTYPES):
        shape = [(2, 3), (4,), (1, 2, 3), (0,), ()][i]
        out[f"t.{name}"] = (mx.arange(int(np.prod(shape))) - 2).reshape(shape).astype(getattr(mx, name))
    return out


META = {
    "name": "kiln",
    "names": ["a", "bc"],
    "i": mx.array(3),
    "u8": mx.array([1, 2], dtype=mx.uint8),
    "f": mx.array([1.5, -2.0]),
    "b": mx.array([True, False]),
    "i64": mx.array(-5, dtype=mx.int64),
}


def check_meta(meta, mod=np):
    assert meta["name"] == "kiln" and list(meta["names"]) == ["a", "bc"]
    assert np.array(meta["i"]).tolist() == 3 and np.array(meta["i64"]).tolist() == -5
    assert np.array(meta["u8"]).tolist() == [1, 2]
    assert np.array(meta["f"]).tolist() == [1.5, -2.0]
    assert np.array(meta["b"]).tolist() == [True, False]


def test_round_trip(tmp_path):
    arrays = sample_arrays()
    mx.save_gguf(str(tmp_path / "w"), arrays, META)  # suffix added
    loaded, meta = mx.load(str(tmp_path / "w.gguf"), return_metadata=True)
    assert set(loaded) == set(arrays)
    for k, a in arrays.items():
        assert loaded[k].dtype == a.dtype and loaded[k].shape == a.shape
        np.testing.assert_array_equal(np.array(loaded[k]), np.array(a))
    check_meta(meta)
    assert set(mx.load(str(tmp_path / "w.gguf"))) == set(arrays)


def test_errors(tmp_path):
    f = str(tmp_path / "e.gguf")
    with pytest.raises(RuntimeError):
        mx.save_gguf(f, {"a": mx.ones((2,), dtype=mx.bfloat16)}, {})
    with pytest.raises(ValueError):
        mx.save_gguf(f, {"a": mx.ones(2)}, {"m": mx.ones((2, 2), dtype=mx.int32)})
    with pytest.raises(ValueError):
        mx.save_gguf(f, {"a": mx.ones(2)}, {"m": mx.ones((2,), dtype=mx.float64)})
    with pytest.raises(ValueError):
        mx.save_gguf(f, {"a": mx.ones(2)}, {"m": 3})
    (tmp_path / "bad.gguf").write_bytes(b"GGUF\x03\x00\x00\x00\x05")
    with pytest.raises(ValueError):
        mx.load(str(tmp_path / "bad.gguf"))
    (tmp_path / "bad2.gguf").write_bytes(b"NOPE" + bytes(20))
    with pytest.raises(ValueError):
        mx.load(str(tmp_path / "bad2.gguf"))


def test_exchange_with_mlx(tmp_path):
    mlx = pytest.importorskip("mlx.core")
    arrays = sample_arrays()
    kf, mf = str(tmp_path / "k.gguf"), str(tmp_path / "m.gguf")
    mx.save_gguf(kf, arrays, META)
    got, meta = mlx.load(kf, return_metadata=True)
    for k, a in arrays.items():
        np.testing.assert_array_equal(np.array(got[k]), np.array(a))
        assert got[k].shape == a.shape
    check_meta(meta)
    m_meta = {k: (mlx.array(np.array(v)) if isinstance(v, mx.array) else v) for k, v in META.items()}
    arrays = {k: v for k, v in arrays.items() if v.size}  # MLX refuses to write empty arrays
    mlx.save_gguf(mf, {k: mlx.array(np.array(v)) for k, v in arrays.items()}, m_meta)
    got, meta = mx.load(mf, return_metadata=True)
    for k, a in arrays.items():
        np.testing.assert_array_equal(np.array(got[k]), np.array(a))
        assert got[k].dtype == a.dtype
    check_meta(meta)
