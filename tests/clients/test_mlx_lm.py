"""mlx-lm 0.32.2 runs unchanged on kiln (through ``kiln.alias_mlx()``) and gives real MLX's
results: loading, logits, greedy generation with every cache kind, samplers and logits
processors, prompt caches saved and loaded, 4- and 8-bit quantization, LoRA and QLoRA
training through ``mlx_lm.tuner.trainer.train``.

``mlx_lm_runner.py`` runs the same mlx-lm calls once under real MLX (which also writes the
model folders) and once under kiln, each in its own process; the tests compare the two.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).parent
RUNNER = HERE / "mlx_lm_runner.py"
ARCHS = ["llama", "qwen3", "gemma3_text", "mixtral", "phi3", "gpt_oss", "mamba2"]
ATTENTION = [a for a in ARCHS if a != "mamba2"]


# A folder with MLX's run done elsewhere (`models/` and `mlx/results.*`, as this module's
# fixture writes them): compares kiln with it where real MLX cannot be installed (the GPU
# machine).
REFERENCE = os.environ.get("KILN_MLX_REFERENCE")


def _missing() -> list:
    needed = ("mlx_lm", "transformers", "tokenizers") + (() if REFERENCE else ("mlx",))
    return [m for m in needed if importlib.util.find_spec(m) is None]


pytestmark = pytest.mark.skipif(
    bool(_missing()), reason=f"needs {', '.join(_missing())} (`.ci/run` installs them)"
)


def _run(backend: str, work: Path, out: Path) -> dict:
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, str(RUNNER), backend, str(work), str(out)],
        capture_output=True, text=True, env=env, timeout=1500,
    )
    if proc.returncode != 0:
        raise AssertionError(f"{backend} runner failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return _load(out)


def _load(out: Path) -> dict:
    res = json.loads((out / "results.json").read_text())
    with np.load(out / "results.npz") as z:
        res["arrays"] = {k: z[k] for k in z.files}
    return res


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    if REFERENCE:
        work = tmp_path_factory.mktemp("models")
        shutil.copytree(Path(REFERENCE) / "models", work, dirs_exist_ok=True)
        mlx = _load(Path(REFERENCE) / "mlx")
    else:
        work = tmp_path_factory.mktemp("models")
        mlx = _run("mlx", work, tmp_path_factory.mktemp("mlx"))
    kiln = _run("kiln", work, tmp_path_factory.mktemp("kiln"))
    assert (mlx["module"], kiln["module"]) == ("mlx.core", "kiln.core")
    return mlx, kiln


def _both(runs, key: str):
    """MLX's and kiln's value of ``key``; a missing one fails with the errors its run
    recorded for that model."""
    arch = key.split("/")[0]
    values = []
    for name, res in zip(("MLX", "kiln"), runs):
        if key in res["arrays"]:
            values.append(res["arrays"][key])
        elif key in res:
            values.append(res[key])
        else:
            errors = {k: v for k, v in res["errors"].items() if k.split("/")[0] == arch}
            pytest.fail(f"{name} produced no {key}; its errors: " + "\n".join(f"{k}: {v}" for k, v in errors.items()))
    return values


@pytest.mark.parametrize("arch", ARCHS)
def test_logits(runs, arch):
    ref, got = _both(runs, f"{arch}/logits")
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize(
    "kind", ["greedy", "text", "stream_tokens", "penalty", "sampler", "prompt_cache", "q8"]
)
@pytest.mark.parametrize("arch", ARCHS)
def test_generation(runs, arch, kind):
    ref, got = _both(runs, f"{arch}/{kind}")
    assert got == ref


@pytest.mark.parametrize("arch", ATTENTION)
def test_rotating_cache(runs, arch):
    ref, got = _both(runs, f"{arch}/rotating")
    assert got == ref


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_quantized_cache(runs, arch):
    ref, got = _both(runs, f"{arch}/quant_kv")
    assert got == ref


@pytest.mark.parametrize("arch", ARCHS)
def test_prompt_cache_metadata(runs, arch):
    ref, got = _both(runs, f"{arch}/prompt_cache_meta")
    assert got == ref == {"arch": arch}


@pytest.mark.parametrize("arch", ARCHS)
def test_4bit_model_written_by_mlx(runs, arch):
    ref, got = _both(runs, f"{arch}/q4")
    assert got == ref
    ref, got = _both(runs, f"{arch}/q4_logits")
    np.testing.assert_allclose(got, ref, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("arch", ARCHS)
def test_quantize_model_gives_mlx_words(runs, arch):
    mlx, kiln = runs
    keys = [k for k in mlx["arrays"] if k.startswith(f"{arch}/q4_params/")]
    assert keys, mlx["errors"].get(f"{arch}/q4")
    for k in keys:
        assert k in kiln["arrays"], kiln["errors"].get(f"{arch}/q4")
        ref, got = mlx["arrays"][k], kiln["arrays"][k]
        assert got.dtype == ref.dtype and got.shape == ref.shape, k
        if ref.dtype == np.uint32:
            np.testing.assert_array_equal(got, ref, err_msg=k)
        else:
            np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-7, err_msg=k)


# Training losses: rounding differences (summation orders of matmuls) grow over Adam steps;
# kiln on a GPU against MLX on the CPU differs more (the GPU's summation orders, and a
# mixture-of-experts router that flips a near-tie changes the loss visibly by step 4).
def _loss_rtol(runs) -> float:
    return 3e-3 if "gpu" in runs[1]["device"] else 3e-4


@pytest.mark.parametrize("kind", ["lora", "qlora"])
@pytest.mark.parametrize("arch", ARCHS)
def test_training(runs, arch, kind):
    ref, got = _both(runs, f"{arch}/{kind}")
    assert len(got) == len(ref) == 4
    np.testing.assert_allclose(got, ref, rtol=_loss_rtol(runs))


EXTRA = ["llama", "mixtral"]  # the paths below are the same code for every model


@pytest.mark.parametrize(
    "kind", ["batch", "batch_texts", "speculative", "chunked", "fuse", "convert"]
)
@pytest.mark.parametrize("arch", EXTRA)
def test_more_generation_paths(runs, arch, kind):
    ref, got = _both(runs, f"{arch}/{kind}")
    assert got == ref


@pytest.mark.parametrize("arch", EXTRA)
def test_fused_and_converted_weights(runs, arch):
    ref, got = _both(runs, f"{arch}/fuse_logits")
    np.testing.assert_allclose(got, ref, rtol=2e-4, atol=2e-4)
    ref, got = _both(runs, f"{arch}/convert_scales")
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize(
    "arch, kind",
    [("llama", "dora")] + [(a, k) for a in EXTRA for k in ("full", "ckpt", "accum")],
)
def test_more_training_paths(runs, arch, kind):
    """DoRA, full fine-tuning, gradient checkpointing, gradient accumulation."""
    ref, got = _both(runs, f"{arch}/{kind}")
    assert len(got) == len(ref) == 4
    np.testing.assert_allclose(got, ref, rtol=_loss_rtol(runs))
