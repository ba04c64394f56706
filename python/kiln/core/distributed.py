"""``mx.distributed``: process groups and collectives, following ``mlx.core.distributed``.

The collectives are graph primitives (lazy, inside ``grad``, ``vmap`` and ``compile``). A
group comes from ``init``: over MPI when the process was started by ``mpirun`` (or
``python -m kiln.launch``, which sets ``KILN_DISTRIBUTED_BACKEND``) or when
``backend="mpi"`` is asked for; over NCCL, one process per GPU, when
``kiln.launch --backend nccl`` started it or ``backend="nccl"`` is asked for (GPU arrays
then move on the device, inside CUDA graphs too); otherwise this process alone (size 1, rank 0), as MLX gives
when nothing was launched: collectives then return their input, ``send``/``recv`` raise.

Every process must call the same collectives in the same order. Before moving data each
checks that the others agree on the op, dtype and shape, and waits for them at most
``KILN_DISTRIBUTED_TIMEOUT`` seconds (default 300): a mismatch or a missing process is an
error on every process, not a hang.
"""

from __future__ import annotations

import atexit
import os
from typing import Optional, Sequence

from kiln import _core

BACKENDS = ("any", "mpi", "nccl", "jaccl", "ring")


class Group:
    """A group of processes that communicate."""

    def __init__(self, _id: int, rank: int, size: int, backend: str):
        self._id = _id
        self._rank = rank
        self._size = size
        self._backend = backend

    def rank(self) -> int:
        """This process's rank in the group."""
        return self._rank

    def size(self) -> int:
        """The number of processes in the group."""
        return self._size

    def split(self, color: int, key: int = -1) -> "Group":
        """Splits the group into subgroups of the processes that pass the same ``color``,
        ordered by ``key`` (this process's rank when negative). Every process of the group
        must call it."""
        return Group(*_core._distributed_split(self._id, int(color), int(key)))

    def __repr__(self) -> str:
        return f"Group(rank={self._rank}, size={self._size}, backend={self._backend!r})"


_WORLD: Optional[Group] = None
_FINALIZER_REGISTERED = False


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(
            "[distributed] The only valid values for backend are 'any', 'mpi', 'nccl', "
            f"'jaccl' and 'ring' but {backend!r} was provided."
        )


def _prepare_nccl() -> None:
    """NCCL's library from an installed ``nvidia-nccl`` wheel (as torch ships it) when none
    was named, and NVLink multicast off (it can take shared GPUs out of service)."""
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    if "KILN_NCCL_LIBRARY" in os.environ:
        return
    try:
        import importlib.util

        spec = importlib.util.find_spec("nvidia.nccl")
    except (ImportError, ValueError):
        return
    for root in list(getattr(spec, "submodule_search_locations", None) or []):
        lib = os.path.join(root, "lib", "libnccl.so.2")
        if os.path.exists(lib):
            os.environ["KILN_NCCL_LIBRARY"] = lib
            return


def is_available(backend: str = "any") -> bool:
    """Whether a communication backend (``backend``, or any) can be initialised."""
    _check_backend(backend)
    if backend in ("nccl", "any"):
        _prepare_nccl()
    return _core._distributed_is_available(backend)


def init(strict: bool = False, backend: str = "any", **kwargs) -> Group:
    """The global group: the backend's world, or this process alone when nothing was
    launched (an error instead when ``strict``)."""
    global _WORLD, _FINALIZER_REGISTERED
    _check_backend(backend)
    _prepare_nccl()
    group = Group(*_core._distributed_init(backend, bool(strict)))
    if _WORLD is not None and _WORLD._id == group._id:
        return _WORLD
    if group._backend != "singleton" and not _FINALIZER_REGISTERED:
        # MPI counts a process that exits without MPI_Finalize as failed.
        atexit.register(_core._distributed_finalize)
        _FINALIZER_REGISTERED = True
    if _WORLD is None or backend == "any":
        _WORLD = group
    return group


def _group(group: Optional[Group]) -> Group:
    if group is None:
        return _WORLD if _WORLD is not None else init()
    if not isinstance(group, Group):
        raise TypeError(f"[distributed] group must be a Group, got {type(group).__name__}.")
    return group


def _collective(name: str, x, group: Optional[Group], stream):
    return _core._distributed_collective(name, x, _group(group)._id, stream)


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
    """Every process's ``x`` concatenated along the first axis, in rank order."""
    return _collective("all_gather", x, group, stream)


def sum_scatter(x, *, group: Optional[Group] = None, stream=None):
    """The sum over processes of ``x``, of which each process keeps its block of the first
    axis."""
    return _collective("sum_scatter", x, group, stream)


def send(x, dst: int, *, group: Optional[Group] = None, stream=None):
    """Sends ``x`` to process ``dst`` when the result (``x`` itself) is evaluated."""
    return _core._distributed_send(x, int(dst), _group(group)._id, stream)


def recv(shape: Sequence[int], dtype, src: int, *, group: Optional[Group] = None, stream=None):
    """An array of ``shape`` and ``dtype`` received from process ``src`` when evaluated."""
    return _core._distributed_recv(list(shape), dtype, int(src), _group(group)._id, stream)


def recv_like(x, src: int, *, group: Optional[Group] = None, stream=None):
    """Receives an array shaped and typed like ``x`` from process ``src``."""
    return recv(x.shape, x.dtype, src, group=group, stream=stream)
