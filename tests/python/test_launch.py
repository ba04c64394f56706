"""python -m kiln.launch: ranks start with the environment their backend needs, a failing rank
stops the others and names itself, timeouts and signals stop everything, missing tools give a
clear error. The NCCL path runs on CPU machines with KILN_LAUNCH_SKIP_GPU_CHECK=1 (the ranks
are plain Python scripts). Each rank writes a file: mpirun interleaves the ranks' stdout."""

import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import kiln
import pytest
from kiln import launch as kl

ROOT = Path(__file__).resolve().parents[2]
# The ranks import the kiln this test imported (a build in python/, or the installed wheel).
KILN_HOME = str(Path(kiln.__file__).resolve().parents[1])

needs_mpirun = pytest.mark.skipif(
    shutil.which("mpirun") is None,
    reason="OpenMPI's mpirun is not installed (apt-get install openmpi-bin)",
)

# A rank's record: its rank variables, backend and argv, one file per rank in argv[1].
SHOW = """\
import json, os, sys
e = os.environ
rank = e.get("OMPI_COMM_WORLD_RANK", e.get("KILN_RANK"))
keys = ["OMPI_COMM_WORLD_SIZE", "KILN_DISTRIBUTED_BACKEND", "KILN_RANK", "KILN_WORLD_SIZE",
        "CUDA_VISIBLE_DEVICES", "KILN_NCCL_DIR", "OMPI_MCA_btl_vader_single_copy_mechanism",
        "KILN_LAUNCH_TEST_MARK", "RAYON_NUM_THREADS"]
rec = {k: e.get(k) for k in keys}
rec["argv"] = sys.argv[2:]
rec["nccl_dir_exists"] = os.path.isdir(e.get("KILN_NCCL_DIR", "/nonexistent"))
rec["pid"] = os.getpid()
open(os.path.join(sys.argv[1], f"rank{rank}.json"), "w").write(json.dumps(rec))
"""

# Rank FAIL_RANK exits 3 after a moment; the others sleep a minute unless stopped.
FAIL = """\
import os, sys, time
e = os.environ
rank = e.get("OMPI_COMM_WORLD_RANK", e.get("KILN_RANK"))
open(os.path.join(sys.argv[1], f"pid{rank}"), "w").write(str(os.getpid()))
if rank == e.get("FAIL_RANK"):
    time.sleep(0.3)
    sys.exit(3)
time.sleep(60)
"""


def _env(**extra):
    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.pop("RAYON_NUM_THREADS", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [KILN_HOME, env.get("PYTHONPATH", "")] if p)
    env.update(extra)
    return env


def launch(*args, env=None, timeout=60):
    cmd = [sys.executable, "-m", "kiln.launch", *map(str, args)]
    env = _env() if env is None else env
    return subprocess.run(
        cmd, check=False, env=env, capture_output=True, text=True, timeout=timeout
    )


def records(d, n):
    import json

    return [json.loads((d / f"rank{r}.json").read_text()) for r in range(n)]


def write(path, text):
    path.write_text(text)
    return path


# --- MPI ---------------------------------------------------------------------------------


