"""``kiln.alias_mlx()``: make ``import mlx...`` resolve to kiln, so that programs and packages
written for MLX (mlx-lm first) run on kiln unchanged.

An import hook at the front of ``sys.meta_path`` answers for ``mlx`` and every ``mlx.X``: it
imports ``kiln.X`` and hands back that very module object, so ``mlx.core is kiln.core`` and
state (the default device, random state, caches) is shared however a module is reached.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Optional, Sequence

_PREFIX = "mlx"


def _kiln_name(fullname: str) -> Optional[str]:
    """``mlx.X.Y`` -> ``kiln.X.Y``; None for names outside ``mlx``."""
    if fullname == _PREFIX:
        return "kiln"
    if fullname.startswith(_PREFIX + "."):
        return "kiln" + fullname[len(_PREFIX):]
    return None


class _MlxAliasLoader(importlib.abc.Loader):
    """Loads ``mlx.X`` as the already imported ``kiln.X`` (no new module object)."""

    def __init__(self, target: str):
        self._target = target
        self._module: Optional[ModuleType] = None
        self._spec = None

    def create_module(self, spec):
        self._module = importlib.import_module(self._target)
        self._spec = getattr(self._module, "__spec__", None)
        return self._module

    def exec_module(self, module):
        # The import system stamped the alias's spec on kiln's module; kiln.X keeps its own
        # (reload, pickling and `python -m` look at it).
        if self._spec is not None:
            module.__spec__ = self._spec


class _MlxAliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Optional[Sequence[str]] = None, target=None):
        kiln_name = _kiln_name(fullname)
        if kiln_name is None:
            return None
        try:
            found = importlib.util.find_spec(kiln_name)
        except ModuleNotFoundError:
            found = None
        if found is None:
            # A submodule kiln lacks may still be an attribute (e.g. a class re-exported
            # under a module-like name); otherwise say plainly what is missing.
            raise ModuleNotFoundError(
                f"[kiln.alias_mlx] {fullname} has no kiln counterpart ({kiln_name} does not "
                f"exist), so it cannot be imported through the mlx alias.",
                name=fullname,
            )
        is_package = found.submodule_search_locations is not None
        return importlib.machinery.ModuleSpec(
            fullname, _MlxAliasLoader(kiln_name), is_package=is_package
        )


_FINDER = _MlxAliasFinder()


def _real_mlx_loaded() -> list:
    """Names of modules under ``mlx`` already imported from somewhere other than kiln."""
    out = []
    for name, module in list(sys.modules.items()):
        if name != _PREFIX and not name.startswith(_PREFIX + "."):
            continue
        if module is None:
            continue
        kiln_name = _kiln_name(name)
        if sys.modules.get(kiln_name) is not module:
            out.append(name)
    return out


def alias_mlx() -> None:
    """From now on ``import mlx``, ``import mlx.core as mx``, ``from mlx.nn.layers.base import
    Module`` and every other ``mlx.X`` give kiln's module of the same name, also where a real
    MLX is installed. Calling it again does nothing. Raises ``RuntimeError`` if a real
    ``mlx`` module was imported before (one process cannot use both)."""
    if _FINDER in sys.meta_path:
        return
    clash = _real_mlx_loaded()
    if clash:
        raise RuntimeError(
            f"[kiln.alias_mlx] a real MLX is already imported in this process ({', '.join(sorted(clash)[:4])}); "
            "call kiln.alias_mlx() before anything imports mlx."
        )
    sys.meta_path.insert(0, _FINDER)


def unalias_mlx() -> None:
    """Removes the alias and forgets the ``mlx`` names it created (kiln's modules stay)."""
    while _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
    for name in [n for n in sys.modules if n == _PREFIX or n.startswith(_PREFIX + ".")]:
        kiln_name = _kiln_name(name)
        if sys.modules.get(name) is sys.modules.get(kiln_name):
            del sys.modules[name]
