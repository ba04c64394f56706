"""``mlx.core.metal`` as MLX's Linux build has it: Metal is never available, and the memory
functions are deprecated aliases of the ``kiln.core`` ones."""

import warnings as _warnings

from kiln import _core as _k


def is_available():
    """Whether the Metal backend is available: always False (kiln has no Metal backend)."""
    return False


def _deprecated(name):
    _warnings.warn(
        f"mx.metal.{name} is deprecated and will be removed in a future version. "
        f"Use mx.{name} instead.",
        DeprecationWarning,
        stacklevel=3,
    )


def device_info():
    """Deprecated: Metal device information (empty without Metal); use ``mx.device_info``."""
    _deprecated("device_info")
    return {}


def get_active_memory():
    """Deprecated alias of ``mx.get_active_memory``."""
    _deprecated("get_active_memory")
    return _k.get_active_memory()


def get_peak_memory():
    """Deprecated alias of ``mx.get_peak_memory``."""
    _deprecated("get_peak_memory")
    return _k.get_peak_memory()


def reset_peak_memory():
    """Deprecated alias of ``mx.reset_peak_memory``."""
    _deprecated("reset_peak_memory")
    _k.reset_peak_memory()


def get_cache_memory():
    """Deprecated alias of ``mx.get_cache_memory``."""
    _deprecated("get_cache_memory")
    return _k.get_cache_memory()


def clear_cache():
    """Deprecated alias of ``mx.clear_cache``."""
    _deprecated("clear_cache")
    _k.clear_cache()


def set_memory_limit(limit):
    """Deprecated alias of ``mx.set_memory_limit``."""
    _deprecated("set_memory_limit")
    return _k.set_memory_limit(limit)


def set_cache_limit(limit):
    """Deprecated alias of ``mx.set_cache_limit``."""
    _deprecated("set_cache_limit")
    return _k.set_cache_limit(limit)


def set_wired_limit(limit):
    """Deprecated alias of ``mx.set_wired_limit``."""
    _deprecated("set_wired_limit")
    from kiln.core._platform import set_wired_limit as _set

    return _set(limit)


def start_capture(path):
    """Start a Metal capture: nothing to capture without Metal (a no-op, as MLX on Linux)."""


def stop_capture():
    """Stop a Metal capture: a no-op without Metal."""


__all__ = [
    "clear_cache", "device_info", "get_active_memory", "get_cache_memory", "get_peak_memory",
    "is_available", "reset_peak_memory", "set_cache_limit", "set_memory_limit",
    "set_wired_limit", "start_capture", "stop_capture",
]
