"""kiln: lazy n-dimensional arrays in Rust with MLX's Python API.

Use it as MLX: ``import kiln.core as mx``; or run code written for MLX unchanged after
``kiln.alias_mlx()`` (``python -m kiln run script.py``).
"""

from kiln import core
from kiln._alias import alias_mlx, unalias_mlx
from kiln._core import __version__

__all__ = ["__version__", "alias_mlx", "core", "unalias_mlx"]
