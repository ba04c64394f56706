"""GPU rows of the benchmark harness (DESIGN.md section 7, issue 7): kiln eager and compiled,
torch eager and torch.compile, jax.jit and MLX-CUDA (lazy and mx.compile), each system in its
own process, one table (and --json). What is measured:

- the five elementwise workloads of PEERS.md (gelu_erf, gelu_tanh, silu_mul, relu_chain, adam)
  at 2^--n elements per array (26 by default), fp32 and bf16, eager and compiled;
- eager single ops (issue 7's "eager elementwise kernels at 0.85 or more of the floor for their
  own traffic"), kiln eager and torch eager, 2^--n elements, fp32 and bf16, rows "op <name>":
  exp, sigmoid, erf, negative; add, multiply, maximum; multiply_scalar (x * 1.5); add_row (x as
  (2^n / 4096, 4096) + a (4096,) row); where (bool condition); astype (fp32 -> bf16 and
  bf16 -> fp32, the dtype column is the source). Each call is one op, uncompiled (kiln:
  async_eval(op(...))); each row's bytes are its own (inputs + output; the row vector counts its
  4096 elements, bools one byte, the scalar nothing). On by default; --eager-ops OP... picks
  some (a bare --eager-ops: all, also beside a --workloads filter, which otherwise leaves them
  out unless it names `eager`), --no-eager-ops skips them. The targets printout at the end
  gives each kiln row's floor fraction against 0.85 and its speed against torch eager;
- the copy floor: torch's device `copy_` of each row's byte count (inputs + outputs), in the same
  run; `floor` is that copy's time over the row's time (1.00 = at memory bandwidth). In a run
  without torch, kiln's process measures the floor with kiln's own copy kernel instead (floor
  marked `*`: it is only as fast as kiln's copy); torch's copy rows win where both exist;
- a transformer MLP block, y = x + (silu(g) * u) @ w_out with [g | u] = x @ w_in (matmul,
  SiLU-gated multiply, matmul, residual add) on --mlp-shape M D F (x is (M, D)), fp32 and bf16;
- matmul --matmul-n ^3 (4096 by default), fp32 and bf16: TFLOP/s and the ratio to torch's
  cuBLAS call (fp32 strict, no TF32, in every system: torch allow_tf32 off, jax precision
  "highest", MLX_ENABLE_TF32=0 unless set);
- host time per call, silu_mul on 1024 fp32 elements, eager and compiled, both ways: back to
  back (each call issued with async_eval, one synchronize at the end) and eval after every call;
- first calls: each workload row's first call (trace + codegen + build + run, in the column
  `first`; each system's process starts with an empty kernel cache, and the first kiln row
  also pays the one-time NVRTC library load), and a probe in two fresh processes sharing one
  disk cache, cold then warm (first call minus the steady-state call of a compiled function;
  kiln: KILN_CACHE_DIR, MLX: MLX_PTX_CACHE_DIR);
- the training step of bench/harness.py at shared/bench/train_anchors.py's size (`--train-size`),
  kiln, torch and MLX, eager and compiled.

Workload, eager-op, MLP and matmul times: 10 calls issued back to back, one synchronize,
divided by 10 (host and device overlap as in real use), median of --reps such groups (a quarter
as many for the MLP block and matmul).

    python3 bench/gpu.py                         # every installed system
    python3 bench/gpu.py --systems kiln torch --n 26 --reps 20 --json $OUT/gpu.json
    python3 bench/gpu.py --systems kiln-train torch-train mlx-train   # training-step rows only
    python3 bench/gpu.py --systems kiln torch --workloads eager   # eager single-op rows (+ host rows)
    python3 bench/gpu.py --device cpu --n 16 --reps 3 --mlp-shape 64 128 256 --matmul-n 256 \\
        --train-size small                       # a smoke test on a machine without a GPU

Systems (--systems): kiln, kiln-first-call, kiln-train, torch, torch-train, jax, mlx,
mlx-first-call, mlx-train. A system whose package is not installed is skipped with a note.
--device auto (default) runs each system on its GPU when it finds one and on the CPU otherwise
(rows not on a GPU are marked "(cpu)"); --device gpu fails a system that finds no GPU.

MLX-CUDA on the GPU machine: its 90 MB wheels travel in two calls (scripts/mlx_cuda_pack.sh
here, scripts/mlx_cuda_unpack.sh there; the top of the latter gives the calls); then
`. /root/mlx_site/env.sh` (PYTHONPATH) and the mlx, mlx-first-call and mlx-train rows run.
--system-timeout bounds each system; --json is rewritten after each one, so a call stopped at
its limit keeps the rows measured so far (`--table FILE...` prints them, merged). Adding another
system: one run_<system>(args, out) appending rows, an entry in RUNNERS and in PACKAGES.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INNER = 10
HOST_N = 1024  # elements of the host-time rows


def adam(xp_sqrt, p, g, m, v, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
    m2 = b1 * m + (1 - b1) * g
    v2 = b2 * v + (1 - b2) * g * g
    return p - lr * m2 / (xp_sqrt(v2) + eps), m2, v2


def workloads(maximum, tanh, erf, sigmoid, sqrt):
    return {
        "gelu_erf": (1, 1, lambda x: x * (1 + erf(x / math.sqrt(2))) / 2),
        "gelu_tanh": (1, 1, lambda x: 0.5 * x * (1 + tanh(0.7978845608 * (x + 0.044715 * x * x * x)))),
        "silu_mul": (2, 1, lambda g, u: g * sigmoid(g) * u),
        "relu_chain": (3, 1, lambda x, y, z: maximum(x * y + z, 0) * 0.5 + x),
        "adam": (4, 3, lambda p, g, m, v: adam(sqrt, p, g, m, v)),
    }


ROW = 4096  # length of the row vector of the eager `add_row` op
# The single ops of the eager-ops rows: name -> (operands, whether the output is the other float
# dtype). Operands: x and y, n elements of the row's dtype; X, x as a (n / ROW, ROW) matrix;
# b, a (ROW,) vector; c, n bools. A scalar operand (multiply_scalar's 1.5) is not listed.
EAGER_OPS = {
    "exp": ("x", False),
    "sigmoid": ("x", False),
    "erf": ("x", False),
    "negative": ("x", False),
    "add": ("xy", False),
    "multiply": ("xy", False),
    "maximum": ("xy", False),
    "multiply_scalar": ("x", False),
    "add_row": ("Xb", False),
    "where": ("cxy", False),
    "astype": ("x", True),
}


def eager_op_fns(exp, sigmoid, erf, negative, add, multiply, maximum, where, cast):
    """A system's function for each of EAGER_OPS (`cast`: fp32 to bf16, bf16 to fp32); an op
    the system lacks (None) is left out."""
    fns = {"exp": exp, "sigmoid": sigmoid, "erf": erf, "negative": negative, "add": add, "multiply": multiply,
           "maximum": maximum, "multiply_scalar": lambda x: x * 1.5, "add_row": add, "where": where,
           "astype": cast}
    return {k: f for k, f in fns.items() if f is not None}


def row_len(n):
    return min(ROW, n)


def eager_op_bytes(operands, casts, n, size):
    """Bytes an eager op reads and writes: its operands (a scalar counts 0, the row vector its
    own elements, bools one byte each) and its n-element output."""
    per = {"x": n * size, "y": n * size, "X": n * size, "b": row_len(n) * size, "c": n}
    out_size = (6 - size) if casts else size  # fp32 <-> bf16
    return sum(per[k] for k in operands) + n * out_size


def floor_bytes(n, ops):
    """The byte counts whose copy floor a run needs: the workloads' (k * n) and, for the eager
    ops `ops`, each op's own in fp32 and bf16."""
    need = {k * n for k in (4, 6, 8, 12, 14, 16, 28)}
    for name in ops:
        operands, casts = EAGER_OPS[name]
        need |= {eager_op_bytes(operands, casts, n, size) for size in (4, 2)}
    return sorted(need)


