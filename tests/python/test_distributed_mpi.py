"""mx.distributed over MPI: 2 and 4 local ranks started by ``python -m kiln.launch``.

The ranks run mpi_worker.py (every collective for each dtype and several shapes against
numpy, views, NaN/inf, send/recv, split groups, grad/jvp/vmap, a compiled data-parallel
training step against the one-process step on the whole batch, sharded linear layers) and
mlx-lm's own LoRA trainer through the mlx alias. Skipped without OpenMPI's mpirun."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kiln

# The ranks import the kiln this test imported (a build in python/, or the installed wheel).
KILN_HOME = str(Path(kiln.__file__).resolve().parents[1])

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

pytestmark = pytest.mark.skipif(
    shutil.which("mpirun") is None, reason="OpenMPI's mpirun is not installed"
)


def launch(n, *args, timeout_env="30", limit=240):
    env = dict(os.environ, KILN_DISTRIBUTED_TIMEOUT=timeout_env)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in [KILN_HOME, env.get("PYTHONPATH", "")] if p
    )
    cmd = [sys.executable, "-m", "kiln.launch", "-n", str(n), *map(str, args)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=limit)


@pytest.mark.parametrize("n", [2, 4])
def test_collectives_on_mpi_ranks(n):
    r = launch(n, HERE / "mpi_worker.py", "collectives")
    out = r.stdout + r.stderr
    assert "FAIL" not in out, out[-6000:]
    assert r.returncode == 0, out[-6000:]
    for section in ["collectives", "views_and_special_values", "reduced_in_place",
                    "send_and_recv", "split_groups",
                    "gradients", "vmapped", "data_parallel_step", "sharded_layers",
                    "fully_sharded"]:
        for rank in range(n):
            assert f"ok {section} rank {rank}" in out, (section, rank, out[-4000:])


def test_a_shape_mismatch_is_an_error_on_every_rank():
    r = launch(2, HERE / "mpi_worker.py", "mismatch")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert out.count("ok mismatch-raised") == 2 and out.count("ok after-mismatch") == 2, out


def test_a_collective_nobody_joins_times_out():
    r = launch(2, HERE / "mpi_worker.py", "missing", timeout_env="2")
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "ok timed-out" in out, out[-4000:]


def test_mlx_lm_trainer_data_parallel_matches_one_process(tmp_path):
    pytest.importorskip("mlx_lm")
    script = ROOT / "tests" / "clients" / "mlx_lm_distributed.py"
    one = launch(1, "--mlx", script, tmp_path)
    two = launch(2, "--mlx", script, tmp_path)
    for r in (one, two):
        assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    l1 = json.loads((tmp_path / "losses-1.json").read_text())
    l2 = json.loads((tmp_path / "losses-2.json").read_text())
    assert len(l1) == len(l2) == 3
    assert max(abs(a - b) for a, b in zip(l1, l2)) < 1e-4, (l1, l2)


def test_mlx_lm_tensor_parallel_generation_matches_one_process(tmp_path):
    """mlx-lm's ``model.shard()`` on 2 ranks: the same greedy tokens, and log-probabilities
    within float32 rounding of the one-process model's."""
    pytest.importorskip("mlx_lm")
    script = ROOT / "tests" / "clients" / "mlx_lm_tensor_parallel.py"
    one = launch(1, "--mlx", script, tmp_path)
    two = launch(2, "--mlx", script, tmp_path)
    for r in (one, two):
        assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    t1 = json.loads((tmp_path / "tp-1.json").read_text())
    t2 = json.loads((tmp_path / "tp-2.json").read_text())
    assert len(t1["tokens"]) == 12 and t1["tokens"] == t2["tokens"], (t1["tokens"], t2["tokens"])
    import numpy as np
    np.testing.assert_allclose(np.array(t2["logprobs"]), np.array(t1["logprobs"]), atol=1e-4)
