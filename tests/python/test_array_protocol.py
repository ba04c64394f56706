"""Python protocol details of mx.array that MLX defines (issue 22): copies are independent,
operators refuse lists, tuples and strings (== and != answer False and True), complex(),
f-string format specs, bytes input. Compared with MLX where installed."""

import copy

import numpy as np
import pytest

import kiln.core as mx


def test_copies_are_independent():
    a = mx.array([1.0, 2.0])
    for clone in (copy.copy(a), copy.deepcopy(a)):
        assert clone is not a
        clone[0] = 9.0
        assert a.tolist() == [1.0, 2.0] and clone.tolist() == [9.0, 2.0]
    tree = {"w": [a, a]}
    deep = copy.deepcopy(tree)
    deep["w"][0] += 1
    assert a.tolist() == [1.0, 2.0] and deep["w"][0].tolist() == [2.0, 3.0]


OPERATOR_CASES = [
    "a == [1, 2]", "a != (1, 2)", "[1, 2] == a", "a == 'x'", "a < [1, 2]", "a + [1, 2]",
    "[1, 2] + a", "a * (1, 2)", "(1, 2) * a", "a - [1, 2]", "a / (1, 2)", "a // [1, 2]",
    "a % [1, 2]", "a ** [1, 2]", "a >= [1, 2]", "a + 'x'", "a + 1", "a == 2", "a == a",
]


@pytest.mark.parametrize("expression", OPERATOR_CASES)
def test_operators_with_sequences_match_mlx(expression):
    mlx = pytest.importorskip("mlx.core")

    def run(module):
        a = module.array([1, 2])
        try:
            out = eval(expression, {"a": a})
        except Exception as e:  # noqa: BLE001 - the class and message are compared
            return type(e).__name__, str(e)
        return "ok", out.tolist() if hasattr(out, "tolist") else out

    assert run(mx) == run(mlx)


def test_operators_refuse_sequences_without_mlx():
    a = mx.array([1, 2])
    assert (a == [1, 2]) is False and (a != (1, 2)) is True
    with pytest.raises(ValueError, match="Cannot perform addition on an mlx.core.array and list"):
        a + [1, 2]
    with pytest.raises(ValueError, match="multiplication .* tuple"):
        (1, 2) * a
    # The functions still take lists, as before.
    assert mx.add(a, mx.array([1, 2])).tolist() == [2, 4]


def test_complex_and_format():
    assert complex(mx.array(1 + 2j)) == 1 + 2j
    assert complex(mx.array(3.5)) == 3.5 + 0j
    assert f"{mx.array(3.14159):.2f}" == "3.14"
    assert f"{mx.array(7):>4}" == "   7"
    assert f"{mx.array(1.5)}" == "1.5"
    assert f"{mx.array([1.5])}" == str(mx.array([1.5]))
    with pytest.raises(TypeError, match="unsupported format string"):
        f"{mx.array([1.5]):.2f}"


def test_bytes_become_uint8():
    a = mx.array(b"ab\x00\xff")
    assert a.dtype == mx.uint8 and a.tolist() == [97, 98, 0, 255]
    np.testing.assert_array_equal(np.array(mx.array(bytearray(b"ab"))), [97, 98])


def test_assignment_with_a_python_bool_key():
    # As MLX: True assigns everywhere (broadcasting the value), False nowhere.
    x = mx.array([[1, 2], [3, 4]])
    x[True] = mx.array([7, 8])
    assert x.tolist() == [[7, 8], [7, 8]]
    y = mx.array([1, 2])
    y[False] = 5
    assert y.tolist() == [1, 2]
    z = mx.array(3)
    z[True] = 5
    assert z.item() == 5
    with pytest.raises(ValueError):
        y[True] = mx.array([1, 2, 3])


def test_weak_references_and_asarray():
    import weakref

    a = mx.array([1.0, 2.0])
    ref = weakref.ref(a)
    assert ref() is a
    del a
    import gc

    gc.collect()
    assert ref() is None
    b = mx.array([1, 2])
    assert mx.asarray(b) is not b and mx.asarray(b, copy=True).tolist() == [1, 2]
    assert mx.asarray(b, dtype=mx.float32).dtype == mx.float32
    with pytest.raises(ValueError, match="Unable to avoid copy"):
        mx.asarray(b, copy=False)
    with pytest.raises(ValueError):
        mx.asarray(np.ones(2), copy=False)


def test_dlpack_both_ways():
    a = mx.array([[1.0, 2.0], [3.0, 4.0]])
    assert a.__dlpack_device__() == (1, 0)
    back = np.from_dlpack(a)  # a host copy through the DLPack protocol
    np.testing.assert_array_equal(back, [[1.0, 2.0], [3.0, 4.0]])

    class Producer:  # any DLPack producer on the host (torch, jax, cupy's host arrays)
        def __init__(self, x):
            self.x = x

        def __dlpack__(self, **kwargs):
            return self.x.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.x.__dlpack_device__()

    src = np.arange(6, dtype=np.int16).reshape(2, 3)
    b = mx.array(Producer(src))
    assert b.dtype == mx.int16 and b.tolist() == src.tolist()
    src[0, 0] = 99  # copied in: later writes do not reach the kiln array
    assert b[0, 0].item() == 0
    torch = pytest.importorskip("torch")
    t = torch.arange(4, dtype=torch.float32)
    assert mx.array(t).tolist() == [0.0, 1.0, 2.0, 3.0]
    assert torch.from_dlpack(mx.array([1.5, 2.5])).tolist() == [1.5, 2.5]
