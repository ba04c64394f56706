"""Random number generation, following ``mlx.core.random`` (threefry keys: the same key
gives the same numbers as MLX)."""

from kiln._core import random as _random

key = _random.key
seed = _random.seed
split = _random.split
bits = _random.bits
uniform = _random.uniform
normal = _random.normal
randint = _random.randint
bernoulli = _random.bernoulli
truncated_normal = _random.truncated_normal
gumbel = _random.gumbel
laplace = _random.laplace
categorical = _random.categorical
permutation = _random.permutation

__all__ = [
    "bernoulli", "bits", "categorical", "gumbel", "key", "laplace", "normal", "permutation",
    "randint", "seed", "split", "truncated_normal", "uniform",
]
