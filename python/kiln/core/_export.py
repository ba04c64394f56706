"""``mx.export_function``, ``mx.import_function`` and ``mx.exporter``, as MLX's.

A function is traced as ``mx.compile`` traces it (``_core._export_trace``: placeholders for
the example arrays, constants it closes over frozen into the graph) and saved, with every
trace added to the same file, in kiln's own versioned format (kiln-core ``export.rs``). An
imported function picks the trace that matches a call's arguments (count, keyword names,
dtypes, and shapes, or only the number of dimensions when exported ``shapeless``) and
replays it: optimised and fused for plain arrays, as traced under grad, vmap and compile.
Arguments follow MLX: arrays as ``*args``/``**kwargs``, or one tuple (or list) and/or one
dict of arrays. Results are always a tuple of arrays.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Optional

from kiln import _core

array = _core.array

_INPUTS = (
    "Inputs can either be a variable number of positional and keyword arrays or a single "
    "tuple and/or dictionary of arrays."
)


def _inputs(where: str, args: tuple, kwargs: dict) -> tuple:
    """The positional arrays and the keyword arrays of a call, by MLX's rule."""
    if all(isinstance(a, array) for a in args) and all(
        isinstance(v, array) for v in kwargs.values()
    ):
        return list(args), dict(kwargs)
    if not kwargs and 1 <= len(args) <= 2:
        if len(args) == 2:
            pos, kw = args
        elif isinstance(args[0], dict):
            pos, kw = (), args[0]
        else:
            pos, kw = args[0], {}
        if (
            isinstance(pos, (tuple, list))
            and isinstance(kw, dict)
            and all(isinstance(a, array) for a in pos)
            and all(isinstance(k, str) and isinstance(v, array) for k, v in kw.items())
        ):
            return list(pos), dict(kw)
    raise ValueError(f"[{where}] {_INPUTS}")


def _shape(shape: Any) -> str:
    return "(" + ",".join(str(d) for d in shape) + ")"


def _dtype(d: Any) -> str:
    return str(d).rsplit(".", 1)[-1]


def _describe(pos: list, names: list, metas: list, indent: str) -> str:
    """MLX's listing of a signature: ``1: (2,3) float32`` / ``"y": (3) float32``."""
    lines = [
        f"{indent}{i + 1}: {_shape(s)} {_dtype(d)}" for i, (s, d) in enumerate(metas[: len(pos)])
    ]
    lines += [
        f'{indent}"{k}": {_shape(s)} {_dtype(d)}' for k, (s, d) in zip(names, metas[len(pos):])
    ]
    return "".join(line + "\n" for line in lines)


def _key(pos: list, names: list, flat: list, shapeless: bool) -> tuple:
    """What tells traces apart (a second trace with the same key is refused, as MLX)."""
    metas = tuple((a.dtype, a.ndim if shapeless else tuple(a.shape)) for a in flat)
    return (len(pos), tuple(names), metas)


class FunctionExporter:
    """Adds traces of one function to one file (``mx.exporter``): each call with example
    arguments traces the function for their signature and rewrites the file with every
    trace so far, so it is complete after each call. A context manager; ``close()`` ends
    it."""

    def __init__(self, file: Any, fun: Callable, shapeless: bool, metadata: Optional[str]):
        if not callable(fun):
            raise TypeError(f"[export_function] Expected a callable, got {type(fun).__name__}.")
        if metadata is not None and not isinstance(metadata, str):
            raise TypeError(
                f"[export_function] metadata must be a string, got {type(metadata).__name__}."
            )
        self._file = os.fspath(file)
        self._fun = fun
        self._shapeless = bool(shapeless)
        self._metadata = metadata
        self._traces: list = []
        self._keys: set = set()
        self._closed = False
        self._write()

    def _write(self) -> None:
        _core._export_write(self._file, self._traces, self._shapeless, self._metadata)

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        if self._closed:
            raise RuntimeError("[export_function] Attempting to write after exporting is closed.")
        pos, kw = _inputs("export_function", args, kwargs)
        names = sorted(kw)
        flat = pos + [kw[k] for k in names]
        key = _key(pos, names, flat, self._shapeless)
        if key in self._keys:
            raise RuntimeError(
                "[export_function] Attempting to export a function twice with the same "
                "signature is not allowed."
            )
        n = len(pos)
        traced = _traced(self._fun, n, names)
        trace = _core._export_trace(traced, flat, n, names, self._shapeless)
        self._traces.append(trace)
        self._keys.add(key)
        try:
            self._write()
        except BaseException:
            self._traces.pop()
            self._keys.discard(key)
            raise

    def close(self) -> None:
        """Ends the export (later calls are an error); the file is already complete."""
        self._closed = True

    def __enter__(self) -> "FunctionExporter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def exporter(
    file: Any, fun: Callable, *, shapeless: bool = False, metadata: Optional[str] = None
) -> FunctionExporter:
    """A callable that exports a trace of ``fun`` for each call's example arguments to
    ``file`` (MLX's ``mx.exporter``)."""
    return FunctionExporter(file, fun, shapeless, metadata)


