"""``mx.compile``: trace a function once per input signature, replay the optimised graph.

The Rust side (``_core._compile_trace``) traces a function of a flat list of arrays,
simplifies and fuses the graph; this file turns pytrees of arguments into that flat list and
a hashable key, keeps each compiled function's cache, and moves captured state
(``inputs=``/``outputs=``) in and out.
"""

from __future__ import annotations

import functools
import os
import struct
import sys
import time
from collections import OrderedDict
from typing import Any, Callable, Optional

from kiln import _core

array = _core.array

# Entries kept per compiled function; the least recently used is dropped past this.
MAX_ENTRIES = 64


def _encode(tree: Any, arrays: list, where: str) -> Any:
    """A hashable description of ``tree`` with arrays replaced by slots (appended to
    ``arrays``) and constants spelled unambiguously: True and 1, 1 and 1.0, lists and
    tuples, NaN and NaN, all differ or match as values do."""
    if isinstance(tree, array):
        arrays.append(tree)
        return "A"
    if tree is None:
        return "N"
    if isinstance(tree, bool):
        return ("b", tree)
    if isinstance(tree, int):
        return ("i", tree)
    if isinstance(tree, float):
        return ("f", struct.pack("<d", tree))
    if isinstance(tree, str):
        return ("s", tree)
    if isinstance(tree, list):
        return ("L", type(tree), tuple(_encode(x, arrays, where) for x in tree))
    if isinstance(tree, tuple):
        return ("T", type(tree), tuple(_encode(x, arrays, where) for x in tree))
    if isinstance(tree, dict):
        items = tuple((k, _encode(v, arrays, where)) for k, v in tree.items())
        return ("D", type(tree), items)
    raise ValueError(
        f"[compile] {where} must be trees of arrays and constants (int, float, bool, str, "
        f"None) in lists, tuples and dicts; got {type(tree).__name__} (close over other "
        f"objects, or capture their arrays with inputs=/outputs=)."
    )


def _decode(spec: Any, arrays: Any) -> Any:
    """Rebuilds a tree from its spec, taking arrays from the iterator ``arrays``."""
    if spec == "A":
        return next(arrays)
    if spec == "N":
        return None
    kind = spec[0]
    if kind in ("b", "i", "s"):
        return spec[1]
    if kind == "f":
        return struct.unpack("<d", spec[1])[0]
    if kind == "L":
        return spec[1](_decode(s, arrays) for s in spec[2])
    if kind == "T":
        children = [_decode(s, arrays) for s in spec[2]]
        if hasattr(spec[1], "_fields"):
            return spec[1](*children)
        return spec[1](children)
    return spec[1]((k, _decode(s, arrays)) for k, s in spec[2])


def _state_leaves(tree: Any) -> list:
    """(container, key) of every array leaf of captured state, in a fixed order (lists and
    dicts hold arrays; tuples cannot; objects are walked through ``__dict__``)."""
    return _core._state_leaves(tree)[0]


def _slot_ids(slots: list) -> list:
    """What identifies a list of state slots: each container's identity and key."""
    return [(id(c), k) for c, k in slots]


def _drop_tracers(slots: list) -> None:
    """Removes placeholders (from a trace) that sit in captured state: a dict item is
    deleted, a list item becomes None, so nothing later evaluates a placeholder."""
    for c, k in reversed(slots):
        try:
            value = c[k]
        except (KeyError, IndexError):
            continue
        if isinstance(value, array) and _core._depends_on_placeholder(value):
            if isinstance(c, dict):
                del c[k]
            else:
                c[k] = None


def _describe_key(key: tuple) -> dict:
    spec, metas, _ = key
    return {"inputs": [{"dtype": str(d), "shape": s} for d, s in metas], "structure": repr(spec)}


def _why(old: Optional[tuple], new: tuple) -> str:
    """Which part of the key changed since the previous call's entry."""
    if old is None:
        return "first call"
    if old[0] != new[0]:
        return "argument structure or constants changed"
    if len(old[1]) != len(new[1]):
        return "number of array inputs changed"
    for i, (a, b) in enumerate(zip(old[1], new[1])):
        if a[0] != b[0]:
            return f"input {i}: dtype {a[0]} -> {b[0]}"
        if a[1] != b[1]:
            return f"input {i}: shape {a[1]} -> {b[1]}"
    return "captured state changed"


