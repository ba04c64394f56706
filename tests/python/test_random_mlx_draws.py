"""Seeded categorical sampling draws MLX's numbers for the same key (issue 31): the
single-distribution inverse-CDF path (a decode step's (1, vocab) logits), the Gumbel-max
path with MLX's noise layouts for num_samples and shape=, masked (-inf) logits, half
dtypes, and mlx-lm's samplers. Skipped without MLX."""

import numpy as np
import pytest

import kiln.core as kx

mlx = pytest.importorskip("mlx.core")

RNG = np.random.default_rng(31)

CASES = [
    # (logits shape, axis, kwargs)
    ((1, 50), -1, {}),
    ((1, 1000), -1, {}),
    ((50,), -1, {}),
    ((1, 1, 64), -1, {}),
    ((64, 1), 0, {}),
    ((3, 40), -1, {}),
    ((2, 3, 17), 1, {}),
    ((1, 50), -1, {"num_samples": 5}),
    ((50,), -1, {"num_samples": 3}),
    ((2, 300), -1, {"num_samples": 2}),
    ((4, 7, 5), 1, {"num_samples": 3}),
    ((1, 300), -1, {"shape": (3,)}),
    ((1, 300), -1, {"shape": (4, 1)}),
    ((3, 300), -1, {"shape": (2, 3)}),
    ((3, 20), 0, {"shape": (5, 20)}),
]


@pytest.mark.parametrize("shape,axis,kwargs", CASES)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_categorical_draws_mlx_numbers(shape, axis, kwargs, dtype):
    for seed in range(8):
        logits = (RNG.normal(size=shape) * 2).astype(np.float32)
        if seed % 2:
            logits[RNG.random(shape) < 0.6] = -np.inf  # top-k / top-p masking
            np.put(logits, seed % logits.size, 1.0)  # keep every row finite somewhere
        got, want = (
            np.array(
                m.random.categorical(
                    m.array(logits).astype(getattr(m, dtype)),
                    axis=axis,
                    key=m.random.key(seed),
                    **kwargs,
                )
            )
            for m in (kx, mlx)
        )
        assert got.dtype == want.dtype == np.uint32
        assert got.shape == want.shape
        if got.size and np.all(np.isfinite(logits).any(axis=axis)):
            np.testing.assert_array_equal(got, want, err_msg=f"seed {seed}")


def test_categorical_bad_arguments_match_mlx():
    for m in (kx, mlx):
        with pytest.raises(ValueError):
            m.random.categorical(m.zeros((2, 5)), shape=(2,), num_samples=3)
        with pytest.raises(ValueError):
            m.random.categorical(m.zeros((3, 5)), shape=(4,))


SAMPLER_SCRIPT = """
import json, sys
import numpy as np
{alias}
import mlx.core as mx
from mlx_lm.sample_utils import make_sampler
logits = np.load(sys.argv[1])
out = []
for kw in json.loads(sys.argv[2]):
    sampler = make_sampler(**kw)
    mx.random.seed(5)
    out.append([sampler(mx.array(logits)).item() for _ in range(6)])
print(json.dumps(out))
"""


