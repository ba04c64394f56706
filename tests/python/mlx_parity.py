"""Runs expressions with `mx` bound to kiln.core and to mlx.core and asserts the same
outcome for each: the same exception class, or results of one dtype and shape with equal
values (floats within 1e-2, NaN equal to NaN). Both run on their CPU: the expressions are
reference semantics (float64 among them, which neither runs on a GPU). Skips where MLX is not
installed."""

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


def _difference(expression, mlx):
    """None when kiln and MLX agree on `expression`, else what differs."""
    (kind_k, k), (kind_m, m) = _run(expression, kx), _run(expression, mlx)
    if kind_k != kind_m or kind_k == "error":
        return None if (kind_k, k) == (kind_m, m) else f"kiln {k!r}, mlx {m!r}"
    dk, dm = str(k.dtype).split(".")[-1], str(m.dtype).split(".")[-1]
    kv, mv = _as_numpy(k, kx), _as_numpy(m, mlx)
    if dk != dm or kv.shape != mv.shape:
        return f"kiln {dk}{kv.shape}, mlx {dm}{mv.shape}"
    if kv.dtype.kind == "f":
        same = np.allclose(kv, mv, rtol=1e-2, atol=1e-2, equal_nan=True)
    else:
        same = np.array_equal(kv, mv)
    return None if same else f"kiln {kv.tolist()}, mlx {mv.tolist()}"


def assert_same_as_mlx(expressions):
    """Every expression gives the same outcome on kiln and MLX (all differences listed)."""
    mlx = pytest.importorskip("mlx.core")
    devices = kx.default_device(), mlx.default_device()
    kx.set_default_device(kx.cpu)
    mlx.set_default_device(mlx.cpu)
    try:
        diffs = [(e, d) for e in expressions if (d := _difference(e, mlx)) is not None]
    finally:
        kx.set_default_device(devices[0])
        mlx.set_default_device(devices[1])
    assert not diffs, "\n".join(f"{e}: {d}" for e, d in diffs)
