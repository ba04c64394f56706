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
