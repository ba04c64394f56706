"""``python -m kiln.launch``: start N local processes of one program for ``mx.distributed``.

    python -m kiln.launch -n 4 train.py --lr 1e-3          # 4 CPU ranks through OpenMPI's mpirun
    python -m kiln.launch -n 2 --mlx -m mlx_lm lora ...    # `import mlx...` on kiln in every rank
    python -m kiln.launch -n 8 --backend nccl train.py     # one rank per GPU, NCCL collectives

MPI ranks run under ``mpirun``; NCCL ranks are spawned here, each with its rank, the world size,
one GPU and a shared directory where rank 0 leaves its NCCL unique id. The launcher waits for
every rank; when one fails it stops the others and exits with that rank's code. Each rank's
CPU thread pool gets its share of the cores (``RAYON_NUM_THREADS``, unless already set).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

USAGE = (
    "python -m kiln.launch -n N [--backend {mpi,nccl,any}] [--mlx] [--timeout SECONDS] "
    "(script.py | -m module) [args...]"
)
# Seconds between SIGTERM and SIGKILL when ranks are stopped.
GRACE = 3.0
# Set to 1 to spawn NCCL ranks without checking that the GPUs exist (tests on CPU machines).
SKIP_GPU_CHECK = "KILN_LAUNCH_SKIP_GPU_CHECK"
# Options of the launcher that take a value (the rest are flags).
_VALUED = {"-n", "--np", "--backend", "--timeout"}


class _Stop(Exception):
    """Ctrl-C or SIGTERM reached the launcher: stop every rank."""


class LaunchError(Exception):
    """A problem found before any rank starts (printed, exit code 2)."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kiln.launch",
        usage=USAGE,
        description="Start N local processes of a Python program for mx.distributed and wait "
        "for them. Options come before the program; everything after it is its arguments.",
    )
    p.add_argument("-n", "--np", dest="n", type=int, required=True, help="number of processes")
    p.add_argument(
        "--backend",
        choices=["mpi", "nccl", "any"],
        default="any",
        help="mpi: CPU ranks through OpenMPI's mpirun; nccl: one rank per GPU; any: mpi (default)",
    )
    p.add_argument(
        "--mlx", action="store_true", help="run as `python -m kiln run`: `import mlx` is kiln"
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop every rank after this long (exit code 124)",
    )
    p.add_argument("-m", dest="module", metavar="MODULE", help="run a module, as `python -m`")
    return p


def split_argv(argv: list) -> tuple:
    """The launcher's own options, and the program with its arguments (its first word is the
    script, or ``-m``); the program starts at the first word that is not an option."""
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok == "--":
            return argv[:i], argv[i + 1 :]
        if tok == "-m":
            return argv[:i], argv[i:]
        if not tok.startswith("-") or tok == "-":
            return argv[:i], argv[i:]
        i += 2 if tok in _VALUED else 1
    return argv, []


def parse(argv: list) -> tuple:
    """``(options, program)``: program is ``["script.py", *args]`` or ``["-m", mod, *args]``."""
    parser = _parser()
    own, program = split_argv(argv)
    if program[:1] == ["-m"]:
        own = own + program[:2]  # argparse checks that -m has its module
    opts = parser.parse_args(own)
    if opts.n < 1:
        parser.error(f"-n must be at least 1 (got {opts.n})")
    if opts.timeout is not None and opts.timeout <= 0:
        parser.error("--timeout must be positive")
    if program[:1] == ["-m"]:
        if len(program) < 2:
            parser.error("-m needs a module name")
    elif not program:
        parser.error("no program given: name a script or -m module")
    elif not os.path.exists(program[0]):
        parser.error(f"no such script: {program[0]}")
    return opts, program


def child_argv(program: list, mlx: bool) -> list:
    """The command each rank runs."""
    if mlx:
        return [sys.executable, "-m", "kiln", "run", *program]
    return [sys.executable, *program]


