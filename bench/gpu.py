"""GPU rows of the benchmark harness (DESIGN.md section 7): kiln eager and compiled, torch
eager and torch.compile, jax.jit, on the five elementwise workloads of PEERS.md at 2^26
elements (fp32 and bf16), a transformer MLP block, host time per call on 1024 elements and
kiln's first-call compile time, and the training step of bench/harness.py at
shared/bench/train_anchors.py's size (kiln eager and compiled, torch eager and torch.compile),
each system in its own process, one table.

    python3 bench/gpu.py                         # every installed system
    python3 bench/gpu.py --systems kiln torch --n 26 --reps 20
    python3 bench/gpu.py --systems kiln-train torch-train   # the training-step rows only

Workload times: 10 calls issued back to back, one synchronize, divided by 10 (host and device
overlap as in real use), median of --reps such groups. The floor of each row is a device copy
of the same number of bytes (torch's `copy_`, measured in the same run); `floor` is that
copy's time over the row's time.
"""

from __future__ import annotations

import argparse
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


def run_kiln(args, out):
    import numpy as np
    import kiln.core as mx

    assert mx.default_device() == mx.gpu, "kiln found no GPU"
    n = 1 << args.n
    wls = workloads(mx.maximum, mx.tanh, mx.erf, mx.sigmoid, mx.sqrt)
    rng = np.random.default_rng(0)
    for dtype_name, dtype in (("fp32", mx.float32), ("bf16", mx.bfloat16)):
        for name, (nin, nout, f) in wls.items():
            if args.workloads and name not in args.workloads:
                continue
            xs = [mx.array(np.abs(rng.standard_normal(n, dtype=np.float32)) + 0.1).astype(dtype) for _ in range(nin)]
            mx.eval(*xs)
            for label, g in (("eager", f), ("compiled", mx.compile(f))):
                def call(g=g):
                    r = g(*xs)
                    mx.async_eval(r)
                first = time.perf_counter()
                mx.eval(g(*xs))
                first = time.perf_counter() - first
                sec = timed(call, mx.synchronize, args.reps)
                out.append({"workload": name, "system": f"kiln {label} {dtype_name}", "ms": sec * 1e3,
                            "bytes": (nin + nout) * n * dtype.size, "first_s": first})
            del xs
            mx.clear_cache()
    small = [mx.ones((1024,)) for _ in range(2)]
    f = mx.compile(wls["silu_mul"][2])
    for each in (False, True):
        def call():
            mx.async_eval(f(*small))
        us = host_time(call, mx.synchronize, each) * 1e6
        out.append({"workload": "host_us_silu_1024", "system": "kiln compiled" + (" eval each" if each else " back to back"), "us": us})