def copy_row_name(n, nbytes):
    return f"copy_{nbytes // n}n_bytes" if nbytes % n == 0 else f"copy_{nbytes}_bytes"


def mlp_block(sigmoid):
    """The transformer MLP block: one matmul to [gate | up], SiLU-gated multiply, matmul back,
    residual add."""

    def f(x, w_in, w_out):
        h = x @ w_in
        half = h.shape[-1] // 2
        g, u = h[:, :half], h[:, half:]
        return x + (g * sigmoid(g) * u) @ w_out

    return f


def mlp_flops(m, d, f):
    return 2 * m * d * (2 * f) + 2 * m * f * d


def mlp_inputs(shape):
    """numpy float32 inputs of the MLP block, scaled so bf16 stays in range."""
    import numpy as np

    m, d, f = shape
    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, d), dtype=np.float32)
    w_in = rng.standard_normal((d, 2 * f), dtype=np.float32) * np.float32(d**-0.5)
    w_out = rng.standard_normal((f, d), dtype=np.float32) * np.float32(f**-0.5)
    return x, w_in, w_out


def matmul_inputs(n):
    import numpy as np

    rng = np.random.default_rng(1)
    return [rng.standard_normal((n, n), dtype=np.float32) for _ in range(2)]


def timed(call, sync, reps):
    for _ in range(3):
        call()
    sync()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(INNER):
            call()
        sync()
        times.append((time.perf_counter() - t) / INNER)
    return statistics.median(times)


def host_time(call, sync, each):
    """Seconds per call of `call` on tiny inputs: back to back, or synchronised each call."""
    for _ in range(50):
        call()
    sync()
    n = 2000
    t = time.perf_counter()
    for _ in range(n):
        call()
        if each:
            sync()
    sync()
    return (time.perf_counter() - t) / n


def label(system, device):
    return system if device == "gpu" else f"{system} ({device})"


# ---- kiln and MLX: one runner for both (the same mlx.core API) --------------------------------


def pick_device(mx, want, name):
    """Sets the default device of an mlx.core-like module from --device; returns 'gpu'/'cpu'."""
    has_gpu = mx.is_available(mx.gpu)
    if want == "gpu" and not has_gpu:
        raise SystemExit(f"[{name}] --device gpu but {name} finds no GPU")
    dev = "gpu" if (want != "cpu" and has_gpu) else "cpu"
    mx.set_default_device(mx.gpu if dev == "gpu" else mx.cpu)
    return dev


