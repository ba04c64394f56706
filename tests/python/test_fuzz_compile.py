"""Differential fuzzing of compile: random elementwise graphs (with reductions between
regions) over inputs that broadcast at random, compiled with and without ``shapeless``, called
again with new shapes and broadcast patterns, under every CPU JIT tier; each call against the
same function run eagerly and in numpy. ``KILN_FUZZ_LONG=1`` runs 50 times as many graphs."""

import os
import random

import kiln.core as mx
import numpy as np
import pytest

SCALE = 50 if os.environ.get("KILN_FUZZ_LONG") == "1" else 1

UNARY = {
    "exp": (lambda m, x: m.exp(x * 0.1)),
    "sin": (lambda m, x: m.sin(x)),
    "tanh": (lambda m, x: m.tanh(x)),
    "abs": (lambda m, x: m.abs(x)),
    "neg": (lambda m, x: -x),
    "square": (lambda m, x: x * x),
    "sqrt": (lambda m, x: m.sqrt(m.abs(x))),
    "sigmoid": (lambda m, x: 1 / (1 + m.exp(-x))),
}
BINARY = {
    "add": (lambda m, x, y: x + y),
    "sub": (lambda m, x, y: x - y),
    "mul": (lambda m, x, y: x * y),
    "max": (lambda m, x, y: m.maximum(x, y)),
    "min": (lambda m, x, y: m.minimum(x, y)),
    "div": (lambda m, x, y: x / (m.abs(y) + 1)),
    "where": (lambda m, x, y: m.where(x > y, x, y * 2)),
}


def _program(rng: random.Random, n_inputs: int) -> list:
    """Steps over a growing list of values: ("u", op, i), ("b", op, i, j), ("sum", i)."""
    steps, n = [], n_inputs
    for _ in range(rng.randint(2, 8)):
        r = rng.random()
        if r < 0.35:
            steps.append(("u", rng.choice(list(UNARY)), rng.randrange(n)))
        elif r < 0.9:
            steps.append(("b", rng.choice(list(BINARY)), rng.randrange(n), rng.randrange(n)))
        else:
            steps.append(("sum", rng.randrange(n)))
        n += 1
    return steps


def _run(steps: list, module, inputs: list):
    values = list(inputs)
    for step in steps:
        if step[0] == "u":
            values.append(UNARY[step[1]](module, values[step[2]]))
        elif step[0] == "b":
            values.append(BINARY[step[1]](module, values[step[2]], values[step[3]]))
        else:
            # A reduction that keeps the rank, so later steps still broadcast.
            values.append(values[step[1]].sum(axis=-1, keepdims=True))
    return values[-1]


def _shapes(rng: random.Random, rank: int, n: int) -> list:
    """One base shape of `rank` and `n` input shapes that broadcast to it: some axes 1, some
    leading axes dropped, at random (the same rank for every call of a shapeless entry)."""
    base = [rng.randint(1, 6) for _ in range(rank)]
    out = []
    for _ in range(n):
        shape = [d if rng.random() < 0.6 else 1 for d in base]
        out.append(tuple(shape))
    return out


def _inputs(rng: random.Random, shapes: list) -> list:
    g = np.random.default_rng(rng.randrange(1 << 30))
    return [(g.normal(size=s) * 2).astype(np.float32) for s in shapes]


def _outcome(fn):
    try:
        return "ok", np.array(fn())
    except (ValueError, TypeError) as e:
        return "error", type(e).__name__


def _fuzz(seed: int, shapeless: bool, calls: int):
    rng = random.Random(seed)
    n = rng.randint(1, 3)
    rank = rng.randint(1, 3)
    steps = _program(rng, n)
    fn = mx.compile(lambda *xs: _run(steps, mx, list(xs)), shapeless=shapeless)
    counts = {"calls": 0, "errors": 0}
    for _ in range(calls):
        data = _inputs(rng, _shapes(rng, rank, n))
        arrays = [mx.array(d) for d in data]
        got = _outcome(lambda: fn(*arrays))
        eager = _outcome(lambda: _run(steps, mx, arrays))
        counts["calls"] += 1
        assert got[0] == eager[0], (steps, [d.shape for d in data], got, eager)
        if got[0] == "error":
            assert got[1] == eager[1]
            counts["errors"] += 1
            continue
        want = _run(steps, np, [d.astype(np.float64) for d in data]).astype(np.float32)
        assert got[1].shape == want.shape, (steps, [d.shape for d in data])
        np.testing.assert_allclose(got[1], eager[1], rtol=2e-5, atol=2e-5, equal_nan=True)
        np.testing.assert_allclose(got[1], want, rtol=2e-4, atol=2e-4, equal_nan=True)
    return counts


@pytest.mark.parametrize("tier", ["off", "sync", "async"])
@pytest.mark.parametrize("shapeless", [False, True])
def test_compile_differential(tier, shapeless, monkeypatch):
    monkeypatch.setenv("KILN_CPU_JIT", tier)
    base = {"off": 0, "sync": 10_000, "async": 20_000}[tier] + (5_000 if shapeless else 0)
    total = {"calls": 0, "errors": 0}
    for seed in range(base, base + 12 * SCALE):
        for k, v in _fuzz(seed, shapeless, calls=4).items():
            total[k] += v
    assert total["calls"] == 12 * SCALE * 4