def mpi_command(n: int, argv: list, env: dict, mpirun: str = "mpirun") -> list:
    """``mpirun`` with the flags local runs need, exporting the variables ranks rely on."""
    cmd = [mpirun, "-np", str(n), "--oversubscribe", "--bind-to", "none"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    names = [k for k in ("PYTHONPATH", "PATH", "LD_LIBRARY_PATH", "RAYON_NUM_THREADS") if k in env]
    names += sorted(k for k in env if k.startswith("KILN_"))
    for name in names:
        cmd += ["-x", name]
    return cmd + argv


def mpi_env(base: dict) -> dict:
    env = dict(base)
    env["KILN_DISTRIBUTED_BACKEND"] = "mpi"
    # CMA/XPMEM single-copy transfers are often forbidden in containers (ptrace limits).
    env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    return env


def _gpu_count() -> int | None:
    """GPUs nvidia-smi lists, or None where it is missing or fails."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "-L"], check=False, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return sum(1 for line in out.stdout.splitlines() if line.strip().startswith("GPU"))


def nccl_devices(n: int, env: dict) -> list:
    """The CUDA_VISIBLE_DEVICES value of each rank; raises LaunchError when there are too few
    GPUs."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        devices = [d.strip() for d in visible.split(",") if d.strip()]
        if len(devices) < n:
            raise LaunchError(
                f"-n {n} with --backend nccl needs {n} GPUs, but CUDA_VISIBLE_DEVICES={visible!r} "
                f"names {len(devices)}"
            )
    else:
        devices = [str(r) for r in range(n)]
    if env.get(SKIP_GPU_CHECK) != "1":
        count = _gpu_count()
        if count is not None and count < n:
            raise LaunchError(
                f"-n {n} with --backend nccl needs {n} GPUs, but nvidia-smi -L lists {count} "
                f"(use --backend mpi for CPU ranks)"
            )
    return devices[:n]


def _stop(procs: list) -> None:
    """SIGTERM every live process, then SIGKILL what is left after GRACE seconds."""
    for p in procs:
        if p.poll() is None:
            try:
                p.terminate()
            except OSError:
                pass
    deadline = time.monotonic() + GRACE
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
    for p in procs:
        try:
            p.wait(timeout=GRACE)
        except subprocess.TimeoutExpired:
            pass


def _interrupted(procs: list) -> int:
    """Ctrl-C: from a terminal the ranks got SIGINT too, so they have a moment to exit on
    their own (Python ranks print their traceback) before they are stopped."""
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        time.sleep(0.05)
    _stop(procs)
    _say("interrupted; stopped every rank")
    return 130


def _code(returncode: int) -> int:
    """The launcher's exit code for a child's return code (a signal N gives 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


def _describe(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name}"
    return f"exited with code {returncode}"


def _say(msg: str) -> None:
    print(f"kiln.launch: {msg}", file=sys.stderr, flush=True)


def _timed_out(timeout: float) -> int:
    _say(f"timed out after {timeout:g} s (--timeout); stopped every rank")
    return 124


def run_nccl(n: int, argv: list, timeout: float | None, base_env: dict) -> int:
    devices = nccl_devices(n, base_env)
    nccl_dir = tempfile.mkdtemp(prefix="kiln-nccl-")
    procs: list = []
    try:
        for r in range(n):
            env = dict(base_env)
            env.update(
                KILN_DISTRIBUTED_BACKEND="nccl",
                KILN_RANK=str(r),
                KILN_WORLD_SIZE=str(n),
                KILN_NCCL_DIR=nccl_dir,
                CUDA_VISIBLE_DEVICES=devices[r],
                # NVLink multicast can take a host's shared GPUs out of service.
                NCCL_NVLS_ENABLE="0",
            )
            # Only rank 0 reads the terminal's stdin, as under mpirun.
            stdin = None if r == 0 else subprocess.DEVNULL
            procs.append(subprocess.Popen(argv, env=env, stdin=stdin))
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            alive = False
            for r, p in enumerate(procs):
                rc = p.poll()
                if rc is None:
                    alive = True
                elif rc != 0:
                    _say(f"rank {r} {_describe(rc)}; stopping the other ranks")
                    _stop(procs)
                    return _code(rc)
            if not alive:
                return 0
            if deadline is not None and time.monotonic() > deadline:
                _stop(procs)
                return _timed_out(timeout)
            time.sleep(0.05)
    except KeyboardInterrupt:
        return _interrupted(procs)
    except _Stop:
        _stop(procs)
        _say("got SIGTERM; stopped every rank")
        return 143
    finally:
        # Every path above has stopped the ranks already unless a second signal cut it short.
        for p in procs:
            if p.poll() is None:
                p.kill()
        shutil.rmtree(nccl_dir, ignore_errors=True)


# mpirun's report of the first failing process: "Process name: [[job,1],RANK]" then
# "Exit code: CODE".
_MPI_RANK = re.compile(r"Process name:\s*\[\[\d+,\d+\],(\d+)\]")
_MPI_CODE = re.compile(r"Exit code:\s*(-?\d+)")


def _relay(src, tail: list) -> None:
    """Copies mpirun's stderr through unchanged as it comes, keeping its last 64 KiB."""
    fd = src.fileno()
    kept = b""
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        out = getattr(sys.stderr, "buffer", None)
        if out is not None:
            out.write(chunk)
        else:  # a replaced sys.stderr (an embedding, a test's capture) takes text
            sys.stderr.write(chunk.decode("utf-8", "replace"))
        sys.stderr.flush()
        kept = (kept + chunk)[-65536:]
    tail.append(kept.decode("utf-8", "replace"))


def run_mpi(n: int, argv: list, timeout: float | None, base_env: dict) -> int:
    mpirun = shutil.which("mpirun", path=base_env.get("PATH"))
    if mpirun is None:
        raise LaunchError(
            "`mpirun` was not found on PATH: the MPI backend needs OpenMPI (e.g. "
            "`apt-get install openmpi-bin libopenmpi-dev`); for GPU ranks use --backend nccl"
        )
    env = mpi_env(base_env)
    # stderr goes through a pipe only so that the failing rank can be named at the end.
    proc = subprocess.Popen(mpi_command(n, argv, env, mpirun), env=env, stderr=subprocess.PIPE)
    tail: list = []
    relay = threading.Thread(target=_relay, args=(proc.stderr, tail), daemon=True)
    relay.start()
    try:
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop([proc])
            return _timed_out(timeout)
    except KeyboardInterrupt:
        return _interrupted([proc])
    except _Stop:
        _stop([proc])
        _say("got SIGTERM; stopped every rank")
        return 143
    finally:
        if proc.poll() is None:
            proc.kill()
        relay.join(timeout=GRACE)
    if rc != 0:
        text = tail[0] if tail else ""
        rank, code = _MPI_RANK.search(text), _MPI_CODE.search(text)
        if rank and code:
            _say(f"rank {rank.group(1)} exited with code {code.group(1)}")
        else:
            _say(f"mpirun {_describe(rc)}")
    return _code(rc)


def share_cores(n: int, env: dict) -> dict:
    """Each rank's CPU thread pool sized to its share of the cores (as torchrun sets
    OMP_NUM_THREADS), unless the caller chose: ranks whose pools each take every core
    oversubscribe them, and a rank waiting in a collective then slows the one computing."""
    env = dict(env)
    if "RAYON_NUM_THREADS" not in env:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        env["RAYON_NUM_THREADS"] = str(max(1, (cores or os.cpu_count() or 1) // n))
    return env


def main(argv: list | None = None) -> int:
    opts, program = parse(sys.argv[1:] if argv is None else argv)
    child = child_argv(program, opts.mlx)
    env = share_cores(opts.n, dict(os.environ))

    def on_term(signum, frame):
        raise _Stop()

    # SIGTERM to the launcher stops the ranks too (Ctrl-C arrives as KeyboardInterrupt).
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, on_term) if in_main else None
    try:
        if opts.backend == "nccl":
            return run_nccl(opts.n, child, opts.timeout, env)
        return run_mpi(opts.n, child, opts.timeout, env)
    except LaunchError as e:
        _say(str(e))
        return 2
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
