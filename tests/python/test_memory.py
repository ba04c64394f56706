"""Memory counters, the buffer cache and its limits, as MLX defines them."""

import kiln.core as mx


def test_active_memory_tracks_arrays(device):
    base = mx.get_active_memory()
    x = mx.arange(1 << 16, dtype=mx.float32) * 2
    assert mx.get_active_memory() - base < 1024  # recorded, not computed
    mx.eval(x)
    assert mx.get_active_memory() - base >= 4 << 16
    mx.reset_peak_memory()
    assert mx.get_peak_memory() == 0
    del x
    assert mx.get_active_memory() - base < 1024


def test_cache_keeps_and_clears_freed_memory(device):
    mx.clear_cache()
    assert mx.get_cache_memory() == 0
    x = mx.ones((1 << 14,)) * 3
    mx.eval(x)
    del x
    assert mx.get_cache_memory() >= 4 << 14
    mx.clear_cache()
    assert mx.get_cache_memory() == 0


def test_limits_return_previous_values(device):
    previous = mx.set_cache_limit(0)
    try:
        x = mx.ones((1 << 14,)) * 3
        mx.eval(x)
        del x
        assert mx.get_cache_memory() == 0  # caching disabled
        assert mx.set_cache_limit(1 << 30) == 0
    finally:
        mx.set_cache_limit(previous)
    limit = mx.set_memory_limit(1 << 40)
    assert limit > 0
    assert mx.set_memory_limit(limit) == 1 << 40