@needs_mpirun
@pytest.mark.parametrize("n", [2, 4])
def test_mpi_ranks_see_their_rank_size_and_backend(tmp_path, n):
    script = write(tmp_path / "show.py", SHOW)
    r = launch("-n", n, script, tmp_path, "-n", "x", env=_env(KILN_LAUNCH_TEST_MARK="m"))
    assert r.returncode == 0, r.stderr
    recs = records(tmp_path, n)
    assert [rec["OMPI_COMM_WORLD_SIZE"] for rec in recs] == [str(n)] * n
    for rec in recs:
        assert rec["KILN_DISTRIBUTED_BACKEND"] == "mpi"
        assert rec["OMPI_MCA_btl_vader_single_copy_mechanism"] == "none"
        assert rec["KILN_LAUNCH_TEST_MARK"] == "m"  # KILN_* variables reach the ranks
        assert rec["argv"] == ["-n", "x"]  # options after the script are the script's
        # Each rank's thread pool gets its share of the cores.
        assert rec["RAYON_NUM_THREADS"] == str(max(1, len(os.sched_getaffinity(0)) // n))


@needs_mpirun
def test_a_failing_mpi_rank_is_named_and_sets_the_exit_code(tmp_path):
    script = write(tmp_path / "fail.py", FAIL)
    t = time.monotonic()
    r = launch("-n", 2, script, tmp_path, env=_env(FAIL_RANK="1"))
    assert time.monotonic() - t < 20, "the sleeping rank was not stopped"
    assert r.returncode == 3, r.stderr
    assert "kiln.launch: rank 1 exited with code 3" in r.stderr
    assert "Process name" in r.stderr  # mpirun's own report still comes through


@needs_mpirun
def test_mlx_flag_makes_mlx_core_kiln_in_every_rank(tmp_path):
    check = (
        "import os, sys, mlx.core, kiln.core\n"
        "assert mlx.core.array is kiln.core.array\n"
        "rank = os.environ['OMPI_COMM_WORLD_RANK']\n"
        "open(os.path.join(sys.argv[1], 'alias' + rank), 'w').write(mlx.core.__name__)\n"
    )
    script = write(tmp_path / "alias.py", check)
    r = launch("-n", 2, "--mlx", script, tmp_path)
    assert r.returncode == 0, r.stderr
    assert [(tmp_path / f"alias{i}").read_text() for i in range(2)] == ["kiln.core"] * 2


@needs_mpirun
def test_a_module_runs_as_python_m_runs_it(tmp_path):
    write(tmp_path / "showmod.py", SHOW)
    env = _env()
    env["PYTHONPATH"] += os.pathsep + str(tmp_path)
    r = launch("-n", 2, "--mlx", "-m", "showmod", tmp_path, "--mlx", "-n", "7", env=env)
    assert r.returncode == 0, r.stderr
    assert [rec["argv"] for rec in records(tmp_path, 2)] == [["--mlx", "-n", "7"]] * 2


@needs_mpirun
def test_mpi_timeout_stops_everything(tmp_path):
    script = write(tmp_path / "sleep.py", FAIL)
    t = time.monotonic()
    r = launch("-n", 2, "--timeout", 1, script, tmp_path)
    assert time.monotonic() - t < 15
    assert r.returncode == 124 and "timed out after 1 s" in r.stderr, r.stderr


def test_missing_mpirun_is_a_clear_error(tmp_path):
    script = write(tmp_path / "x.py", "")
    empty = tmp_path / "empty"
    empty.mkdir()
    r = launch("-n", 2, script, env=_env(PATH=str(empty)))
    assert r.returncode == 2
    assert "`mpirun` was not found" in r.stderr and "OpenMPI" in r.stderr, r.stderr
    assert "apt-get install openmpi-bin" in r.stderr


# --- NCCL (process spawning only) ------------------------------------------------------------


def test_nccl_ranks_get_rank_world_size_gpu_and_a_shared_dir(tmp_path):
    script = write(tmp_path / "show.py", SHOW)
    r = launch(
        "-n", 2, "--backend", "nccl", script, tmp_path, env=_env(KILN_LAUNCH_SKIP_GPU_CHECK="1")
    )
    assert r.returncode == 0, r.stderr
    recs = records(tmp_path, 2)
    for rank, rec in enumerate(recs):
        assert rec["KILN_DISTRIBUTED_BACKEND"] == "nccl"
        assert (rec["KILN_RANK"], rec["KILN_WORLD_SIZE"]) == (str(rank), "2")
        assert rec["CUDA_VISIBLE_DEVICES"] == str(rank)
        assert rec["nccl_dir_exists"] and rec["OMPI_COMM_WORLD_SIZE"] is None
    nccl_dir = recs[0]["KILN_NCCL_DIR"]
    assert recs[1]["KILN_NCCL_DIR"] == nccl_dir and not os.path.exists(nccl_dir)

    # Each rank gets its entry of the parent's CUDA_VISIBLE_DEVICES.
    env = _env(KILN_LAUNCH_SKIP_GPU_CHECK="1", CUDA_VISIBLE_DEVICES="5, 7,9")
    r = launch("-n", 3, "--backend", "nccl", script, tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    assert [rec["CUDA_VISIBLE_DEVICES"] for rec in records(tmp_path, 3)] == ["5", "7", "9"]


def test_a_failing_nccl_rank_stops_its_sleeping_siblings(tmp_path):
    script = write(tmp_path / "fail.py", FAIL)
    env = _env(KILN_LAUNCH_SKIP_GPU_CHECK="1", FAIL_RANK="1")
    t = time.monotonic()
    r = launch("-n", 3, "--backend", "nccl", script, tmp_path, env=env)
    assert time.monotonic() - t < 10, "the sleeping ranks were not stopped"
    assert r.returncode == 3 and "kiln.launch: rank 1 exited with code 3" in r.stderr, r.stderr
    for rank in (0, 2):
        with pytest.raises(ProcessLookupError):
            os.kill(int((tmp_path / f"pid{rank}").read_text()), 0)


def test_nccl_timeout(tmp_path):
    script = write(tmp_path / "sleep.py", FAIL)
    env = _env(KILN_LAUNCH_SKIP_GPU_CHECK="1")
    r = launch("-n", 2, "--backend", "nccl", "--timeout", 0.5, script, tmp_path, env=env)
    assert r.returncode == 124 and "timed out after 0.5 s" in r.stderr, r.stderr


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_to_the_launcher_stops_every_rank(tmp_path, sig, code):
    script = write(tmp_path / "sleep.py", FAIL)
    env = _env(KILN_LAUNCH_SKIP_GPU_CHECK="1")
    cmd = [sys.executable, "-m", "kiln.launch", "-n", "2", "--backend", "nccl", str(script)]
    p = subprocess.Popen(cmd + [str(tmp_path)], env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while not all((tmp_path / f"pid{r}").exists() for r in range(2)):
        assert time.monotonic() < deadline and p.poll() is None, "the ranks did not start"
        time.sleep(0.05)
    time.sleep(0.1)  # the pid files are written; let the ranks reach their sleep
    p.send_signal(sig)
    _, err = p.communicate(timeout=15)
    assert p.returncode == code and "stopped every rank" in err, err
    for rank in range(2):
        with pytest.raises(ProcessLookupError):
            os.kill(int((tmp_path / f"pid{rank}").read_text()), 0)


def test_nccl_needs_enough_gpus(tmp_path):
    script = write(tmp_path / "show.py", SHOW)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = write(bin_dir / "nvidia-smi", "#!/bin/sh\necho 'GPU 0: Fake (UUID: GPU-0)'\n")
    smi.chmod(0o755)
    env = _env(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    r = launch("-n", 2, "--backend", "nccl", script, tmp_path, env=env)
    assert r.returncode == 2 and "nvidia-smi -L lists 1" in r.stderr, r.stderr
    assert launch("-n", 1, "--backend", "nccl", script, tmp_path, env=env).returncode == 0
    env["CUDA_VISIBLE_DEVICES"] = "0"
    env["KILN_LAUNCH_SKIP_GPU_CHECK"] = "1"
    r = launch("-n", 2, "--backend", "nccl", script, tmp_path, env=env)
    assert r.returncode == 2 and "CUDA_VISIBLE_DEVICES='0' names 1" in r.stderr, r.stderr


# --- arguments (in this process) ------------------------------------------------------------


def test_arguments_split_at_the_program(tmp_path):
    script = str(write(tmp_path / "s.py", ""))
    opts, program = kl.parse(["-n", "2", "--mlx", script, "--mlx", "-n", "3"])
    assert (opts.n, opts.mlx, opts.backend, program) == (
        2,
        True,
        "any",
        [script, "--mlx", "-n", "3"],
    )
    opts, program = kl.parse(["--np", "4", "--backend", "nccl", "-m", "pkg.mod", "-m", "x"])
    assert (opts.n, opts.backend, program) == (4, "nccl", ["-m", "pkg.mod", "-m", "x"])
    assert kl.parse(["-n", "1", "--", script, "--"])[1] == [script, "--"]
    assert kl.child_argv(["-m", "m", "a"], mlx=True) == [
        sys.executable,
        "-m",
        "kiln",
        "run",
        "-m",
        "m",
        "a",
    ]
    assert kl.child_argv([script], mlx=False) == [sys.executable, script]


@pytest.mark.parametrize(
    "argv",
    [
        ["-n", "0", "x.py"],
        ["-n", "2"],
        ["x.py"],
        ["-n", "2", "-m"],
        ["-n", "2", "nope.py"],
        ["-n", "2", "--backend", "gloo", "x.py"],
    ],
)
def test_bad_arguments_exit_with_code_2(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "x.py", "")
    with pytest.raises(SystemExit) as e:
        kl.main(argv)
    assert e.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_help_shows_usage(capsys):
    with pytest.raises(SystemExit) as e:
        kl.main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "-n N" in out and "--backend" in out and "--mlx" in out and "--timeout" in out


def test_mpirun_command_line():
    env = {"PATH": "/bin", "KILN_B": "1", "KILN_A": "2", "HOME": "/root", "OMPI_X": "y"}
    cmd = kl.mpi_command(3, ["py", "s.py"], env, "/usr/bin/mpirun")
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    assert cmd == [
        "/usr/bin/mpirun",
        "-np",
        "3",
        "--oversubscribe",
        "--bind-to",
        "none",
        *root,
        "-x",
        "PATH",
        "-x",
        "KILN_A",
        "-x",
        "KILN_B",
        "py",
        "s.py",
    ]
    env = kl.mpi_env({"OMPI_MCA_btl_vader_single_copy_mechanism": "cma"})
    assert env["KILN_DISTRIBUTED_BACKEND"] == "mpi"
    assert env["OMPI_MCA_btl_vader_single_copy_mechanism"] == "cma"  # the user's choice stays


def test_console_script_is_declared():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["kiln.launch"] == "kiln.launch:main"
