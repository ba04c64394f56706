"""Quantized products of a few rows on the CPU (`quantized_matmul`, transpose=True, the
decode path), kiln beside MLX (CPU) in the same run: microseconds a call (min over --reps
groups of 10 calls) and the packed weights' GB/s (words, scales and biases over the time).

    python3 bench/qmv_cpu.py [--dtype float32|bfloat16] [--bits 4 8] [--rows 1 4] [--no-mlx]
    KILN_SIMD=avx2 python3 bench/qmv_cpu.py      # kiln's AVX2 copy of its kernels
"""

from __future__ import annotations

import argparse
import time

import numpy as np

SHAPES = [(2048, 2048), (4096, 4096), (8192, 2048)]


def seconds(mx, call, reps):
    for _ in range(3):
        mx.eval(call())
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(10):
            mx.eval(call())
        best = min(best, (time.perf_counter() - t) / 10)
    return best


def case(mx, n, k, bits, rows, dtype, group, reps):
    rng = np.random.default_rng(0)
    dt = getattr(mx, dtype)
    w = mx.array((rng.normal(size=(n, k)) * 0.02).astype(np.float32)).astype(dt)
    x = mx.array(rng.normal(size=(rows, k)).astype(np.float32)).astype(dt)
    wq, s, b = mx.quantize(w, group_size=group, bits=bits)
    mx.eval(wq, s, b, x)
    sec = seconds(mx, lambda: mx.quantized_matmul(x, wq, s, b, transpose=True, group_size=group,
                                                  bits=bits), reps)
    return sec, wq.nbytes + s.nbytes + b.nbytes


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--bits", type=int, nargs="+", default=[4, 8])
    p.add_argument("--rows", type=int, nargs="+", default=[1, 4])
    p.add_argument("--group", type=int, default=64)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--no-mlx", action="store_true")
    args = p.parse_args()
    import kiln.core as kx

    systems = [("kiln", kx)]
    if not args.no_mlx:
        try:
            import mlx.core as mlx

            systems.append(("mlx", mlx))
        except ImportError:
            pass
    for _, m in systems:
        m.set_default_device(m.cpu)
    print(f"{'W (n x k)':<11} {'bits':>4} {'rows':>4} " +
          " ".join(f"{name + ' us':>10} {'GB/s':>6}" for name, _ in systems) +
          ("   mlx/kiln" if len(systems) > 1 else ""))
    for n, k in SHAPES:
        for bits in args.bits:
            for rows in args.rows:
                times = [case(m, n, k, bits, rows, args.dtype, args.group, args.reps)
                         for _, m in systems]
                line = " ".join(f"{sec * 1e6:10.1f} {nb / sec / 1e9:6.2f}" for sec, nb in times)
                ratio = f"   {times[1][0] / times[0][0]:8.2f}x" if len(times) > 1 else ""
                print(f"{n}x{k:<6} {bits:>4} {rows:>4} {line}{ratio}", flush=True)


if __name__ == "__main__":
    main()
