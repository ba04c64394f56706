"""Packed half-precision kernels on the GPU: the five workloads of bench/gpu.py compiled, in
bfloat16 and float16 at 2^--n elements, with packing on and off (KILN_CUDA_PACKED=0 is read once
per process, so each setting runs in its own child process), optionally next to torch.compile.

    python bench/packed_half_gpu.py [--n 26] [--reps 15] [--torch] [--json out.json]

Time per call: 10 calls issued back to back with one synchronize, divided by 10 (as the
harness), median of --reps; GB/s counts each input and output once."""

import argparse
import json
import os
import subprocess
import sys

from gpu import timed, workloads  # the harness's workloads and timing (same folder)

DTYPES = ("bfloat16", "float16")


def inputs_f32(n, count, seed):
    import numpy as np

    rng = np.random.default_rng(seed)
    return [np.abs(rng.standard_normal(n, dtype=np.float32)) + 0.1 for _ in range(count)]


def run_kiln(args):
    """Child: one row per workload and dtype, as JSON lines on stdout."""
    import kiln.core as mx

    mx.set_default_device(mx.gpu)
    n = 1 << args.n
    wls = workloads(mx.maximum, mx.tanh, mx.erf, mx.sigmoid, mx.sqrt)
    for dname in DTYPES:
        dt = getattr(mx, dname)
        for name, (nin, nout, f) in wls.items():
            xs = [mx.array(x).astype(dt) for x in inputs_f32(n, nin, 0)]
            mx.eval(*xs)
            g = mx.compile(f)

            def call(g=g, xs=xs):
                mx.async_eval(g(*xs))

            sec = timed(call, mx.synchronize, args.reps)
            print(json.dumps({"workload": name, "dtype": dname, "ms": sec * 1e3,
                              "bytes": (nin + nout) * n * 2}), flush=True)
            del xs
            mx.clear_cache()


def run_torch(args):
    import torch

    n = 1 << args.n
    wls = workloads(lambda a, b: torch.clamp_min(a, b), torch.tanh, torch.erf, torch.sigmoid, torch.sqrt)
    rows = []
    for dname in DTYPES:
        dt = getattr(torch, dname)
        for name, (nin, nout, f) in wls.items():
            xs = [torch.from_numpy(x).to("cuda", dt) for x in inputs_f32(n, nin, 0)]
            g = torch.compile(f)
            sec = timed(lambda g=g, xs=xs: g(*xs), torch.cuda.synchronize, args.reps)
            rows.append({"workload": name, "dtype": dname, "ms": sec * 1e3, "bytes": (nin + nout) * n * 2})
            del xs
    return rows


def child(packed, args):
    env = dict(os.environ, KILN_CUDA_PACKED=packed)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--n", str(args.n), "--reps", str(args.reps)]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=26, help="log2 of the elements per array")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--torch", action="store_true", help="also time torch.compile")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        run_kiln(args)
        return
    on, off = child("1", args), child("0", args)
    ref = run_torch(args) if args.torch else []
    key = lambda r: (r["workload"], r["dtype"])
    off_ms = {key(r): r["ms"] for r in off}
    torch_ms = {key(r): r["ms"] for r in ref}
    head = f"{'workload':<11} {'dtype':<9} {'packed ms':>9} {'GB/s':>6} {'per-elem ms':>11} {'GB/s':>6} {'speedup':>7}"
    if ref:
        head += f" {'torch ms':>8} {'vs torch':>8}"
    print(f"2^{args.n} elements, compiled, 10 calls back to back / 10, median of {args.reps}")
    print(head)
    for r in on:
        k = key(r)
        gbs = lambda ms, r=r: r["bytes"] / (ms * 1e-3) / 1e9
        line = (f"{r['workload']:<11} {r['dtype']:<9} {r['ms']:>9.3f} {gbs(r['ms']):>6.0f} "
                f"{off_ms[k]:>11.3f} {gbs(off_ms[k]):>6.0f} {off_ms[k] / r['ms']:>7.2f}")
        if k in torch_ms:
            # Speed relative to torch.compile: above 1 is faster than torch.
            line += f" {torch_ms[k]:>8.3f} {torch_ms[k] / r['ms']:>8.2f}"
        print(line)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"packed": on, "per_element": off, "torch_compile": ref}, fh, indent=1)


if __name__ == "__main__":
    main()
