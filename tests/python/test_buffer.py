"""Zero-copy export through the buffer protocol (`memoryview`, `np.asarray`) and `mT`."""

import gc

import kiln.core as mx
import numpy as np
import pytest
from conftest import ALL, NP


def ptr(a):
    return a.__array_interface__["data"][0]


@pytest.mark.parametrize("name", [n for n in ALL if n != "bfloat16"])
def test_asarray_shares_memory(name):
    x = mx.arange(12).reshape(3, 4).astype(getattr(mx, name))
    n1, n2 = np.asarray(x), np.array(x, copy=False)
    assert n1.dtype == NP[name] and n1.shape == (3, 4)
    assert ptr(n1) == ptr(n2)  # both views of the one kiln buffer
    assert not n1.flags.writeable
    np.testing.assert_array_equal(n1, np.arange(12).reshape(3, 4).astype(NP[name]))
    copy = np.array(x)
    assert copy.flags.writeable and ptr(copy) != ptr(n1)


@pytest.mark.parametrize(
    "view",
    [
        lambda x: x.T,
        lambda x: x[:, ::-1],
        lambda x: x[::2, 1:3],
        lambda x: mx.broadcast_to(x[:1], (3, 4)),
        lambda x: x[1],
        lambda x: x[1, 2],
        lambda x: x[:0],
    ],
)
def test_strided_views_export_in_place(view):
    x = mx.arange(12, dtype=mx.float32).reshape(3, 4)
    v = view(x)
    base = np.asarray(x)
    got = np.asarray(v)
    np.testing.assert_array_equal(got, np.array(v.tolist(), dtype=np.float32).reshape(v.shape))
    if v.size:
        # the view's data lie inside x's buffer: no copy was made
        lo, hi = ptr(base), ptr(base) + base.nbytes
        assert lo <= ptr(got) < hi


def test_memoryview():
    x = mx.array([[1, 2, 3], [4, 5, 6]], dtype=mx.int32)
    m = memoryview(x)
    assert m.format == "i" and m.shape == (2, 3) and m.strides == (12, 4)
    assert m.readonly and m.tolist() == [[1, 2, 3], [4, 5, 6]]
    t = memoryview(x.T)
    assert t.strides == (4, 12) and t.tolist() == [[1, 4], [2, 5], [3, 6]]
    assert memoryview(mx.array(2.5)).shape == ()
    assert memoryview(mx.array([True])).format == "?"
    assert memoryview(mx.array([1], mx.float16)).format == "e"
    assert bytes(x.T) == np.ascontiguousarray(np.array(x).T).tobytes()  # contiguous copy


def test_export_outlives_the_array_and_kiln_never_writes_into_it():
    x = mx.arange(6, dtype=mx.float32) * 2
    n = np.asarray(x)
    before = n.copy()
    address = ptr(n)
    y = x + 1  # new ops write fresh buffers
    x[0] = 100.0  # rebinds x to a new node; numpy's view keeps the old values
    z = mx.exp(y) * 3
    mx.eval(x, y, z)
    del x, y, z
    gc.collect()
    for _ in range(5):
        mx.eval(mx.ones((6,)) * 7)  # would reuse the freed block if the export did not hold it
    assert ptr(n) == address
    np.testing.assert_array_equal(n, before)


def test_writable_requests_and_bfloat16():
    x = mx.ones((2,))
    with pytest.raises(TypeError):
        memoryview(x)[0] = 2.0  # exports are read-only
    with pytest.raises(ValueError):
        np.asarray(x)[0] = 2.0
    np.testing.assert_array_equal(np.array(x), [1, 1])
    with pytest.raises(BufferError):
        memoryview(mx.ones((2,), dtype=mx.bfloat16))
    with pytest.raises(ValueError, match="bfloat16"):
        np.array(mx.ones((2,), dtype=mx.bfloat16))


def test_mT():
    x = mx.arange(24).reshape(2, 3, 4)
    assert x.mT.shape == (2, 4, 3)
    np.testing.assert_array_equal(np.array(x.mT), np.swapaxes(np.arange(24).reshape(2, 3, 4), -1, -2))
    with pytest.raises(ValueError):
        mx.ones((3,)).mT


def test_index():
    assert [10, 20, 30][mx.array(1)] == 20
    assert list(range(mx.array(3, dtype=mx.uint8))) == [0, 1, 2]
    for bad in (mx.array(1.5), mx.array([1, 2]), mx.array(True), mx.array([2])):
        with pytest.raises(TypeError):
            bad.__index__()


def test_array_from_buffer_protocol_objects():
    import array

    assert mx.array(memoryview(np.arange(3.0))).tolist() == [0, 1, 2]
    a = mx.array(array.array("i", [1, 2]))
    assert a.dtype == mx.int32 and a.tolist() == [1, 2]
    b = mx.array(bytearray(b"ab"))
    assert b.dtype == mx.uint8 and b.tolist() == [97, 98]
    assert mx.array(memoryview(mx.arange(4)), dtype=mx.float32).tolist() == [0, 1, 2, 3]

    class Wrapped:
        def __mlx_array__(self):
            return mx.array([7, 8])

    assert mx.array(Wrapped()).tolist() == [7, 8]
    with pytest.raises(ValueError):
        mx.array(object())
