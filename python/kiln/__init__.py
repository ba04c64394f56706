"""kiln: lazy n-dimensional arrays in Rust with MLX's Python API.

Use it as MLX: ``import kiln.core as mx``.
"""

from kiln import core
from kiln._core import __version__

__all__ = ["__version__", "core"]
