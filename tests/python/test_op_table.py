"""Every row of the elementwise op tables (kiln-base `elementwise.rs`) is covered where a row
alone cannot cover it: a numpy test, MLX's signature and array method, complex64 as the
row says. A new op that misses one of these fails here, naming the op and what is missing."""

import inspect

import numpy as np
import pytest

import kiln.core as mx
from kiln import _core

import test_math
import test_ops

ROWS = _core._elementwise_ops()  # (name, mlx_class, arity, domain, complex64 supported)
NAMES = [r[0] for r in ROWS]

try:
    import mlx.core as mlx
except ImportError:
    mlx = None
needs_mlx = pytest.mark.skipif(mlx is None, reason="MLX (the oracle) is not installed")


def test_rows_have_unique_names_and_classes():
    assert len(set(NAMES)) == len(NAMES)
    assert len({r[1] for r in ROWS}) == len(ROWS)


@pytest.mark.parametrize("name", NAMES)
def test_row_has_a_numpy_test(name):
    tables = (test_ops.UNARY, test_ops.BINARY, test_math.UNARY, test_math.BINARY)
    in_table = any(row[0] == name for table in tables for row in table)
    own_test = any(hasattr(m, f"test_{name}") for m in (test_ops, test_math))
    assert in_table or own_test, (
        f"{name}: add a row to UNARY/BINARY in test_ops.py or test_math.py (numpy reference)"
    )


@pytest.mark.parametrize("name,arity", [(r[0], r[2]) for r in ROWS])
def test_row_is_a_function_of_its_arity(name, arity):
    fn = getattr(mx, name)
    params = [p for p in inspect.signature(fn).parameters.values() if p.name != "stream"]
    assert len([p for p in params if p.default is inspect.Parameter.empty]) == arity


def _mlx_positional_only(name):
    """Whether MLX's signature (its docstring's first line) makes the operands positional."""
    first = getattr(mlx, name).__doc__.splitlines()[0]
    return "/" in first.split("stream")[0].split(")")[0] and ", /" in first


def _skip_unless_mlx_has(name):
    if not hasattr(mlx, name):
        pytest.skip(f"MLX has no {name}: nothing to match")


@needs_mlx
@pytest.mark.parametrize("name", NAMES)
def test_signature_and_method_as_mlx(name):
    _skip_unless_mlx_has(name)
    params = inspect.signature(getattr(mx, name)).parameters.values()
    positional_only = any(p.kind is inspect.Parameter.POSITIONAL_ONLY for p in params)
    assert positional_only == _mlx_positional_only(name), (
        f"{name}: the row's Python form (pos/kw) differs from MLX's signature"
    )
    assert hasattr(mx.array, name) == hasattr(mlx.array, name), (
        f"{name}: MLX {'has' if hasattr(mlx.array, name) else 'lacks'} the array method"
    )


@needs_mlx
@pytest.mark.parametrize("name", NAMES)
def test_class_name_as_mlx(name):
    _skip_unless_mlx_has(name)
    cls = dict((r[0], r[1]) for r in ROWS)[name]
    fn = getattr(mlx, name)
    x = mlx.array([1, 2], dtype=mlx.int32)
    args = (x,) if dict((r[0], r[2]) for r in ROWS)[name] == 1 else (x, x)
    if name in ("floor", "ceil", "round", "abs"):
        args = (x.astype(mlx.float32),)  # integers skip the primitive in MLX too
    if name == "sign":
        args = (x.astype(mlx.float32),)
    import io

    out = io.StringIO()
    mlx.export_to_dot(out, fn(*args))
    assert cls in out.getvalue(), f"{name}: MLX names the node otherwise"


@pytest.mark.parametrize("row", ROWS, ids=NAMES)
def test_complex64_as_the_row_says(row):
    name, _cls, arity, domain, supported = row
    zn = np.array([1 + 2j, -0.5 + 0.25j, 0j], dtype=np.complex64)
    fn, args = getattr(mx, name), (mx.array(zn),) * arity
    if domain == "bool":  # truth values: complex converts to bool first (MLX too)
        np.testing.assert_array_equal(np.array(fn(*args)), getattr(np, name)(*(zn,) * arity))
    elif supported:
        out = fn(*args)
        mx.eval(out)
        assert out.shape == (3,)
    else:
        with pytest.raises((ValueError, TypeError, RuntimeError), match=rf"\[{name}\]"):
            mx.eval(fn(*args))


# Inputs inside every op's domain, away from the kinks of floor, sign, maximum and friends.
_DOMAIN = {"arccosh": (1.2, 1.8)}


@pytest.mark.parametrize("row", [r for r in ROWS if r[3] in ("any", "numeric", "float")],
                         ids=lambda r: r[0])
def test_derivative_matches_finite_differences(row):
    """The row's derivative rule (transforms/rules/elementwise.rs) against central differences
    in float64, for every input."""
    name, _cls, arity, _domain, _complex = row
    fn = getattr(mx, name)
    lo, hi = _DOMAIN.get(name, (0.2, 0.8))
    rng = np.random.default_rng(5)
    xs = [rng.uniform(lo, hi, 6) + 0.013 * i for i in range(arity)]
    f64 = lambda x: mx.array(x, dtype=mx.float64)  # noqa: E731
    if fn(*[f64(x) for x in xs]).dtype == mx.bool_:
        pytest.skip(f"{name} has a bool result: no derivative")
    grads = mx.grad(lambda *a: mx.sum(fn(*a)), argnums=tuple(range(arity)))(*map(f64, xs))
    grads = (grads,) if arity == 1 else grads  # one argnum: one array, as MLX
    eps = 1e-6
    for i in range(arity):
        shift = [np.zeros_like(x) for x in xs]
        shift[i] = np.full_like(xs[i], eps)
        up = np.array(fn(*[f64(x + d) for x, d in zip(xs, shift)]))
        down = np.array(fn(*[f64(x - d) for x, d in zip(xs, shift)]))
        np.testing.assert_allclose(np.array(grads[i]), (up - down) / (2 * eps), rtol=1e-5,
                                   atol=1e-7, err_msg=f"{name}: d/d(input {i})")
