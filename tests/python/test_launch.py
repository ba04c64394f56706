"""python -m kiln.launch: ranks start with the environment their backend needs, a failing
rank stops the others and sets the exit code, missing tools give a clear error."""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import kiln

# The ranks import the kiln this test imported (a build in python/, or the installed wheel).
KILN_HOME = str(Path(kiln.__file__).resolve().parents[1])

ROOT = Path(__file__).resolve().parents[2]


def launch(*args, env=None, timeout=120):
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [KILN_HOME, env.get("PYTHONPATH", "")] if p)
    cmd = [sys.executable, "-m", "kiln.launch", *map(str, args)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def _has_real_mlx():
    import importlib.util

    return importlib.util.find_spec("mlx") is not None


needs_mpirun = pytest.mark.skipif(shutil.which("mpirun") is None, reason="OpenMPI's mpirun is not installed")


@needs_mpirun
def test_mpi_ranks_see_their_rank_and_backend(tmp_path):
    script = tmp_path / "show.py"
    # Each rank writes a file: the ranks' stdout lines may interleave.
    script.write_text("import os, sys\ne = os.environ\nr = e['OMPI_COMM_WORLD_RANK']\n"
                      "open(os.path.join(sys.argv[1], r), 'w').write("
                      "f\"{r} {e['OMPI_COMM_WORLD_SIZE']} {e['KILN_DISTRIBUTED_BACKEND']}\")\n")
    r = launch("-n", 3, script, tmp_path)
    assert r.returncode == 0, r.stderr
    assert [(tmp_path / str(i)).read_text() for i in range(3)] == [f"{i} 3 mpi" for i in range(3)]


@needs_mpirun
def test_mlx_flag_runs_with_the_alias(tmp_path):
    script = tmp_path / "alias.py"
    script.write_text("import mlx.core, kiln.core\nassert mlx.core.array is kiln.core.array\n")
    r = launch("-n", 2, "--mlx", script)
    assert r.returncode == 0, r.stderr
    script.write_text("import mlx.core\n")  # without --mlx there is no mlx to import here
    assert launch("-n", 2, script).returncode != 0 or _has_real_mlx()


@needs_mpirun
def test_a_failing_mpi_rank_sets_the_exit_code(tmp_path):
    script = tmp_path / "fail.py"
    script.write_text("import os, sys, time\nif os.environ['OMPI_COMM_WORLD_RANK'] == '1': sys.exit(3)\n"
                      "time.sleep(60)\n")
    t = time.monotonic()
    r = launch("-n", 2, script)
    assert r.returncode != 0 and "kiln.launch: mpirun exited with code" in r.stderr
    assert time.monotonic() - t < 30


def test_missing_mpirun_is_a_clear_error(tmp_path):
    env = dict(os.environ, PATH=str(tmp_path))
    r = launch("-n", 2, tmp_path / "x.py", env=env)
    assert r.returncode == 2 and "mpirun" in r.stderr and "OpenMPI" in r.stderr


def test_nccl_ranks_get_rank_gpu_and_rendezvous_and_a_failure_stops_them(tmp_path):
    script = tmp_path / "nccl.py"
    script.write_text(
        "import os, sys, time\ne = os.environ\n"
        "open(os.path.join(sys.argv[1], e['KILN_RANK']), 'w').write(' '.join(['nccl', "
        "e['KILN_RANK'], e['KILN_WORLD_SIZE'], e['CUDA_VISIBLE_DEVICES'], "
        "str(os.path.isdir(e['KILN_NCCL_DIR'])), e['KILN_DISTRIBUTED_BACKEND']]))\n"
        "if len(sys.argv) > 2 and e['KILN_RANK'] == '0': sys.exit(5)\n"
        "if len(sys.argv) > 2: time.sleep(60)\n")
    env = dict(os.environ, KILN_LAUNCH_SKIP_GPU_CHECK="1")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    r = launch("-n", 2, "--backend", "nccl", script, tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    assert [(tmp_path / str(i)).read_text() for i in range(2)] == [
        "nccl 0 2 0 True nccl", "nccl 1 2 1 True nccl"]
    t = time.monotonic()
    r = launch("-n", 2, "--backend", "nccl", script, tmp_path, "fail", env=env)
    assert r.returncode == 5 and "rank 0 exited with code 5" in r.stderr
    assert time.monotonic() - t < 20


def test_bad_arguments():
    assert launch("-n", 0, "x.py").returncode == 2
    assert launch("-n", 2).returncode == 2
