"""Random number generation, following ``mlx.core.random`` (threefry keys: the same key
gives the same numbers as MLX)."""

from kiln._core import random as _random

# Every function of the extension's `random` module, including ones added there later; the
# names below restate them for readers and type checkers.
globals().update({n: getattr(_random, n) for n in dir(_random) if not n.startswith("_")})

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


def multivariate_normal(mean, cov, shape=[], dtype=None, key=None, stream=None):
    """Generate jointly-normal random samples given a mean and covariance.

    ``cov`` (``(..., n, n)``) must be positive semi-definite; its square root comes from an
    SVD on the CPU (as MLX), and each sample is ``mean + z @ sqrt(cov)`` for standard normal
    ``z`` drawn from ``key``. The batch shapes of ``mean`` (``(..., n)``) and ``cov`` must
    broadcast together and with ``shape`` (when given). Only float32 is supported.
    """
    from kiln import _core as k
    from kiln.core._compat import broadcast_shapes

    dtype = k.float32 if dtype is None else dtype
    if dtype != k.float32:
        raise ValueError("[multivariate_normal] dtype must be float32.")
    mean = mean if isinstance(mean, k.array) else k.array(mean)
    cov = cov if isinstance(cov, k.array) else k.array(cov)
    if mean.ndim < 1:
        raise ValueError("[multivariate_normal] mean must have at least one dimension.")
    if cov.ndim < 2:
        raise ValueError("[multivariate_normal] cov must have at least two dimensions.")
    n = mean.shape[-1]
    if cov.shape[-1] != n or cov.shape[-2] != n:
        raise ValueError("[multivariate_normal] mean and cov must have compatible shapes.")
    batch = broadcast_shapes(mean.shape[:-1], cov.shape[:-2])
    out = tuple(broadcast_shapes(tuple(shape), batch)) if len(shape) else tuple(batch)
    u, s, vt = k.linalg.svd(cov.astype(k.float32), stream=k.cpu)
    root = k.matmul(u * k.expand_dims(k.sqrt(s), -2), vt, stream=stream)
    z = _random.normal(out + (n,), dtype, key=key, stream=stream)
    draws = k.squeeze(k.matmul(k.expand_dims(z, -2), root, stream=stream), -2)
    return k.add(mean, draws, stream=stream)


class _KeyState(list):
    """``mx.random.state``: MLX's one-element list ``[key]``, shared by all threads, whose
    element 0 is the *current thread's* key (each thread draws its own sequence).

    Random ops without ``key=`` split ``state[0]`` and write one half back. Assigning
    ``state[0] = key`` (a ``(2,)`` uint32 array) makes this thread's next draws reproducible.
    It is a ``list`` so tree utilities and ``compile(inputs=..., outputs=...)`` see one leaf.
    """

    __slots__ = ()

    def __len__(self):
        return 1

    def _index(self, i):
        if not isinstance(i, int):
            raise TypeError("random.state indices must be integers")
        if i not in (0, -1):
            raise IndexError("random.state index out of range")

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [_random._get_state_key()][i]
        self._index(i)
        return _random._get_state_key()

    def __setitem__(self, i, value):
        self._index(i)
        from kiln._core import array

        if not isinstance(value, array):
            raise TypeError("random.state[0] must be an array (a (2,) uint32 key)")
        _random._set_state_key(value)

    def __iter__(self):
        return iter([_random._get_state_key()])

    def __reversed__(self):
        return self.__iter__()

    def __contains__(self, x):
        return any(x is k for k in self)

    def __repr__(self):
        return repr(list(self))

    # Identity: comparing keys elementwise is not what `==` on the state object means.
    __eq__ = object.__eq__
    __ne__ = object.__ne__
    __hash__ = None

    def __reduce__(self):
        return (list, (list(self),))

    def copy(self):
        """A plain list holding this thread's current key."""
        return list(self)

    def _fixed(self, *args, **kwargs):
        raise TypeError("random.state always holds exactly one key; assign state[0] instead")

    append = extend = insert = pop = remove = clear = sort = reverse = _fixed
    __delitem__ = __iadd__ = __imul__ = _fixed


state = _KeyState()

__all__ = [
    "bernoulli", "bits", "categorical", "gumbel", "key", "laplace", "multivariate_normal", "normal", "permutation",
    "randint", "seed", "split", "state", "truncated_normal", "uniform",
]