def _log_trace(name: str, why: Optional[str], graph: Any) -> None:
    """``KILN_LOG=compile``: what a trace produced, as it happens (stderr)."""
    info = graph.explain()
    lines = [f"[kiln compile] traced {name} ({why}): {len(info['traced']) - 1} nodes traced, "
             f"{len(info['simplified']) - 1} after simplify, {len(info['graph']) - 1} after fusion"]
    lines += [f"    {line}" for line in info["graph"]]
    for r in info["regions"]:
        borders = "; ".join(r["borders"]) or "graph inputs"
        lines.append(f"    region {r['name']} ({r['size']} ops), stopped at: {borders}")
    print("\n".join(lines), file=sys.stderr)


class _CompiledFunction(_core.CompiledCall):
    """The callable ``mx.compile`` returns (keeps the wrapped function's name, doc and
    signature through ``functools.update_wrapper``). Calls start in Rust
    (``_core.CompiledCall``): a call of array arguments only, no captured state, with a
    cache entry for its shapes and dtypes replays there; the others come to ``_call``."""

    def __init__(self, fun: Callable, inputs: Any, outputs: Any, shapeless: bool):
        functools.update_wrapper(self, fun)
        self._fun = fun
        self._inputs = inputs
        self._outputs = outputs
        self._shapeless = bool(shapeless)
        # No captured state: calls of plain array arguments may take the fast path.
        self._plain = inputs is None and outputs is None
        self._cache = OrderedDict()
        self._traces = 0
        self._calls = 0
        self._hits = 0
        self._last_key = None
        self._last_retrace: Optional[str] = None
        # Every trace: the call that made it, why, the key and the time tracing took.
        self._retraces: list = []

    def _call(self, args: tuple, kwargs: dict, fast_key: Optional[tuple]) -> Any:
        if not _core._compile_enabled():
            return self._fun(*args, **kwargs)
        flat: list = []
        spec = _encode((args, kwargs), flat, "Arguments of a compiled function")
        if any(_core._is_tracer(a) for a in flat):
            # Inside another transform (grad, vmap, an outer compile): trace through the
            # original so the outer transform sees every primitive.
            return self._fun(*args, **kwargs)
        slots, state = _core._state_leaves(self._inputs) if self._inputs is not None else ([], [])
        every = flat + state
        # Entries of all-array calls live under the fast key (see __call__); the others
        # under the structure and the arrays' signature (built in Rust: with captured
        # state there are hundreds of arrays per call).
        cache_key = fast_key
        if cache_key is None:
            cache_key = (spec, _core._compile_signature(tuple(every), self._shapeless), len(state))
        self._calls += 1
        entry = self._cache.get(cache_key)
        written = None
        if entry is None:
            metas = tuple(
                (a.dtype, a.ndim if self._shapeless else tuple(a.shape)) for a in every
            )
            key = (spec, metas, len(state))
            self._last_retrace = _why(self._last_key, key)
            started = time.perf_counter()
            graph, out_spec, n_out, written, reshaped = self._trace(spec, flat, slots, every)
            self._retraces.append({
                "call": self._calls, "reason": self._last_retrace, "key": _describe_key(key),
                "trace_ms": (time.perf_counter() - started) * 1e3, "cached": not reshaped,
            })
            entry = (graph, out_spec, n_out, key)
            # A trace that created or replaced captured state (a lazily initialised
            # optimizer, a new dict key, a longer list) ran Python that a replay would not:
            # the next call sees the new state and traces again, as MLX does.
            if not reshaped:
                self._cache[cache_key] = entry
                if len(self._cache) > MAX_ENTRIES:
                    self._cache.popitem(last=False)
        else:
            self._hits += 1
            self._cache.move_to_end(cache_key)
        graph, out_spec, n_out, key = entry
        self._last_key = key
        try:
            results = graph.replay(every)
        except BaseException:
            if written is not None:
                _drop_tracers(written)
            raise
        if n_out < len(results):
            if written is None:
                # The same tree as the inputs (the usual `inputs=state, outputs=state`) has
                # the same leaves: a replay runs no Python that could have changed it.
                same = self._outputs is self._inputs
                written = slots if same else _state_leaves(self._outputs)
            if len(written) != len(results) - n_out:
                raise RuntimeError(
                    f"[compile] The captured outputs= hold {len(written)} arrays but the "
                    f"compiled function produced {len(results) - n_out} for them (their "
                    "structure changed outside the function since it was traced)."
                )
            for (c, k), value in zip(written, results[n_out:]):
                c[k] = value
        return _decode(out_spec, iter(results[:n_out]))

    def _trace(self, spec: Any, flat: list, slots: list, every: list) -> tuple:
        """Traces the function; returns (graph, output spec, number of outputs, the state
        slots its captured outputs go to, whether the trace changed the captured state's
        structure)."""
        n_args = len(flat)
        box: dict = {}

        def traced(placeholders: list) -> list:
            args, kwargs = _decode(spec, iter(placeholders[:n_args]))
            originals = [c[k] for c, k in slots]
            for (c, k), p in zip(slots, placeholders[n_args:]):
                c[k] = p
            try:
                out = self._fun(*args, **kwargs)
                out_flat: list = []
                box["spec"] = _encode(out, out_flat, "Outputs of a compiled function")
                box["n"] = len(out_flat)
                if self._outputs is not None:
                    # Read after the call: the function may have added state (Adam's
                    # moments on its first step) that must be written back too.
                    box["written"] = _state_leaves(self._outputs)
                    out_flat += [c[k] for c, k in box["written"]]
                if self._inputs is not None:
                    box["after"] = _state_leaves(self._inputs)
                return out_flat
            finally:
                for (c, k), v in zip(slots, originals):
                    c[k] = v

        try:
            graph = _core._compile_trace(traced, every, self._shapeless)
        except BaseException:
            # Arrays the failed trace left in captured state are placeholders: take them out.
            for tree in (self._inputs, self._outputs):
                if tree is not None:
                    _drop_tracers(_state_leaves(tree))
            raise
        self._traces += 1
        if "compile" in os.environ.get("KILN_LOG", ""):
            _log_trace(getattr(self._fun, "__qualname__", repr(self._fun)), self._last_retrace, graph)
        written = box.get("written", [])
        after = box.get("after", slots)
        reshaped = _slot_ids(after) != _slot_ids(slots)
        if self._inputs is not None:
            # Captured inputs that the trace left holding placeholders and that no output
            # overwrites (state grown in inputs= but not listed in outputs=).
            targets = set(_slot_ids(written))
            _drop_tracers([s for s in after if (id(s[0]), s[1]) not in targets])
        return graph, box["spec"], box["n"], written, reshaped

    def report(self, path: Any, *args: Any, **kwargs: Any) -> str:
        """Writes one self-contained HTML file showing what compile did for this function:
        its code, the traced and simplified graphs (drawn, coloured by fused region, with
        the reason fusion stopped at each border), the fused kernels' generated source,
        build and run times, the eager kernels left, the cache's hits and retraces, and the
        device that ran each kernel. With arguments the function is first run on them,
        compiled and lazily (and on the CPU and the GPU where there is one), under the
        profiler, and the page switches between those runs; without, it shows the calls
        made so far. Captured state (``inputs=``) is put back afterwards. Returns the path."""
        from kiln.core import _report

        return _report.write_report(self, path, args, kwargs, run=bool(args or kwargs))

    def explain(self) -> dict:
        """What compile did, as data: one dict per cache entry (its key, the graph as
        traced, after simplify and after fusion, the fused regions with the reason fusion
        stopped at each border; on the GPU, ``cuda_graph``: the state of the entry's CUDA
        graph, its node count and launches; ``gpu_prebuild``: the kernels its first call
        needed, built in parallel before it ran, with the threads, the batch's wall time and
        each kernel's build time), why the last call traced again, call and trace counts, and
        the kernel builders' counters (``kernels``; GPU kernels under ``kernels["cuda"]``:
        NVRTC builds, disk hits, each kernel's name, source, build time and batch, and every
        parallel batch under ``batches``)."""
        _core._wait_for_builds()
        entries = []
        for graph, _, n_out, key in self._cache.values():
            info = dict(graph.explain())
            info["key"] = _describe_key(key)
            info["outputs"] = n_out
            entries.append(info)
        return {
            "calls": self._calls,
            "traces": self._traces,
            "cache_hits": self._hits,
            "last_retrace": self._last_retrace,
            "retraces": [dict(r) for r in self._retraces],
            "entries": entries,
            "kernels": dict(_core._jit_stats()),
        }


def compile(
    fun: Callable,
    inputs: Optional[Any] = None,
    outputs: Optional[Any] = None,
    shapeless: bool = False,
) -> Callable:
    """Returns a compiled version of ``fun``.

    The first call with a new input signature (array shapes and dtypes, constants, tree
    structure) traces ``fun`` on placeholders, simplifies the graph and fuses elementwise
    regions into generated kernels; later calls with the same signature replay it.
    ``inputs``/``outputs`` are trees (lists, dicts, objects such as ``mx.random.state``)
    whose arrays are captured as extra inputs and written back after each call.
    ``shapeless=True`` keeps shapes out of the cache key.
    """
    if not callable(fun):
        raise TypeError(f"[compile] Expected a callable, got {type(fun).__name__}.")
    return _CompiledFunction(fun, inputs, outputs, shapeless)