def run_torch(args, out):
    import torch

    n = 1 << args.n
    sync = torch.cuda.synchronize
    # The floor of a row moving B bytes: copying B / 2 bytes (read + write = B).
    x = torch.randint(0, 255, (n * 14,), dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    for k in (4, 6, 8, 12, 14, 16, 28):
        src, dst = x[: n * k // 2], y[: n * k // 2]
        sec = timed(lambda: dst.copy_(src), sync, args.reps)
        out.append({"workload": f"copy_{k}n_bytes", "system": "torch", "ms": sec * 1e3, "bytes": n * k})
    del x, y
    wls = workloads(torch.clamp_min, torch.tanh, torch.erf, torch.sigmoid, torch.sqrt)
    wls["relu_chain"] = (3, 1, lambda x, y, z: torch.relu(x * y + z) * 0.5 + x)
    for dtype_name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        for name, (nin, nout, f) in wls.items():
            if args.workloads and name not in args.workloads:
                continue
            xs = [(torch.randn(n, device="cuda").abs() + 0.1).to(dtype) for _ in range(nin)]
            for label, g in (("eager", f), ("compile", torch.compile(f))):
                first = time.perf_counter()
                g(*xs)
                sync()
                first = time.perf_counter() - first
                sec = timed(lambda g=g: g(*xs), sync, args.reps)
                out.append({"workload": name, "system": f"torch {label} {dtype_name}", "ms": sec * 1e3,
                            "bytes": (nin + nout) * n * (4 if dtype_name == "fp32" else 2), "first_s": first})
    small = [torch.ones(1024, device="cuda") for _ in range(2)]
    f = torch.compile(wls["silu_mul"][2])
    for each in (False, True):
        us = host_time(lambda: f(*small), sync, each) * 1e6
        out.append({"workload": "host_us_silu_1024", "system": "torch.compile" + (" eval each" if each else " back to back"), "us": us})


def run_jax(args, out):
    import jax
    import jax.numpy as jnp
    from jax.scipy.special import erf

    n = 1 << args.n
    wls = workloads(jnp.maximum, jnp.tanh, erf, jax.nn.sigmoid, jnp.sqrt)
    key = jax.random.PRNGKey(0)
    for dtype_name, dtype in (("fp32", jnp.float32), ("bf16", jnp.bfloat16)):
        for name, (nin, nout, f) in wls.items():
            if args.workloads and name not in args.workloads:
                continue
            xs = [(jnp.abs(jax.random.normal(jax.random.fold_in(key, i), (n,))) + 0.1).astype(dtype) for i in range(nin)]
            jf = jax.jit(f)
            last = [None]

            def call():
                last[0] = jf(*xs)

            def sync():
                jax.block_until_ready(last[0])

            first = time.perf_counter()
            jax.block_until_ready(jf(*xs))
            first = time.perf_counter() - first
            sec = timed(call, sync, args.reps)
            out.append({"workload": name, "system": f"jax.jit {dtype_name}", "ms": sec * 1e3,
                        "bytes": (nin + nout) * n * (4 if dtype_name == "fp32" else 2), "first_s": first})


def run_kiln_first_call(args, out):
    """First call of a compiled function in fresh processes: cold disk cache, then warm."""
    code = (
        "import time, kiln.core as mx\n"
        "x = mx.ones((1024,)); mx.eval(x)\n"
        "f = mx.compile(lambda a: a * mx.sigmoid(a) * 1.5 + 0.25)\n"
        "t = time.perf_counter(); mx.eval(f(x)); first = time.perf_counter() - t\n"
        "t = time.perf_counter(); mx.eval(f(x)); steady = time.perf_counter() - t\n"
        "print(first - steady)\n"
    )
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, KILN_CACHE_DIR=cache)
        for label in ("cold", "warm"):
            r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
            if r.returncode == 0:
                out.append({"workload": "first_call_extra_ms", "system": f"kiln compiled {label} disk cache",
                            "ms": float(r.stdout.strip()) * 1e3})
            else:
                print(r.stderr, file=sys.stderr)


def run_kiln_train(args, out):
    """The harness's train_step at train_anchors.py's size, uncompiled and compiled."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import harness

    harness.TRAIN_SIZE = "anchor"
    for compiled in (False, True):
        r = harness.train_step_bench("kiln", compiled)
        out.append({"workload": "train_step", "system": "kiln compiled" if compiled else "kiln eager",
                    "ms": r["sec"] * 1e3, "first_s": r["first"]})


def run_torch_train(args, out):
    """The same model and step in torch: eager and torch.compile (AdamW, bf16 parameters,
    cross-entropy in float32), timed as the harness times kiln's."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import harness

    c = harness.TRAIN_SIZES["anchor"]
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

    for compiled in (False, True):
        torch.manual_seed(0)
        m = LM().cuda().bfloat16()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        idx = torch.randint(0, V, (B, T + 1), device="cuda")

        def step():
            logits = m(idx[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, V).float(), idx[:, 1:].reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss

        f = torch.compile(step) if compiled else step
        t = time.perf_counter()
        f()
        torch.cuda.synchronize()
        first = time.perf_counter() - t
        for _ in range(harness.TRAIN_WARM):
            f()
        times = []
        for _ in range(harness.TRAIN_STEPS):
            t = time.perf_counter()
            f()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
        out.append({"workload": "train_step", "system": "torch.compile" if compiled else "torch eager",
                    "ms": statistics.median(times) * 1e3, "first_s": first})


RUNNERS = {"kiln": run_kiln, "kiln-first-call": run_kiln_first_call, "torch": run_torch, "jax": run_jax,
           "kiln-train": run_kiln_train, "torch-train": run_torch_train}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--systems", nargs="*", default=list(RUNNERS))
    p.add_argument("--workloads", nargs="*", default=None)
    p.add_argument("--n", type=int, default=26)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--json", default=None)
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        out = []
        RUNNERS[args.one](args, out)
        print("JSON" + json.dumps(out))
        return
    rows = []
    for system in args.systems:
        cmd = [sys.executable, __file__, "--one", system, "--n", str(args.n), "--reps", str(args.reps)]
        if args.workloads:
            cmd += ["--workloads", *args.workloads]
        r = subprocess.run(cmd, capture_output=True, text=True)
        lines = [l for l in r.stdout.splitlines() if l.startswith("JSON")]
        if r.returncode != 0 or not lines:
            print(f"[{system}] failed:\n{r.stderr[-3000:]}", file=sys.stderr)
            continue
        rows += json.loads(lines[-1][4:])
    print_table(rows, args.n)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


def print_table(rows, n):
    copies = {r["bytes"]: r["ms"] for r in rows if r["workload"].startswith("copy_")}
    print(f"\nGPU rows, 2^{n} elements per array; ms per call (10 issued back to back, median); "
          "floor = device copy of the same bytes / time")
    print(f"{'workload':22s} {'system':32s} {'ms':>9s} {'floor':>6s} {'first call':>11s}")
    for r in rows:
        if "ms" not in r or r["workload"].startswith("copy_") or r["workload"] == "first_call_extra_ms":
            continue
        floor = copies.get(r.get("bytes"))
        frac = f"{floor / r['ms']:.2f}" if floor else "-"
        first = f"{r['first_s']:.3f} s" if "first_s" in r else ""
        print(f"{r['workload']:22s} {r['system']:32s} {r['ms']:9.4f} {frac:>6s} {first:>11s}")
    for r in rows:
        if r["workload"] == "first_call_extra_ms":
            print(f"{'first call extra':22s} {r['system']:32s} {r['ms']:9.2f} ms")
        if "us" in r:
            print(f"{'host us/call silu 1024':22s} {r['system']:32s} {r['us']:9.1f} us")


if __name__ == "__main__":
    main()