def export_function(
    file: Any,
    fun: Callable,
    *args: Any,
    shapeless: bool = False,
    metadata: Optional[str] = None,
    **kwargs: Any,
) -> None:
    """Traces ``fun`` on the example arrays (``*args`` and ``**kwargs``, or one tuple and/or
    one dict of arrays) and saves the graph, constants included, to ``file``.
    ``shapeless=True`` lets the imported function take other shapes of the same number of
    dimensions. ``metadata`` is a string saved beside it (``import_function(...,
    return_metadata=True)``)."""
    if callable(file) and not isinstance(file, (str, bytes, os.PathLike)):
        if metadata is not None:
            raise ValueError(
                "[export_function] The metadata argument is only supported when exporting to "
                "a file, not when using a callback."
            )
        _export_to_callback(file, fun, args, kwargs, shapeless)
        return
    with exporter(file, fun, shapeless=shapeless, metadata=metadata) as ex:
        ex(*args, **kwargs)


def _traced(fun: Callable, n: int, names: list) -> Callable:
    """``fun`` as a function of the flat list of placeholders (positional, then keyword)."""

    def traced(placeholders: list) -> list:
        out = fun(*placeholders[:n], **dict(zip(names, placeholders[n:])))
        if isinstance(out, array):
            return [out]
        if isinstance(out, (tuple, list)) and all(isinstance(o, array) for o in out):
            return list(out)
        raise ValueError(
            "[export_function] Outputs can be either a single array, a tuple, or a list "
            "of arrays."
        )

    return traced


def _arguments(params: str) -> list:
    """A primitive's parameters (kiln's, from its JSON spelling) as a list of values."""
    value = json.loads(params) if params else None
    if isinstance(value, dict) and len(value) == 1:
        value = next(iter(value.values()))
    if isinstance(value, dict):
        return [_tuples(v) for v in value.values()]
    return []


def _tuples(v: Any) -> Any:
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


def _export_to_callback(
    callback: Callable, fun: Callable, args: tuple, kwargs: dict, shapeless: bool
) -> None:
    """MLX's callback form of ``export_function``: the traced graph handed to ``callback``
    as dicts, in MLX's order: the inputs, the keyword inputs, the outputs, the constants,
    then one dict per primitive call (MLX's class names; ``arguments`` holds kiln's
    parameters of the primitive). Arrays are named ``A``, ``B``, .. as MLX names them:
    inputs first, then outputs, constants, and the other values in order."""
    from kiln.core._mlxnames import class_name, letters

    if not callable(fun):
        raise TypeError(f"[export_function] Expected a callable, got {type(fun).__name__}.")
    pos, kw = _inputs("export_function", args, kwargs)
    names = sorted(kw)
    flat = pos + [kw[k] for k in names]
    n = len(pos)
    trace = _core._export_trace(_traced(fun, n, names), flat, n, names, bool(shapeless))
    nodes = trace.nodes()
    consts = trace.constants()
    ins = trace.inputs()
    label: dict = {}

    def name(src: tuple) -> str:
        if src not in label:
            label[src] = letters(len(label))
        return label[src]

    def meta(src: tuple) -> tuple:
        kind, i, k = src
        if kind == "input":
            shape, dtype = ins[i]
        elif kind == "const":
            shape, dtype = tuple(consts[i].shape), consts[i].dtype
        else:
            shape, dtype = nodes[i][3][k]
        return (name(src), tuple(shape), dtype)

    inputs = [meta(("input", i, 0)) for i in range(len(ins))]
    callback({"inputs": inputs, "type": "inputs"})
    callback({"keywords": [(k, inputs[n + j][0]) for j, k in enumerate(names)],
              "type": "keyword_inputs"})
    callback({"outputs": [meta(tuple(o)) for o in trace.outputs()], "type": "outputs"})
    callback({"constants": [(name(("const", i, 0)), c) for i, c in enumerate(consts)],
              "type": "constants"})
    def mlx_class(prim: str, srcs: list, outs: list) -> str:
        # kiln records squeeze and expand_dims as reshapes; MLX has classes for them.
        if prim == "reshape" and len(srcs) == 1:
            before, after = tuple(meta(tuple(srcs[0]))[1]), tuple(outs[0][0])
            drop = lambda s: tuple(d for d in s if d != 1)  # noqa: E731
            if drop(before) == drop(after) and len(after) != len(before):
                return "Squeeze" if len(after) < len(before) else "ExpandDims"
        return class_name(prim, exported=True)

    for i, (prim, params, srcs, outs) in enumerate(nodes):
        callback({
            "arguments": _arguments(params),
            "outputs": [meta(("node", i, k)) for k in range(len(outs))],
            "inputs": [meta(tuple(s)) for s in srcs],
            "name": mlx_class(prim, srcs, outs),
            "type": "primitive",
        })


