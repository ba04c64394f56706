"""The public API is documented and its type stubs are complete."""

import ast
import inspect
import pathlib

import pytest

import kiln.core as mx

STUBS = pathlib.Path(__file__).resolve().parents[2] / "python" / "kiln" / "core"


def public(module):
    return {n: getattr(module, n) for n in dir(module) if not n.startswith("_")}


@pytest.mark.parametrize(
    "module", [mx, mx.random, mx.linalg, mx.fft, mx.fast],
    ids=["core", "random", "linalg", "fft", "fast"]
)
def test_every_public_callable_has_a_docstring(module):
    undocumented = [n for n, o in public(module).items()
                    if callable(o) and not inspect.ismodule(o) and not (o.__doc__ or "").strip()]
    assert undocumented == []


@pytest.mark.parametrize("module,stub", [(mx, "__init__.pyi"), (mx.random, "random.pyi"),
                                         (mx.linalg, "linalg.pyi"), (mx.fft, "fft.pyi"),
                                         (mx.fast, "fast.pyi")])
def test_stubs_list_every_public_name(module, stub):
    tree = ast.parse((STUBS / stub).read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom):
            names.update(a.asname or a.name for a in node.names)
    missing = sorted(set(public(module)) - names)
    assert missing == [], f"run scripts/gen_stubs.py: {missing}"
