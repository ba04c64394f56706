"""Random number generation, following ``mlx.core.random`` (threefry keys: the same key
gives the same numbers as MLX)."""

from kiln._core import random as _random

key = _random.key
seed = _random.seed
split = _random.split
bits = _random.bits
uniform = _random.uniform
normal = _random.normal

__all__ = ["bits", "key", "normal", "seed", "split", "uniform"]
