"""``mx.distributed``: process groups and collectives, following ``mlx.core.distributed``.

No communication backend is built in yet, so every group is the singleton group of this
process (size 1, rank 0), as MLX gives when nothing was launched: collectives return their
input, ``send``/``recv`` raise (there is nobody to talk to), ``init(strict=True)`` raises.
"""

from __future__ import annotations

from typing import Optional, Sequence

from kiln import _core

BACKENDS = ("any", "mpi", "nccl", "jaccl", "ring")


class Group:
    """A group of processes that communicate (here: this process alone)."""

    def __init__(self, rank: int = 0, size: int = 1):
        self._rank = rank
        self._size = size

    def rank(self) -> int:
        """This process's rank in the group."""
        return self._rank

    def size(self) -> int:
        """The number of processes in the group."""
        return self._size

    def split(self, color: int, key: int = -1) -> "Group":
        """Splits the group into subgroups by ``color``, ordered by ``key``."""
        if self._size == 1:
            raise RuntimeError("Cannot split the distributed group further.")
        raise RuntimeError("[distributed] split needs a communication backend.")

    def __repr__(self) -> str:
        return f"Group(rank={self._rank}, size={self._size})"


_WORLD: Optional[Group] = None


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(
            "[distributed] The only valid values for backend are 'any', 'mpi', 'nccl', "
            f"'jaccl' and 'ring' but {backend!r} was provided."
        )


def is_available(backend: str = "any") -> bool:
    """Whether a communication backend (``backend``, or any) can be initialised."""
    _check_backend(backend)
    return False


def init(strict: bool = False, backend: str = "any", **kwargs) -> Group:
    """The global group. With no backend available it is this process alone, unless
    ``strict``, which raises instead."""
    global _WORLD
    _check_backend(backend)
    if strict:
        raise RuntimeError("[distributed] Couldn't initialize any backend")
    if _WORLD is None:
        _WORLD = Group()
    return _WORLD


def _group(group: Optional[Group]) -> Group:
    return init() if group is None else group


def _collective(name: str, x, group: Optional[Group], stream):
    g = _group(group)
    if not isinstance(x, _core.array):
        x = _core.array(x)
    if g.size() != 1:
        raise RuntimeError(f"[{name}] groups larger than one process need a backend.")
    # One process: the reduction (or gather) of a single contribution is that contribution.
    return x


def all_sum(x, *, group: Optional[Group] = None, stream=None):
    """Sum of ``x`` over every process of the group."""
    return _collective("all_sum", x, group, stream)


def all_max(x, *, group: Optional[Group] = None, stream=None):
    """Elementwise maximum of ``x`` over every process of the group."""
    return _collective("all_max", x, group, stream)


def all_min(x, *, group: Optional[Group] = None, stream=None):
    """Elementwise minimum of ``x`` over every process of the group."""
    return _collective("all_min", x, group, stream)


def all_gather(x, *, group: Optional[Group] = None, stream=None):
    """Every process's ``x`` concatenated along the first axis."""
    return _collective("all_gather", x, group, stream)


def sum_scatter(x, *, group: Optional[Group] = None, stream=None):
    """The sum over processes of ``x``, of which each process keeps its slice of the first
    axis."""
    return _collective("sum_scatter", x, group, stream)


def _no_peer(verb: str, group: Optional[Group]):
    if _group(group).size() == 1:
        raise ValueError(f"Cannot {verb} a singleton group")
    raise RuntimeError(f"[{verb}] groups larger than one process need a backend.")


def send(x, dst: int, *, group: Optional[Group] = None, stream=None):
    """Sends ``x`` to process ``dst``; returns ``x`` once sent."""
    _no_peer("send to", group)


def recv(shape: Sequence[int], dtype, src: int, *, group: Optional[Group] = None, stream=None):
    """Receives an array of ``shape`` and ``dtype`` from process ``src``."""
    _no_peer("recv from", group)


def recv_like(x, src: int, *, group: Optional[Group] = None, stream=None):
    """Receives an array shaped like ``x`` from process ``src``."""
    _no_peer("recv from", group)
