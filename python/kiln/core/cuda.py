"""``mlx.core.cuda``: whether the CUDA backend is available."""

from kiln import _core as _k


def is_available():
    """Whether the CUDA backend is available: a CUDA driver and an NVIDIA GPU were found."""
    return _k.is_available(_k.gpu)


__all__ = ["is_available"]
