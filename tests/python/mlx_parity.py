"""Runs one expression with `mx` bound to kiln.core and to mlx.core and asserts the same
outcome: the same exception class, or results of one dtype and shape with equal values
(floats within 1e-2, NaN equal to NaN). Skips where MLX is not installed."""

import kiln.core as kx
import numpy as np
import pytest


def _run(expression, module):
    try:
        return "ok", eval(expression, {"mx": module, "nan": np.nan, "inf": np.inf})
    except Exception as e:  # noqa: BLE001 - the class is what is compared
        return "error", type(e).__name__


def _as_numpy(a, module):
    if a.dtype == module.bfloat16:
        a = a.astype(module.float32)
    return np.array(a)


def assert_same_as_mlx(expression):
    mlx = pytest.importorskip("mlx.core")
    (kind_k, k), (kind_m, m) = _run(expression, kx), _run(expression, mlx)
    assert kind_k == kind_m, (k, m)
    if kind_k == "error":
        assert k == m
        return
    assert str(k.dtype).split(".")[-1] == str(m.dtype).split(".")[-1]
    kv, mv = _as_numpy(k, kx), _as_numpy(m, mlx)
    assert kv.shape == mv.shape
    if kv.dtype.kind == "f":
        np.testing.assert_allclose(kv, mv, rtol=1e-2, atol=1e-2, equal_nan=True)
    else:
        np.testing.assert_array_equal(kv, mv)