class ImportedFunction:
    """A function loaded by ``import_function``: call it as the exported function (arrays
    as ``*args``/``**kwargs``, or one tuple and/or dict of arrays); returns a tuple."""

    def __init__(self, graph: Any, file: str):
        self._graph = graph
        self._file = file
        self._shapeless = graph.shapeless
        sigs = graph.signatures()
        self._signatures = [(n, list(k), [(tuple(s), d) for s, d in m]) for n, k, m in sigs]

    def _matches(self, sig: tuple, pos: list, names: list, flat: list) -> bool:
        n, kws, metas = sig
        if n != len(pos) or kws != names or len(metas) != len(flat):
            return False
        for a, (shape, dtype) in zip(flat, metas):
            if a.dtype != dtype:
                return False
            if self._shapeless:
                if a.ndim != len(shape):
                    return False
            elif tuple(a.shape) != shape:
                return False
        return True

    def __call__(self, *args: Any, **kwargs: Any) -> tuple:
        pos, kw = _inputs("import_function::call", args, kwargs)
        names = sorted(kw)
        flat = pos + [kw[k] for k in names]
        for i, sig in enumerate(self._signatures):
            if self._matches(sig, pos, names, flat):
                return tuple(self._graph.call(i, flat))
        raise ValueError(self._no_match(pos, names, flat))

    def _no_match(self, pos: list, names: list, flat: list) -> str:
        # MLX lists traces with more inputs first, then in export order.
        order = sorted(range(len(self._signatures)), key=lambda i: -len(self._signatures[i][2]))
        text = (
            "[import_function::call] No imported function found which matches the given "
            "positional and keyword arguments. Possible functions include:\n"
        )
        for j, i in enumerate(order):
            n, kws, metas = self._signatures[i]
            text += f" {j + 1}. Function with {n} positional inputs and {len(kws)} keyword inputs:\n"
            text += _describe(list(range(n)), kws, metas, "   ")
        called = [(tuple(a.shape), a.dtype) for a in flat]
        text += f"\nCalled with {len(pos)} positional inputs and {len(names)} keyword inputs:\n"
        text += _describe(pos, names, called, "  ")
        return text

    def __repr__(self) -> str:
        return f"<kiln imported function from {self._file!r}: {len(self._signatures)} traces>"


def import_function(file: Any, return_metadata: bool = False) -> Any:
    """Loads a function saved by ``export_function`` / ``exporter``. The file's magic
    bytes, version, lengths, checksum and graph are checked: a bad file raises an error
    naming ``import_function``. With ``return_metadata``, returns ``(function, metadata)``
    (``""`` when none was saved)."""
    path = os.fspath(file)
    graph = _core._import_graph(path)
    fun = ImportedFunction(graph, path)
    if return_metadata:
        return fun, graph.metadata
    return fun
