"""A range of work for `ncu --profile-from-start off`: cuProfilerStart/Stop through the driver
API (ctypes), with the primary context current on the calling thread (kiln and MLX both run
on it), so that ncu times exactly the kernels issued inside, each alone.

    with profiler_range():
        mx.eval(step())
"""

from __future__ import annotations

import contextlib
import ctypes


@contextlib.contextmanager
def profiler_range():
    cuda = ctypes.CDLL("libcuda.so.1")
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    for call, args in [("cuInit", (0,)), ("cuDeviceGet", (ctypes.byref(dev), 0)),
                       ("cuDevicePrimaryCtxRetain", (ctypes.byref(ctx), dev)),
                       ("cuCtxSetCurrent", (ctx,))]:
        status = getattr(cuda, call)(*args)
        assert status == 0, f"{call} returned {status}"
    assert cuda.cuProfilerStart() == 0
    try:
        yield
    finally:
        assert cuda.cuProfilerStop() == 0
