"""Print options (`set_printoptions`, `printoptions`, `PrintOptions`) against MLX's output."""

import kiln.core as mx
import pytest

VALUES = [1 / 3, 2.0, 1e-5, 123456.7, 1e10, float("nan"), -0.0, float("inf")]


@pytest.fixture(autouse=True)
def reset():
    yield
    mx.set_printoptions(precision=-1)


@pytest.mark.parametrize(
    "precision, want",
    [
        (-1, "array([0.333333, 2, 1e-05, ..., nan, -0, inf], dtype=float32)"),
        (0, "array([0, 2, 0, ..., nan, -0, inf], dtype=float32)"),
        (3, "array([0.333, 2.000, 0.000, ..., nan, -0.000, inf], dtype=float32)"),
        (8, "array([0.33333334, 2.00000000, 0.00001000, ..., nan, -0.00000000, inf], dtype=float32)"),
    ],
)
def test_precision(precision, want):
    mx.set_printoptions(precision=precision)
    assert mx.get_printoptions().precision == precision
    assert repr(mx.array(VALUES)) == want


def test_context_manager_restores():
    x = mx.array([1 / 3, 2.0])
    with mx.printoptions(precision=2) as ctx:
        assert repr(x) == "array([0.33, 2.00], dtype=float32)"
        assert mx.get_printoptions().precision == 2
    assert ctx is not None
    assert repr(x) == "array([0.333333, 2], dtype=float32)"
    with pytest.raises(RuntimeError):
        with mx.printoptions(precision=1):
            raise RuntimeError("inside")
    assert mx.get_printoptions().precision == -1


def test_ints_and_other_dtypes():
    mx.set_printoptions(precision=3)
    assert repr(mx.array([1, 2])) == "array([1, 2], dtype=int32)"
    assert repr(mx.array([1.5, 2], mx.float16)) == "array([1.500, 2.000], dtype=float16)"
    assert repr(mx.array(1 / 3, mx.float64)) == "array(0.333, dtype=float64)"
    mx.set_printoptions()
    assert mx.get_printoptions().precision == -1


def test_print_options_object():
    o = mx.PrintOptions()
    assert o.precision == -1
    o.precision = 4
    assert o.precision == 4
    assert mx.get_printoptions().precision == -1  # a snapshot, not the live setting


def test_matches_mlx():
    mlx = pytest.importorskip("mlx.core")
    try:
        for p in (-1, 0, 1, 5, 12):
            mx.set_printoptions(precision=p)
            mlx.set_printoptions(precision=p)
            for dtype in ("float32", "float16", "float64"):
                a = mx.array(VALUES, dtype=getattr(mx, dtype))
                b = mlx.array(VALUES, dtype=getattr(mlx, dtype))
                assert repr(a) == repr(b), (p, dtype)
    finally:
        mlx.set_printoptions(precision=-1)
