"""mx.fast on the CPU against its composition from basic ops, in one run (issue 8's target:
every fast op at least 2x faster than its composition).

    python3 bench/fast_cpu.py                    # the default table
    python3 bench/fast_cpu.py --quick            # a few rows
    python3 bench/fast_cpu.py --mlx              # import mlx.core instead (comparison)

Attention rows: (B, H, L, D) in float32 and bfloat16, unmasked and causal (the composition
adds a -inf upper triangle), GQA with 2 kv heads; their last column is the fused kernel's rate
on the two products (`bench/cpu_peak.c` measures what the cores can do). Norm and RoPE rows on
a (4096, 4096) input.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import time

# numpy's OpenBLAS threads spin for a while after start-up and after each BLAS call, taking
# a core from the kernels measured here (measured: 0.24 against 0.12 ms per call on 2 cores).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402


def timeit(fn, mx, reps):
    for _ in range(2):
        mx.eval(fn())
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        mx.eval(fn())
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def attention_comp(mx, q, k, v, scale, mask):
    hq, hk = q.shape[1], k.shape[1]
    if hq != hk:  # GQA: repeat the kv heads
        k = mx.repeat(k, hq // hk, axis=1)
        v = mx.repeat(v, hq // hk, axis=1)
    s = (q * scale) @ mx.swapaxes(k, -1, -2)
    if mask is not None:
        s = s + mask
    return mx.softmax(s, axis=-1) @ v


def attention_rows(quick):
    shapes = [(1, 8, 128, 64), (1, 8, 512, 64), (1, 8, 1024, 64), (4, 8, 256, 128),
              (2, 8, 512, 128)]
    if quick:
        shapes = [(1, 8, 512, 64), (1, 8, 1024, 64)]
    for dtype in ("float32", "bfloat16"):
        for shape in shapes:
            for causal in (False, True):
                yield shape, shape[1], dtype, causal
        if not quick:
            yield (1, 8, 512, 64), 2, dtype, False  # GQA 8:2
            yield (1, 8, 512, 64), 2, dtype, True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mlx", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--only", choices=("attention", "norms"), default=None)
    args = ap.parse_args()
    mx = importlib.import_module("mlx.core" if args.mlx else "kiln.core")
    if args.mlx:
        mx.set_default_device(mx.cpu)
    rng = np.random.default_rng(0)
    print(f"{'row':44s} {'fast ms':>9s} {'comp ms':>9s} {'ratio':>6s} {'fast GFLOP/s':>13s}")

    def row(name, fast, comp, flops=None):
        tf, tc = timeit(fast, mx, args.reps), timeit(comp, mx, args.reps)
        rate = f"{flops / tf / 1e9:13.0f}" if flops else ""
        print(f"{name:44s} {tf * 1e3:9.2f} {tc * 1e3:9.2f} {tc / tf:6.2f} {rate}", flush=True)

    if args.only != "norms":
        for (b, h, length, d), hk, dtype, causal in attention_rows(args.quick):
            dt = getattr(mx, dtype)
            q = mx.array(rng.standard_normal((b, h, length, d), dtype=np.float32)).astype(dt)
            k, v = (mx.array(rng.standard_normal((b, hk, length, d), dtype=np.float32)).astype(dt)
                    for _ in range(2))
            scale = d**-0.5
            mask = None
            if causal:
                keep = np.arange(length)[None, :] <= np.arange(length)[:, None]
                mask = mx.array(np.where(keep, 0, -np.inf).astype(np.float32)).astype(dt)
            mx.eval(q, k, v)
            fast = lambda: mx.fast.scaled_dot_product_attention(  # noqa: E731
                q, k, v, scale=scale, mask="causal" if causal else None)
            comp = lambda: attention_comp(mx, q, k, v, scale, mask)  # noqa: E731
            name = f"attention {dtype} {(b, h, length, d)} kv{hk}{' causal' if causal else ''}"
            # The products' multiply-adds (2 flops each); causal attention does about half.
            flops = 4 * b * h * length * length * d * (0.5 if causal else 1.0)
            row(name, fast, comp, flops)
    if args.only != "attention":
        for dtype in ("float32", "bfloat16"):
            dt = getattr(mx, dtype)
            x = mx.array(rng.standard_normal((4096, 4096), dtype=np.float32)).astype(dt)
            w = mx.array(rng.standard_normal((4096,), dtype=np.float32)).astype(dt)
            bias = mx.array(rng.standard_normal((4096,), dtype=np.float32)).astype(dt)
            mx.eval(x, w, bias)

            def ln_comp():
                xf = x.astype(mx.float32)
                mu = xf.mean(axis=-1, keepdims=True)
                xc = xf - mu
                y = xc * mx.rsqrt((xc * xc).mean(axis=-1, keepdims=True) + 1e-5)
                return (y.astype(dt) * w + bias)

            def rms_comp():
                xf = x.astype(mx.float32)
                y = xf * mx.rsqrt((xf * xf).mean(axis=-1, keepdims=True) + 1e-5)
                return y.astype(dt) * w

            row(f"layer_norm {dtype} (4096, 4096)",
                lambda: mx.fast.layer_norm(x, w, bias, 1e-5), ln_comp)
            row(f"rms_norm {dtype} (4096, 4096)", lambda: mx.fast.rms_norm(x, w, 1e-5), rms_comp)
            xr = x.reshape(1, 32, 512, 1024)[:, :, :, :128]
            xr = mx.array(np.asarray(xr.astype(mx.float32))).astype(dt)
            mx.eval(xr)

            def rope_comp(d=128, base=10000.0):
                half = d // 2
                inv = mx.exp(-mx.arange(0, half, dtype=mx.float32) * (np.log(base) / half))
                theta = mx.arange(512, dtype=mx.float32)[:, None] * inv[None, :]
                c, s = mx.cos(theta), mx.sin(theta)
                x1, x2 = xr[..., :half], xr[..., half:]
                return mx.concatenate([x1 * c - x2 * s, x1 * s + x2 * c], axis=-1).astype(dt)

            row(f"rope {dtype} (1, 32, 512, 128)",
                lambda: mx.fast.rope(xr, 128, traditional=False, base=10000.0, scale=1.0,
                                     offset=0), rope_comp)


if __name__ == "__main__":
    main()
