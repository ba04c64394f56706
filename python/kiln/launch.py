"""``python -m kiln.launch``: start N local processes of one program (as ``mlx.launch``).

    python -m kiln.launch -n 2 script.py [args...]          # MPI ranks, through mpirun
    python -m kiln.launch -n 2 --mlx script.py [args...]    # each rank with the mlx alias
    python -m kiln.launch -n 2 -m module [args...]          # a module, as python -m runs it
    python -m kiln.launch -n 2 --backend nccl script.py     # one process per GPU

MPI ranks run under OpenMPI's ``mpirun`` (oversubscribing cores, allowing root); each gets
``KILN_DISTRIBUTED_BACKEND=mpi`` so ``mx.distributed.init()`` joins them. NCCL ranks are
started here, each with ``KILN_RANK``, ``KILN_WORLD_SIZE``, ``KILN_NCCL_DIR`` (where rank 0
leaves its unique id) and one GPU in ``CUDA_VISIBLE_DEVICES``. When a rank fails the others
are stopped and the launcher exits with its code.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time


def _program(args) -> list:
    run = ["-m", "kiln", "run"] if args.mlx else []
    target = ["-m", args.module] if args.module else [args.script]
    return [sys.executable, *run, *target, *args.args]


def _mpi(args) -> int:
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        print("kiln.launch: the MPI backend needs OpenMPI's `mpirun`, which is not on PATH "
              "(install OpenMPI, for example `apt-get install openmpi-bin`).", file=sys.stderr)
        return 2
    env = dict(os.environ, KILN_DISTRIBUTED_BACKEND="mpi")
    # Shared-memory single copy (CMA) is often refused inside containers.
    env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    cmd = [mpirun, "-np", str(args.n), "--oversubscribe", "--bind-to", "none"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    for name in sorted(env):
        if name in ("PYTHONPATH", "PATH", "LD_LIBRARY_PATH") or name.startswith(("KILN_", "OMPI_MCA_")):
            cmd += ["-x", name]
    return _wait([subprocess.Popen(cmd + _program(args), env=env)], args.timeout, mpi=True)


def _gpu_count() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return -1
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def _nccl(args) -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    devices = visible.split(",") if visible else [str(i) for i in range(args.n)]
    have = len(devices) if visible else _gpu_count()
    if os.environ.get("KILN_LAUNCH_SKIP_GPU_CHECK") != "1" and 0 <= have < args.n:
        print(f"kiln.launch: --backend nccl runs one process per GPU: {args.n} asked for, "
              f"{have} GPUs visible.", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="kiln-nccl-") as rendezvous:
        procs = []
        for rank in range(args.n):
            env = dict(os.environ, KILN_DISTRIBUTED_BACKEND="nccl", KILN_RANK=str(rank),
                       KILN_WORLD_SIZE=str(args.n), KILN_NCCL_DIR=rendezvous,
                       CUDA_VISIBLE_DEVICES=devices[rank % len(devices)])
            procs.append(subprocess.Popen(_program(args), env=env))
        return _wait(procs, args.timeout, mpi=False)


def _stop(procs) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + 5
    for p in procs:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _wait(procs, timeout, mpi: bool) -> int:
    start = time.monotonic()
    try:
        while True:
            codes = [p.poll() for p in procs]
            failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                rank, code = failed[0]
                _stop(procs)
                who = "mpirun" if mpi else f"rank {rank}"
                print(f"kiln.launch: {who} exited with code {code}", file=sys.stderr)
                return code if code > 0 else 1
            if all(c == 0 for c in codes):
                return 0
            if timeout and time.monotonic() - start > timeout:
                _stop(procs)
                print(f"kiln.launch: stopped after the {timeout:g} s timeout", file=sys.stderr)
                return 124
            time.sleep(0.05)
    except KeyboardInterrupt:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        _stop(procs)
        return 130


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kiln.launch", description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, required=True, help="number of processes")
    ap.add_argument("--backend", choices=["any", "mpi", "nccl"], default="any")
    ap.add_argument("--mlx", action="store_true", help="run each rank with the mlx alias")
    ap.add_argument("--timeout", type=float, default=None, help="stop everything after this long")
    ap.add_argument("-m", dest="module", help="run a module instead of a script")
    ap.add_argument("script", nargs="?")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    if args.module and args.script is not None:
        args.args = [args.script, *args.args]
    if args.n < 1:
        ap.error("-n must be at least 1")
    if not args.module and not args.script:
        ap.error("a script (or -m module) is needed")
    return _nccl(args) if args.backend == "nccl" else _mpi(args)


if __name__ == "__main__":
    sys.exit(main())