def run_mx(args, out, mx, name, modes):
    """Workload, MLP, matmul and host-time rows of kiln or MLX; `modes` names the uncompiled
    and compiled variants ("eager"/"compiled" for kiln, "lazy"/"compile" for MLX)."""
    import numpy as np

    dev = pick_device(mx, args.device, name)
    n = 1 << args.n
    wls = workloads(mx.maximum, mx.tanh, mx.erf, mx.sigmoid, mx.sqrt)
    rng = np.random.default_rng(0)
    dtypes = (("fp32", mx.float32), ("bf16", mx.bfloat16))

    def variants(f):
        return ((modes[0], f), (modes[1], mx.compile(f)))

    def measure(g, xs, reps):
        def call():
            mx.async_eval(g(*xs))

        first = time.perf_counter()
        mx.eval(g(*xs))
        first = time.perf_counter() - first
        return timed(call, mx.synchronize, reps), first

    for dtype_name, dtype in dtypes:
        for wname, (nin, nout, f) in wls.items():
            if args.workloads and wname not in args.workloads:
                continue
            xs = [mx.array(np.abs(rng.standard_normal(n, dtype=np.float32)) + 0.1).astype(dtype) for _ in range(nin)]
            mx.eval(*xs)
            for mode, g in variants(f):
                sec, first = measure(g, xs, args.reps)
                out.append({"workload": wname, "system": label(f"{name} {mode} {dtype_name}", dev), "ms": sec * 1e3,
                            "bytes": (nin + nout) * n * dtype.size, "first_s": first})
            del xs
            mx.clear_cache()
    few = max(3, args.reps // 4)
    if not args.workloads or "mlp" in args.workloads:
        base = mlp_inputs(args.mlp_shape)
        for dtype_name, dtype in dtypes:
            xs = [mx.array(a).astype(dtype) for a in base]
            mx.eval(*xs)
            for mode, g in variants(mlp_block(mx.sigmoid)):
                sec, first = measure(g, xs, few)
                out.append({"workload": "mlp_block", "system": label(f"{name} {mode} {dtype_name}", dev),
                            "ms": sec * 1e3, "flops": mlp_flops(*args.mlp_shape), "dtype": dtype_name,
                            "first_s": first})
            del xs
            mx.clear_cache()
    if not args.workloads or "matmul" in args.workloads:
        base = matmul_inputs(args.matmul_n)
        for dtype_name, dtype in dtypes:
            a, b = (mx.array(x).astype(dtype) for x in base)
            mx.eval(a, b)
            sec, _ = measure(lambda a, b: a @ b, (a, b), few)
            out.append({"workload": "matmul", "system": label(f"{name} {dtype_name}", dev), "ms": sec * 1e3,
                        "flops": 2 * args.matmul_n**3, "dtype": dtype_name})
            del a, b
            mx.clear_cache()
    small = [mx.ones((HOST_N,)) for _ in range(2)]
    mx.eval(*small)
    for mode, g in variants(wls["silu_mul"][2]):
        for each in (False, True):
            def call(g=g):
                mx.async_eval(g(*small))

            us = host_time(call, mx.synchronize, each) * 1e6
            out.append({"workload": f"host_us_silu_{HOST_N}",
                        "system": label(f"{name} {mode}" + (" eval each" if each else " back to back"), dev),
                        "us": us})


def mx_eager_ops(args, out, mx, name):
    """Single ops, uncompiled, each call `async_eval(op(...))` (each op is its own kernel), timed
    as the workload rows (rows "op <name>"; astype's dtype is its source, cast to the other)."""
    import numpy as np

    dev = pick_device(mx, args.device, name)
    n = 1 << args.n
    rng = np.random.default_rng(1)
    fns = eager_op_fns(mx.exp, mx.sigmoid, getattr(mx, "erf", None), mx.negative, mx.add, mx.multiply,
                       mx.maximum, mx.where,
                       lambda x: x.astype(mx.bfloat16 if x.dtype == mx.float32 else mx.float32))
    c = mx.array(rng.random(n) < 0.5)
    for dtype_name, dtype in (("fp32", mx.float32), ("bf16", mx.bfloat16)):
        x, y = (mx.array(np.abs(rng.standard_normal(n, dtype=np.float32)) + 0.1).astype(dtype) for _ in range(2))
        b = mx.array(rng.standard_normal(row_len(n), dtype=np.float32)).astype(dtype)
        operands = {"x": x, "y": y, "X": x.reshape(n // row_len(n), row_len(n)), "b": b, "c": c}
        mx.eval(*operands.values())
        for op in args.eager_ops:
            if op not in fns:
                continue
            kinds, casts = EAGER_OPS[op]
            xs = [operands[k] for k in kinds]
            f = fns[op]

            def call(f=f, xs=xs):
                mx.async_eval(f(*xs))

            first = time.perf_counter()
            mx.eval(f(*xs))
            first = time.perf_counter() - first
            sec = timed(call, mx.synchronize, args.reps)
            out.append({"workload": f"op {op}", "system": label(f"{name} eager {dtype_name}", dev), "ms": sec * 1e3,
                        "bytes": eager_op_bytes(kinds, casts, n, dtype.size), "first_s": first})
        del x, y, b, operands
        mx.clear_cache()


def kiln_copy_floor(args, out, mx):
    """The copy floor measured with kiln's own copy (its Copy kernel, float32 elements), for a
    run without torch: rows "copy_..." of system "kiln copy", used only where torch has none."""
    import kiln._core as k

    dev = pick_device(mx, args.device, "kiln")
    n = 1 << args.n
    need = floor_bytes(n, args.eager_ops)
    big = mx.zeros((max(need) // 8,), mx.float32) + 1  # evaluated below, a real buffer
    mx.eval(big)
    for nbytes in need:
        src = big[: nbytes // 8]  # half the bytes read, half written
        mx.eval(src)

        def copy(src=src):
            # A reshape of an evaluated array is a lazy view, so contiguous records a Copy.
            return mx.contiguous(src.reshape(1, -1))

        y = copy()
        mx.eval(y)
        if k._buffer_info(y)[0] == k._buffer_info(big)[0]:
            raise SystemExit("[kiln] kiln_copy_floor: contiguous(view) did not copy")
        del y
        sec = timed(lambda: mx.async_eval(copy()), mx.synchronize, args.reps)
        out.append({"workload": copy_row_name(n, nbytes), "system": label("kiln copy", dev), "ms": sec * 1e3,
                    "bytes": nbytes})
    del big
    mx.clear_cache()


def run_kiln(args, out):
    import kiln.core as mx

    if args.own_floor:
        kiln_copy_floor(args, out, mx)
    run_mx(args, out, mx, "kiln", ("eager", "compiled"))
    if args.eager_ops:
        mx_eager_ops(args, out, mx, "kiln")


def run_mlx(args, out):
    # Strict fp32 matmuls, as kiln's and torch's (MLX-CUDA's default is TF32).
    os.environ.setdefault("MLX_ENABLE_TF32", "0")
    import mlx.core as mx

    run_mx(args, out, mx, "mlx", ("lazy", "compile"))


FIRST_CALL_PROBE = (
    "import sys, time, statistics, {lib}.core as mx\n"
    "if sys.argv[1] == 'cpu' or not mx.is_available(mx.gpu): mx.set_default_device(mx.cpu)\n"
    "x = mx.ones(({n},)); mx.eval(x)\n"
    "f = mx.compile(lambda a: a * mx.sigmoid(a) * 1.5 + 0.25)\n"
    "t = time.perf_counter(); mx.eval(f(x)); first = time.perf_counter() - t\n"
    "ts = []\n"
    "for _ in range(50):\n"
    "    t = time.perf_counter(); mx.eval(f(x)); ts.append(time.perf_counter() - t)\n"
    "print(first - statistics.median(ts), mx.default_device())\n"
)


def first_call_probe(args, out, lib, cache_var, name):
    """First call of a compiled function in two fresh processes sharing one disk cache (empty
    for the first: cold, filled by it for the second: warm), minus the steady-state call."""
    code = FIRST_CALL_PROBE.format(lib=lib, n=HOST_N)
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, **{cache_var: cache})
        for which in ("cold", "warm"):
            r = subprocess.run([sys.executable, "-c", code, args.device], env=env, capture_output=True, text=True,
                               check=False)
            if r.returncode != 0:
                raise SystemExit(f"[{name}] first-call probe failed:\n{r.stderr[-2000:]}")
            extra, device = r.stdout.split(maxsplit=1)
            dev = "gpu" if "gpu" in device else "cpu"
            out.append({"workload": "first_call_extra_ms", "system": label(f"{name} {which} disk cache", dev),
                        "ms": float(extra) * 1e3})


def run_kiln_first_call(args, out):
    first_call_probe(args, out, "kiln", "KILN_CACHE_DIR", "kiln compiled")


def run_mlx_first_call(args, out):
    first_call_probe(args, out, "mlx", "MLX_PTX_CACHE_DIR", "mlx compile")


def train_rows(args, out, lib, name, modes):
    """The harness's train_step (bench/harness.py) at --train-size, uncompiled and compiled,
    on the library's default device (its GPU when it has one)."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import importlib

    import harness

    mx = importlib.import_module(f"{lib}.core")
    dev = pick_device(mx, args.device, name)
    harness.TRAIN_SIZE = args.train_size
    for compiled in (False, True):
        r = harness.train_step_bench(lib, compiled)
        out.append({"workload": f"train_step_{args.train_size}", "system": label(f"{name} {modes[compiled]}", dev),
                    "ms": r["sec"] * 1e3, "ktok_s": r["tokens"] / r["sec"] / 1e3, "first_s": r["first"]})


def run_kiln_train(args, out):
    train_rows(args, out, "kiln", "kiln", ("eager", "compiled"))


def run_mlx_train(args, out):
    train_rows(args, out, "mlx", "mlx", ("lazy", "compile"))


# ---- torch and jax ---------------------------------------------------------------------------


def torch_device(torch, want):
    has_gpu = torch.cuda.is_available()
    if want == "gpu" and not has_gpu:
        raise SystemExit("[torch] --device gpu but torch finds no GPU")
    if want != "cpu" and has_gpu:
        return "cuda", "gpu", torch.cuda.synchronize
    return "cpu", "cpu", lambda: None


def run_torch(args, out):
    import torch

    where, dev, sync = torch_device(torch, args.device)
    torch.backends.cuda.matmul.allow_tf32 = False  # strict fp32, as kiln's default
    n = 1 << args.n
    # The floor of a row moving B bytes: copying B / 2 bytes (read + write = B).
    need = floor_bytes(n, args.eager_ops)
    x = torch.randint(0, 255, (max(need) // 2,), dtype=torch.uint8, device=where)
    y = torch.empty_like(x)
    for nbytes in need:
        src, dst = x[: nbytes // 2], y[: nbytes // 2]
        sec = timed(lambda src=src, dst=dst: dst.copy_(src), sync, args.reps)
        out.append({"workload": copy_row_name(n, nbytes), "system": label("torch", dev), "ms": sec * 1e3,
                    "bytes": nbytes})
    del x, y
    wls = workloads(torch.clamp_min, torch.tanh, torch.erf, torch.sigmoid, torch.sqrt)
    wls["relu_chain"] = (3, 1, lambda x, y, z: torch.relu(x * y + z) * 0.5 + x)
    dtypes = (("fp32", torch.float32), ("bf16", torch.bfloat16))

    def measure(g, xs, reps):
        first = time.perf_counter()
        g(*xs)
        sync()
        first = time.perf_counter() - first
        return timed(lambda: g(*xs), sync, reps), first

    for dtype_name, dtype in dtypes:
        for name, (nin, nout, f) in wls.items():
            if args.workloads and name not in args.workloads:
                continue
            xs = [(torch.randn(n, device=where).abs() + 0.1).to(dtype) for _ in range(nin)]
            for mode, g in (("eager", f), ("compile", torch.compile(f))):
                sec, first = measure(g, xs, args.reps)
                out.append({"workload": name, "system": label(f"torch {mode} {dtype_name}", dev), "ms": sec * 1e3,
                            "bytes": (nin + nout) * n * dtype.itemsize, "first_s": first})
            del xs
    if args.eager_ops:
        torch_eager_ops(args, out, torch, where, dev, sync)
    few = max(3, args.reps // 4)
    with torch.no_grad():
        if not args.workloads or "mlp" in args.workloads:
            base = [torch.from_numpy(a) for a in mlp_inputs(args.mlp_shape)]
            f = mlp_block(torch.sigmoid)
            for dtype_name, dtype in dtypes:
                xs = [a.to(where, dtype) for a in base]
                for mode, g in (("eager", f), ("compile", torch.compile(f))):
                    sec, first = measure(g, xs, few)
                    out.append({"workload": "mlp_block", "system": label(f"torch {mode} {dtype_name}", dev),
                                "ms": sec * 1e3, "flops": mlp_flops(*args.mlp_shape), "dtype": dtype_name,
                                "first_s": first})
                del xs
        if not args.workloads or "matmul" in args.workloads:
            base = [torch.from_numpy(a) for a in matmul_inputs(args.matmul_n)]
            for dtype_name, dtype in dtypes:
                a, b = (t.to(where, dtype) for t in base)
                sec, _ = measure(lambda a, b: a @ b, (a, b), few)
                out.append({"workload": "matmul", "system": label(f"torch {dtype_name}", dev), "ms": sec * 1e3,
                            "flops": 2 * args.matmul_n**3, "dtype": dtype_name})
    small = [torch.ones(HOST_N, device=where) for _ in range(2)]
    f = wls["silu_mul"][2]
    for mode, g in (("eager", f), ("compile", torch.compile(f))):
        for each in (False, True):
            us = host_time(lambda g=g: g(*small), sync, each) * 1e6
            out.append({"workload": f"host_us_silu_{HOST_N}",
                        "system": label(f"torch {mode}" + (" eval each" if each else " back to back"), dev), "us": us})


def torch_eager_ops(args, out, torch, where, dev, sync):
    """torch's rows of mx_eager_ops: the same ops on the same operands, each call one op."""
    n = 1 << args.n
    fns = eager_op_fns(torch.exp, torch.sigmoid, getattr(torch, "erf", None), torch.neg, torch.add, torch.mul,
                       torch.maximum, torch.where,
                       lambda x: x.to(torch.bfloat16 if x.dtype == torch.float32 else torch.float32))
    gen = torch.Generator(device=where).manual_seed(1)
    c = torch.rand(n, device=where, generator=gen) < 0.5
    for dtype_name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        x, y = ((torch.randn(n, device=where, generator=gen).abs() + 0.1).to(dtype) for _ in range(2))
        b = torch.randn(row_len(n), device=where, generator=gen).to(dtype)
        operands = {"x": x, "y": y, "X": x.view(n // row_len(n), row_len(n)), "b": b, "c": c}
        for op in args.eager_ops:
            if op not in fns:
                continue
            kinds, casts = EAGER_OPS[op]
            xs = [operands[k] for k in kinds]
            f = fns[op]
            first = time.perf_counter()
            f(*xs)
            sync()
            first = time.perf_counter() - first
            sec = timed(lambda f=f, xs=xs: f(*xs), sync, args.reps)
            out.append({"workload": f"op {op}", "system": label(f"torch eager {dtype_name}", dev), "ms": sec * 1e3,
                        "bytes": eager_op_bytes(kinds, casts, n, dtype.itemsize), "first_s": first})
        del x, y, b, operands


def run_jax(args, out):
    import jax

    if args.device == "cpu":
        jax.config.update("jax_platforms", "cpu")
    import jax.numpy as jnp
    from jax.scipy.special import erf

    dev = "gpu" if jax.default_backend() == "gpu" else "cpu"
    if args.device == "gpu" and dev != "gpu":
        raise SystemExit("[jax] --device gpu but jax finds no GPU")
    n = 1 << args.n
    wls = workloads(jnp.maximum, jnp.tanh, erf, jax.nn.sigmoid, jnp.sqrt)
    key = jax.random.PRNGKey(0)
    dtypes = (("fp32", jnp.float32), ("bf16", jnp.bfloat16))

    def measure(f, xs, reps):
        jf = jax.jit(f)
        last = [None]

        def call():
            last[0] = jf(*xs)

        def sync():
            jax.block_until_ready(last[0])

        first = time.perf_counter()
        jax.block_until_ready(jf(*xs))
        first = time.perf_counter() - first
        return timed(call, sync, reps), first, call, sync

    for dtype_name, dtype in dtypes:
        for name, (nin, nout, f) in wls.items():
            if args.workloads and name not in args.workloads:
                continue
            xs = [(jnp.abs(jax.random.normal(jax.random.fold_in(key, i), (n,))) + 0.1).astype(dtype) for i in range(nin)]
            sec, first, _, _ = measure(f, xs, args.reps)
            out.append({"workload": name, "system": label(f"jax.jit {dtype_name}", dev), "ms": sec * 1e3,
                        "bytes": (nin + nout) * n * jnp.dtype(dtype).itemsize, "first_s": first})
            del xs
    few = max(3, args.reps // 4)
    # Matmuls at the precision asked for (jax's GPU default for fp32 is TF32).
    with jax.default_matmul_precision("highest"):
        if not args.workloads or "mlp" in args.workloads:
            base = mlp_inputs(args.mlp_shape)
            for dtype_name, dtype in dtypes:
                xs = [jnp.asarray(a).astype(dtype) for a in base]
                sec, first, _, _ = measure(mlp_block(jax.nn.sigmoid), xs, few)
                out.append({"workload": "mlp_block", "system": label(f"jax.jit {dtype_name}", dev), "ms": sec * 1e3,
                            "flops": mlp_flops(*args.mlp_shape), "dtype": dtype_name, "first_s": first})
                del xs
        if not args.workloads or "matmul" in args.workloads:
            base = matmul_inputs(args.matmul_n)
            for dtype_name, dtype in dtypes:
                xs = [jnp.asarray(a).astype(dtype) for a in base]
                sec, _, _, _ = measure(lambda a, b: a @ b, xs, few)
                out.append({"workload": "matmul", "system": label(f"jax.jit {dtype_name}", dev), "ms": sec * 1e3,
                            "flops": 2 * args.matmul_n**3, "dtype": dtype_name})
    small = [jnp.ones(HOST_N) for _ in range(2)]
    _, _, call, sync = measure(wls["silu_mul"][2], small, 1)
    for each in (False, True):
        us = host_time(call, sync, each) * 1e6
        out.append({"workload": f"host_us_silu_{HOST_N}",
                    "system": label("jax.jit" + (" eval each" if each else " back to back"), dev), "us": us})


def run_torch_train(args, out):
    """The harness's model and step in torch: eager and torch.compile (AdamW, parameters in
    the --train-size dtype, cross-entropy in float32), timed as the harness times kiln's."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import harness

    where, dev, sync = torch_device(torch, args.device)
    c = harness.TRAIN_SIZES[args.train_size]
    V, D, L, H, T, B = (c[k] for k in "VDLHTB")

    class Block(nn.Module):
        def __init__(s):
            super().__init__()
            s.n1, s.n2 = nn.RMSNorm(D), nn.RMSNorm(D)
            s.qkv, s.o = nn.Linear(D, 3 * D, bias=False), nn.Linear(D, D, bias=False)
            s.g, s.u = nn.Linear(D, 4 * D, bias=False), nn.Linear(D, 4 * D, bias=False)
            s.d = nn.Linear(4 * D, D, bias=False)

        def forward(s, x):
            q, k, v = s.qkv(s.n1(x)).view(B, T, 3, H, D // H).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + s.o(a.transpose(1, 2).reshape(B, T, D))
            h = s.n2(x)
            return x + s.d(F.silu(s.g(h)) * s.u(h))

    class LM(nn.Module):
        def __init__(s):
            super().__init__()
            s.emb = nn.Embedding(V, D)
            s.blocks = nn.ModuleList([Block() for _ in range(L)])
            s.n, s.out = nn.RMSNorm(D), nn.Linear(D, V, bias=False)

        def forward(s, idx):
            x = s.emb(idx)
            for b in s.blocks:
                x = b(x)
            return s.out(s.n(x))

    def make_step(m, opt, idx):
        def step():
            logits = m(idx[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, V).float(), idx[:, 1:].reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss

        return step

    for compiled in (False, True):
        torch.manual_seed(0)
        m = LM().to(where, getattr(torch, c["dtype"]))
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        step = make_step(m, opt, torch.randint(0, V, (B, T + 1), device=where))
        f = torch.compile(step) if compiled else step
        t = time.perf_counter()
        f()
        sync()
        first = time.perf_counter() - t
        for _ in range(harness.TRAIN_WARM):
            f()
        times = []
        for _ in range(harness.TRAIN_STEPS):
            t = time.perf_counter()
            f()
            sync()
            times.append(time.perf_counter() - t)
        sec = statistics.median(times)
        out.append({"workload": f"train_step_{args.train_size}",
                    "system": label("torch.compile" if compiled else "torch eager", dev),
                    "ms": sec * 1e3, "ktok_s": B * T / sec / 1e3, "first_s": first})


RUNNERS = {"kiln": run_kiln, "kiln-first-call": run_kiln_first_call, "torch": run_torch, "jax": run_jax,
           "mlx": run_mlx, "mlx-first-call": run_mlx_first_call,
           "kiln-train": run_kiln_train, "torch-train": run_torch_train, "mlx-train": run_mlx_train}
# The module each system needs; a system without it is skipped with a note.
PACKAGES = {"kiln": "kiln", "torch": "torch", "jax": "jax", "mlx": "mlx"}


def installed(system):
    package = PACKAGES[system.split("-")[0]]
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--systems", nargs="*", default=list(RUNNERS), choices=list(RUNNERS))
    p.add_argument("--workloads", nargs="*", default=None,
                   help="a subset of gelu_erf gelu_tanh silu_mul relu_chain adam mlp matmul eager")
    p.add_argument("--eager-ops", nargs="*", default=None, choices=list(EAGER_OPS), metavar="OP",
                   help="the eager single-op rows to run (all when no OP is named): "
                   + " ".join(EAGER_OPS) + "; on by default unless --workloads is given without 'eager'")
    p.add_argument("--no-eager-ops", action="store_true", help="skip the eager single-op rows")
    p.add_argument("--n", type=int, default=26, help="log2 of the elements per array")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--mlp-shape", type=int, nargs=3, default=[4096, 4096, 16384], metavar=("M", "D", "F"))
    p.add_argument("--matmul-n", type=int, default=4096)
    p.add_argument("--train-size", default="anchor", choices=["anchor", "small"])
    p.add_argument("--device", default="auto", choices=["auto", "gpu", "cpu"])
    p.add_argument("--json", default=None, help="write the rows here (rewritten after each system)")
    p.add_argument("--system-timeout", type=float, default=None,
                   help="seconds a system may run before it is stopped and noted")
    p.add_argument("--table", nargs="+", default=None, metavar="JSON",
                   help="print the table of --json files (rows of several runs merged) and exit")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)
    p.add_argument("--own-floor", action="store_true", help=argparse.SUPPRESS)  # kiln measures its copy
    args = p.parse_args()
    args.eager_ops = eager_selection(args)
    if args.table:
        rows, notes = [], []
        for path in args.table:
            with open(path) as f:
                saved = json.load(f)
            rows += saved["rows"]
            notes += saved["notes"]
        print_table(rows, argparse.Namespace(**{k: saved[k] for k in ("n", "mlp_shape", "matmul_n")}))
        for note in notes:
            print(note)
        return
    if args.one:
        out = []
        RUNNERS[args.one](args, out)
        print("JSON" + json.dumps(out))
        return
    rows, notes = [], []
    for system in args.systems:
        if not installed(system):
            notes.append(f"{system}: skipped, {PACKAGES[system.split('-')[0]]} not installed"
                         + (" (MLX-CUDA: scripts/mlx_cuda_unpack.sh)" if system.startswith("mlx") else ""))
            continue
        cmd = [sys.executable, __file__, "--one", system, "--n", str(args.n), "--reps", str(args.reps),
               "--mlp-shape", *map(str, args.mlp_shape), "--matmul-n", str(args.matmul_n),
               "--train-size", args.train_size, "--device", args.device]
        if args.workloads:
            cmd += ["--workloads", *args.workloads]
        cmd += ["--eager-ops", *args.eager_ops] if args.eager_ops else ["--no-eager-ops"]
        if system == "kiln" and not ("torch" in args.systems and installed("torch")):
            cmd.append("--own-floor")  # no torch copy rows in this run: kiln's own copy, marked
        t = time.perf_counter()
        with tempfile.TemporaryDirectory() as cache:
            # A fresh kernel cache for each system's process, so the `first call` column is a
            # cold one however often the machine ran this before (unless the caller set one).
            env = dict(os.environ)
            for var in ("KILN_CACHE_DIR", "MLX_PTX_CACHE_DIR"):
                env.setdefault(var, os.path.join(cache, var.lower()))
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.system_timeout, env=env,
                                   check=False)
            except subprocess.TimeoutExpired:
                notes.append(f"{system}: stopped after --system-timeout {args.system_timeout} s")
                continue
        lines = [line for line in r.stdout.splitlines() if line.startswith("JSON")]
        if r.returncode != 0 or not lines:
            print(f"[{system}] failed:\n{r.stderr[-3000:]}", file=sys.stderr)
            notes.append(f"{system}: failed (stderr above)")
            continue
        rows += json.loads(lines[-1][4:])
        print(f"[{system}] done in {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)
        write_json(args, rows, notes)
    print_table(rows, args)
    for note in notes:
        print(note)
    write_json(args, rows, notes)


def eager_selection(args):
    """The eager ops to run: none with --no-eager-ops; those named by --eager-ops; all of them
    with a bare --eager-ops, with no --workloads filter, or with 'eager' in it; else none."""
    if args.no_eager_ops:
        return []
    if args.eager_ops:
        return args.eager_ops
    if args.eager_ops is not None or not args.workloads or "eager" in args.workloads:
        return list(EAGER_OPS)
    return []


def write_json(args, rows, notes):
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"n": args.n, "reps": args.reps, "mlp_shape": args.mlp_shape, "matmul_n": args.matmul_n,
                       "train_size": args.train_size, "device": args.device, "rows": rows, "notes": notes},
                      f, indent=1)


def _copies(rows):
    """Copy-floor ms by byte count, from torch's copy rows (on the GPU when there), else from
    kiln's own copy (a run without torch), and the byte counts of the latter."""
    copies, own = {}, set()
    for r in rows:
        if not r["workload"].startswith("copy_"):
            continue
        if r["system"].startswith("torch"):
            if r["bytes"] in own or r["bytes"] not in copies:
                copies[r["bytes"]] = r["ms"]
                own.discard(r["bytes"])
        elif r["bytes"] not in copies:
            copies[r["bytes"]] = r["ms"]
            own.add(r["bytes"])
    return copies, own


def _floor(copies, own, r):
    """The row's floor fraction as text; '*' marks one against kiln's own copy."""
    floor = copies.get(r.get("bytes"))
    if not floor:
        return "-" if "bytes" in r else ""
    return f"{floor / r['ms']:.2f}" + ("*" if r["bytes"] in own else "")


def _torch_ref(rows, r):
    """torch's time for the row's matmul or MLP block (compiled when there is one)."""
    for mode in ("compile ", "eager ", ""):
        for t in rows:
            if t["workload"] == r["workload"] and t["system"].startswith(f"torch {mode}{r['dtype']}"):
                return t["ms"]
    return None


def print_table(rows, args):
    copies, own = _copies(rows)
    print(f"\nGPU rows, 2^{args.n} elements per array; ms per call (10 issued back to back, median of groups); "
          "floor = device copy of the same bytes / time (torch copy_; op rows: the op's own bytes); "
          "TF/s for the MLP block "
          f"{tuple(args.mlp_shape)} and matmul {args.matmul_n}^3, x torch = torch's time (torch.compile where "
          "it has one) / the row's time")
    print(f"{'workload':22s} {'system':36s} {'ms':>9s} {'floor':>6s} {'TF/s':>7s} {'x torch':>7s} {'first call':>11s}")
    for r in rows:
        if "ms" not in r or r["workload"].startswith("copy_") or r["workload"] == "first_call_extra_ms":
            continue
        frac = _floor(copies, own, r)
        tfs = f"{r['flops'] / r['ms'] / 1e9:.1f}" if "flops" in r else ""
        ref = _torch_ref(rows, r) if "flops" in r else None
        vs = f"{ref / r['ms']:.2f}" if ref else ""
        first = f"{r['first_s']:.3f} s" if "first_s" in r else ""
        if "ktok_s" in r:
            tfs = ""
            frac = ""
            vs = f"{r['ktok_s']:.0f}kt/s"
        print(f"{r['workload']:22s} {r['system']:36s} {r['ms']:9.4f} {frac:>6s} {tfs:>7s} {vs:>7s} {first:>11s}")
    for r in rows:
        if r["workload"] == "first_call_extra_ms":
            print(f"{'first call - steady':22s} {r['system']:36s} {r['ms']:9.2f} ms")
    for r in rows:
        if "us" in r:
            print(f"{'host us/call ' + r['workload'][8:]:22s} {r['system']:36s} {r['us']:9.1f} us")
    for r in rows:
        if r["workload"].startswith("copy_"):
            gbs = r["bytes"] / r["ms"] / 1e6
            what = f"{r['system']} {r['bytes'] / 2**20:.2f} MiB"
            print(f"{'copy floor':22s} {what:36s} {r['ms']:9.4f} ms "
                  f"{gbs:7.0f} GB/s")
    if any(r.get("bytes") in own for r in rows if not r["workload"].startswith("copy_")):
        print("* floor from kiln's own copy kernel (no torch copy of these bytes in the rows): only as fast "
              "as kiln's copy, so it can overstate the fraction")
    print_targets(rows)


def print_targets(rows):
    """kiln compiled against torch.compile and MLX compile per workload (issue 7's targets:
    >= 0.90 of the floor, >= 0.97 of torch.compile's speed, faster than MLX compile)."""
    copies, own = _copies(rows)
    by = {(r["workload"], r["system"]): r["ms"] for r in rows if "ms" in r}
    lines, eager = [], []
    for r in rows:
        parts = r["system"].split()
        if "bytes" not in r or parts[0] != "kiln":
            continue
        rest = " ".join(parts[2:])  # dtype, and "(cpu)" off the GPU
        if parts[1] == "compiled":
            cells = ["floor " + _floor(copies, own, r)]
            for peer in ("torch compile", "mlx compile"):
                other = by.get((r["workload"], f"{peer} {rest}"))
                cells.append(f"x {peer} {other / r['ms']:.2f}" if other else f"x {peer} -")
            lines.append(f"{r['workload']:12s} {rest:12s} " + "  ".join(cells))
        elif parts[1] == "eager" and r["workload"].startswith("op "):
            floor = copies.get(r["bytes"])
            verdict = ("ok" if floor / r["ms"] >= 0.85 else "below") if floor else "-"
            other = by.get((r["workload"], f"torch eager {rest}"))
            eager.append(f"{r['workload'][3:]:16s} {rest:12s} floor {_floor(copies, own, r):5s} vs 0.85 {verdict:5s}  "
                         + (f"x torch eager {other / r['ms']:.2f}" if other else "x torch eager -"))
    if lines:
        print("\nkiln compiled (speed ratios: > 1 = kiln faster)")
        print("\n".join(lines))
    if eager:
        print("\nkiln eager single ops (issue 7: >= 0.85 of the copy floor of their own bytes; astype's dtype is "
              "its source; > 1 = kiln faster)")
        print("\n".join(eager))


if __name__ == "__main__":
    main()