def test_mlx_lm_samplers_draw_mlx_tokens(tmp_path):
    # mlx-lm's own samplers (temperature with top-p, min-p, top-k), seeded: kiln through its
    # mlx alias (in a child process: one process cannot hold both) gives MLX's tokens.
    import json
    import subprocess
    import sys

    pytest.importorskip("mlx_lm")
    path = tmp_path / "logits.npy"
    np.save(path, (RNG.normal(size=(1, 512)) * 3).astype(np.float32))
    settings = json.dumps([dict(temp=0.8, top_p=0.9), dict(temp=0.7, min_p=0.1),
                           dict(temp=1.0, top_k=20)])
    tokens = []
    for alias in ("import kiln; kiln.alias_mlx()", ""):
        script = SAMPLER_SCRIPT.format(alias=alias)
        run = subprocess.run([sys.executable, "-c", script, str(path), settings],
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        tokens.append(json.loads(run.stdout))
    assert tokens[0] == tokens[1]


LAZY_SCRIPT = """
import kiln; kiln.alias_mlx()
import numpy as np
import mlx.core as mx
import kiln.profiler
from mlx_lm.sample_utils import make_sampler
logits = mx.array(np.random.default_rng(2).normal(size=(1, 512)).astype(np.float32))
x = mx.array(np.ones((1, 8, 4, 64), np.float32))
w = mx.ones((64,))
mx.eval(logits, x, w)
def step(sampler, offset):
    y = mx.fast.rope(x, 64, traditional=False, base=10000.0, scale=1.0, offset=offset)
    return sampler(logits + mx.fast.rms_norm(y, w, 1e-5).sum())
for kw in [dict(temp=0.0), dict(temp=0.8, top_p=0.9), dict(temp=0.7, min_p=0.1),
           dict(temp=1.0, top_k=20), dict(temp=0.6, top_p=0.95, min_p=0.05, top_k=40)]:
    sampler = make_sampler(**kw)
    mx.eval(step(sampler, mx.array(3)))  # the first call traces mlx-lm's compiled samplers
    with kiln.profiler.profile() as prof:
        tok = step(sampler, mx.array(4))
    ran = [(e.kind, e.name) for e in prof.events()]
    assert not ran, (kw, ran)
    mx.eval(tok)
print("ok")
"""


def test_a_decode_steps_sampling_builds_without_evaluating(tmp_path):
    """mlx-lm's samplers (top-p, min-p, top-k, categorical; their compiled functions already
    traced), RoPE at an array offset and rms_norm build a step's graph without evaluating
    anything: no host round trip splits an asynchronously evaluated decode step."""
    import subprocess
    import sys

    pytest.importorskip("mlx_lm")
    run = subprocess.run([sys.executable, "-c", LAZY_SCRIPT], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stderr[-3000:]


def _np(x, mod):
    return np.array(x.astype(mod.float32)) if x.dtype in (mod.float16, mod.bfloat16) else np.array(x)


def _both(fn):
    return [_np(fn(m), m) for m in (kx, mlx)]


# Samplers that use only MLX's bit layout, erfinv and arithmetic: bit-identical in every
# dtype. Those built on log or erf (gumbel, laplace, truncated_normal) differ by at most an
# ulp now and then: kiln's vectorised log and erf are faithfully rounded, MLX calls libm.
EXACT = {
    "uniform": lambda m, d, s, k: m.random.uniform(shape=s, dtype=d, key=k),
    "uniform_bounds": lambda m, d, s, k: m.random.uniform(-2, 3, shape=s, dtype=d, key=k),
    "normal": lambda m, d, s, k: m.random.normal(s, dtype=d, key=k),
    "normal_loc_scale": lambda m, d, s, k: m.random.normal(s, dtype=d, loc=1.5, scale=0.3, key=k),
    "bernoulli": lambda m, d, s, k: m.random.bernoulli(m.array(0.3, dtype=d), s, key=k),
    "truncated_normal_reversed": lambda m, d, s, k: m.random.truncated_normal(
        2.0, -1.0, s, dtype=d, key=k
    ),
}
NEAR = {
    "laplace": lambda m, d, s, k: m.random.laplace(s, dtype=d, loc=0.5, scale=2.0, key=k),
    "gumbel": lambda m, d, s, k: m.random.gumbel(s, dtype=d, key=k),
    "truncated_normal": lambda m, d, s, k: m.random.truncated_normal(-1.0, 2.0, s, dtype=d, key=k),
}


@pytest.mark.parametrize("name", sorted(EXACT) + sorted(NEAR))
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("shape", [(7,), (3, 5), (4000,)])
def test_samplers_draw_mlx_numbers(name, dtype, shape):
    fn = EXACT.get(name) or NEAR[name]
    got, want = _both(lambda m: fn(m, getattr(m, dtype), shape, m.random.key(11)))
    assert got.shape == want.shape and np.isfinite(got).all()
    if name in EXACT:
        np.testing.assert_array_equal(got, want)
    else:
        # A last-bit difference in log or erf, carried through the transform (truncated
        # normal's erfinv amplifies it near the bounds); half types then round alike.
        tol = {"float32": 2e-5, "float16": 2e-3, "bfloat16": 2e-2}[dtype]
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
        if name != "truncated_normal":  # erf differs in the last bit more often than log
            assert np.mean(got == want) > 0.5


def test_half_normal_and_laplace_never_infinite():
    # Drawn in half precision the bound nextafter(-1, 0) rounds to -1: erfinv(-1) = -inf.
    for dtype in (kx.float16, kx.bfloat16):
        for sampler in (kx.random.normal, kx.random.laplace):
            x = np.array(sampler((200_000,), dtype=dtype, key=kx.random.key(0)).astype(kx.float32))
            assert np.isfinite(x).all()


def test_integer_samplers_and_permutations_match_mlx():
    # (uint32 with a negative bound is left out: MLX's result there comes from an
    # out-of-range float conversion.)
    for dtype, low, high in [("int32", 0, 100), ("int32", -5, 5), ("uint8", 0, 100),
                             ("uint8", -5, 5), ("int64", -5, 5), ("int16", 0, 100),
                             ("uint32", 0, 100)]:
        if True:
            got, want = _both(
                lambda m: m.random.randint(low, high, (64,), dtype=getattr(m, dtype), key=m.random.key(6))
            )
            np.testing.assert_array_equal(got, want)
            assert got.dtype == want.dtype
    for n in [1, 5, 100]:
        got, want = _both(lambda m: m.random.permutation(n, key=m.random.key(8)))
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
        got, want = _both(
            lambda m: m.random.permutation(m.arange(2 * n).reshape(n, 2), key=m.random.key(8))
        )
        np.testing.assert_array_equal(got, want)


def test_complex_normal_matches_mlx():
    for kwargs in [{}, {"loc": 1.0, "scale": 2.0}]:
        got, want = _both(lambda m: m.random.normal((5, 3), dtype=m.complex64, key=m.random.key(1), **kwargs))
        assert got.dtype == want.dtype == np.complex64
        np.testing.assert_array_equal(got, want)
