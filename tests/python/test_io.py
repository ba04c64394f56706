"""save/load round trips for .npy, .npz and .safetensors, and interop with numpy's files."""

import io

import numpy as np
import pytest

import kiln.core as mx

DTYPES = ["bool_", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
          "float16", "bfloat16", "float32", "float64"]


def sample(name, shape=(2, 3)):
    x = mx.arange(6).reshape(*shape) - 2
    return x.astype(getattr(mx, name))


def same(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    assert np.array_equal(np.array(a.astype(mx.float32)), np.array(b.astype(mx.float32)))


@pytest.mark.parametrize("name", DTYPES)
def test_npy_round_trip(tmp_path, name):
    x = sample(name)
    mx.save(tmp_path / "x", x)  # the suffix is added
    same(mx.load(tmp_path / "x.npy"), x)


def test_npy_interop_with_numpy(tmp_path):
    x = mx.array([[1.5, -2.0], [3.0, 4.0]])
    mx.save(str(tmp_path / "a.npy"), x)
    assert np.array_equal(np.load(tmp_path / "a.npy"), np.array(x))
    np.save(tmp_path / "b.npy", np.arange(5, dtype=np.int64))
    y = mx.load(str(tmp_path / "b.npy"))
    assert y.dtype == mx.int64 and y.tolist() == [0, 1, 2, 3, 4]
    f64 = np.linspace(0, 1, 3)
    np.save(tmp_path / "c.npy", f64)
    assert mx.load(str(tmp_path / "c.npy")).dtype == mx.float64


def test_views_and_empty(tmp_path):
    x = mx.arange(12).reshape(3, 4).T[::-1]
    mx.save(tmp_path / "v.npy", x)
    assert mx.load(str(tmp_path / "v.npy")).tolist() == x.tolist()
    e = mx.zeros((0, 3))
    mx.save(tmp_path / "e.npy", e)
    assert mx.load(str(tmp_path / "e.npy")).shape == (0, 3)


@pytest.mark.parametrize("compressed", [False, True])
def test_npz(tmp_path, compressed):
    save = mx.savez_compressed if compressed else mx.savez
    save(tmp_path / "z", mx.array([1, 2]), w=sample("bfloat16"), b=mx.array(True))
    out = mx.load(str(tmp_path / "z.npz"))
    assert sorted(out) == ["arr_0", "b", "w"]
    same(out["w"], sample("bfloat16"))
    assert out["arr_0"].tolist() == [1, 2] and out["b"].item() is True
    np_out = np.load(tmp_path / "z.npz")
    assert np_out["arr_0"].tolist() == [1, 2]


@pytest.mark.cpu  # float64 files
def test_safetensors(tmp_path):
    arrays = {name: sample(name) for name in DTYPES}
    mx.save_safetensors(str(tmp_path / "m"), arrays, metadata={"format": "mlx"})
    out, meta = mx.load(str(tmp_path / "m.safetensors"), return_metadata=True)
    assert meta == {"format": "mlx"}
    for name in DTYPES:
        same(out[name], arrays[name])
    raw = (tmp_path / "m.safetensors").read_bytes()
    header_len = int.from_bytes(raw[:8], "little")
    assert (8 + header_len) % 8 == 0 and b'"BF16"' in raw[8 : 8 + header_len]


def test_file_objects_and_errors(tmp_path):
    buf = io.BytesIO()
    mx.save(buf, mx.array([1.0, 2.0]))
    buf.seek(0)
    assert mx.load(buf, format="npy").tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match=r"\[load\]"):
        mx.load(str(tmp_path / "x.txt"))
    with pytest.raises(ValueError, match=r"\[save\]"):
        mx.save(str(tmp_path / "x.npy"), [1, 2])
    with pytest.raises(ValueError, match=r"\[load\]"):
        mx.load(str(tmp_path / "x.npy"), return_metadata=True)


def test_files_interchange_with_mlx(tmp_path):
    mlx = pytest.importorskip("mlx.core")
    ref = mlx.array([[1.5, -2.0], [3.0, 4.25]], dtype=mlx.bfloat16)
    mlx.save(str(tmp_path / "m.npy"), ref)
    mlx.save_safetensors(str(tmp_path / "m.safetensors"), {"w": ref})
    for path in ("m.npy", "m.safetensors"):
        got = mx.load(str(tmp_path / path))
        got = got if path.endswith("npy") else got["w"]
        assert got.dtype == mx.bfloat16 and got.tolist() == ref.tolist()
    mine = mx.array([[1.5, -2.0], [3.0, 4.25]], dtype=mx.bfloat16)
    mx.save(str(tmp_path / "k.npy"), mine)
    mx.savez(str(tmp_path / "k.npz"), w=mine)
    mx.save_safetensors(str(tmp_path / "k.safetensors"), {"w": mine})
    assert mlx.load(str(tmp_path / "k.npy")).tolist() == ref.tolist()
    assert mlx.load(str(tmp_path / "k.npz"))["w"].tolist() == ref.tolist()
    assert mlx.load(str(tmp_path / "k.safetensors"))["w"].tolist() == ref.tolist()


@pytest.mark.parametrize("name", DTYPES)
def test_pickle_round_trip(name):
    import copy
    import pickle

    x = sample(name)[::-1]
    y = pickle.loads(pickle.dumps(x))
    same(y, x)
    same(copy.deepcopy(x), x)


def test_load_file_objects_without_format(tmp_path):
    # As MLX: the format comes from the file object's name; without a name (BytesIO),
    # kiln reads it from the first bytes.
    import io

    a = mx.array([1, 2, 3])
    for ext, save in [("npy", lambda p: mx.save(p, a)), ("npz", lambda p: mx.savez(p, a=a)),
                      ("safetensors", lambda p: mx.save_safetensors(p, {"a": a})),
                      ("gguf", lambda p: mx.save_gguf(p, {"a": a}))]:
        path = str(tmp_path / f"x.{ext}")
        save(path)
        with open(path, "rb") as f:
            named = mx.load(f)
        unnamed = mx.load(io.BytesIO(open(path, "rb").read()))
        for got in (named, unnamed):
            got = got if ext == "npy" else got["a"]
            assert got.tolist() == [1, 2, 3]
    with pytest.raises(ValueError, match="Cannot infer the format"):
        mx.load(io.BytesIO(b"not an array file"))
