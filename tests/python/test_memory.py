"""Memory counters follow allocations: lazy arrays hold nothing, eval allocates, del frees."""

import kiln.core as mx


def test_active_memory_tracks_arrays():
    base = mx.get_active_memory()
    x = mx.arange(1 << 16, dtype=mx.float32) * 2
    assert mx.get_active_memory() - base < 1024  # recorded, not computed
    mx.eval(x)
    assert mx.get_active_memory() - base >= 4 << 16
    mx.reset_peak_memory()
    assert mx.get_peak_memory() == mx.get_active_memory()
    del x
    assert mx.get_active_memory() - base < 1024
