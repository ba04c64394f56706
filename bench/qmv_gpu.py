"""One decode step's products alone: `x @ W.T` for one row of x at the llama shapes of
bench/llm.py, dense bfloat16 and 4-bit (MLX's affine layout, groups of 64), each as the
bandwidth it reaches (the weight's bytes as stored, with scales and biases, over the time a
call). Calls are issued back to back with one synchronize (so launch gaps overlap as in a
decode loop), median of --reps groups; torch's dense product in the same run with --torch.

    python3 bench/qmv_gpu.py [--model llama-8b] [--reps 20] [--torch]
    ncu --profile-from-start off --set full -o qmv python3 bench/qmv_gpu.py --ncu   # each once
    python3 bench/qmv_gpu.py --device cpu --reps 2 --model tiny                       # smoke test
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# (features, k) of a layer's products: q, k/v, o, gate/up, down, and the vocabulary head.
SHAPES = {
    "llama-8b": [(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336), (128256, 4096)],
    "llama-1b": [(2048, 2048), (512, 2048), (8192, 2048), (2048, 8192), (128256, 2048)],
    "tiny": [(256, 256), (64, 256)],
}
GROUP, BITS = 64, 4
INNER = 20


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


def kiln_rows(args):
    import kiln.core as mx

    mx.set_default_device(mx.cpu if args.device == "cpu" else mx.gpu)
    rows = []
    cases = []
    for n, k in SHAPES[args.model]:
        w = (mx.random.normal((n, k)) * 0.02).astype(mx.bfloat16)
        x = mx.random.normal((1, k)).astype(mx.bfloat16)
        wq, scales, biases = mx.quantize(w, group_size=GROUP, bits=BITS)
        mx.eval(w, x, wq, scales, biases)
        dense = lambda x=x, w=w: x @ w.T  # noqa: E731
        q4 = lambda x=x, wq=wq, s=scales, b=biases: mx.quantized_matmul(  # noqa: E731
            x, wq, s, b, transpose=True, group_size=GROUP, bits=BITS)
        q4_bytes = wq.nbytes + scales.nbytes + biases.nbytes
        cases += [(f"{n}x{k}", "bf16", dense, w.nbytes), (f"{n}x{k}", "q4", q4, q4_bytes)]
    if args.ncu:
        from cuda_profiler_range import profiler_range

        for _, _, f, _ in cases:
            mx.eval(f())
        with profiler_range():
            for _, _, f, _ in cases:
                mx.eval(f())
        return rows
    for shape, kind, f, nbytes in cases:
        sec = timed(lambda f=f: mx.async_eval(f()), mx.synchronize, args.reps)
        rows.append((shape, kind, "kiln", sec, nbytes))
    return rows


def torch_rows(args):
    import torch

    rows = []
    for n, k in SHAPES[args.model]:
        w = (torch.randn(n, k, device="cuda") * 0.02).to(torch.bfloat16)
        x = torch.randn(1, k, device="cuda").to(torch.bfloat16)
        sec = timed(lambda x=x, w=w: x @ w.T, torch.cuda.synchronize, args.reps)
        rows.append((f"{n}x{k}", "bf16", "torch", sec, w.numel() * 2))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="llama-8b", choices=list(SHAPES))
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--device", default="gpu", choices=["gpu", "cpu"])
    p.add_argument("--torch", action="store_true", help="torch's dense product beside kiln's")
    p.add_argument("--ncu", action="store_true",
                   help="each product once inside a profiler range (ncu --profile-from-start off)")
    args = p.parse_args()
    rows = kiln_rows(args)
    if args.torch and not args.ncu:
        rows += torch_rows(args)
    print(f"{'W (n x k)':<14} {'kind':<5} {'system':<6} {'us':>9} {'GB/s':>8}")
    for shape, kind, system, sec, nbytes in rows:
        print(f"{shape:<14} {kind:<5} {system:<6} {sec * 1e6:9.2f} {nbytes / sec / 1e9:8.1f}")


if __name__ == "__main__":
    main()
