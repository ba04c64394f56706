"""The norms' backward on the CPU: kiln's fused `layer_norm_vjp`/`rms_norm_vjp` (the vjp
of mx.fast.layer_norm / rms_norm) against the vjp of the same norm written with basic ops
(what autodiff differentiates without the fused primitive), eager and compiled.

    python3 bench/norm_vjp_cpu.py [--reps 20]

Prints the median milliseconds of one vjp (gradients of x, weight and bias) and the ratio.
"""

import argparse
import statistics
import time

import numpy as np

import kiln.core as mx

SHAPES = [(4096, 512), (256, 4096), (64, 64)]


def composed_layer_norm(x, w, b):
    dt = x.dtype
    xf = x.astype(mx.float32)
    c = xf - mx.mean(xf, axis=-1, keepdims=True)
    return (c * mx.rsqrt(mx.mean(c * c, axis=-1, keepdims=True) + 1e-5) * w + b).astype(dt)


def composed_rms_norm(x, w):
    dt = x.dtype
    xf = x.astype(mx.float32)
    return (xf * mx.rsqrt(mx.mean(xf * xf, axis=-1, keepdims=True) + 1e-5) * w).astype(dt)


def timed(fn, reps):
    mx.eval(fn())
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        mx.eval(fn())
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=20)
    args = p.parse_args()
    mx.set_default_device(mx.cpu)
    rng = np.random.default_rng(0)
    print(f"{'norm':<11} {'shape':<12} {'dtype':<9} {'mode':<8} {'fused ms':>9} {'comp ms':>9} {'comp/fused':>10}")
    for shape in SHAPES:
        for dt in (mx.float32, mx.bfloat16):
            x = mx.array(rng.standard_normal(shape, dtype=np.float32)).astype(dt)
            g = mx.array(rng.standard_normal(shape, dtype=np.float32)).astype(dt)
            w = mx.array(rng.standard_normal(shape[-1:], dtype=np.float32)).astype(dt)
            b = mx.array(rng.standard_normal(shape[-1:], dtype=np.float32)).astype(dt)
            mx.eval(x, g, w, b)
            cases = [
                ("layer_norm", lambda x, w, b: mx.fast.layer_norm(x, w, b, 1e-5), composed_layer_norm, [x, w, b]),
                ("rms_norm", lambda x, w: mx.fast.rms_norm(x, w, 1e-5), composed_rms_norm, [x, w]),
            ]
            for name, fast, comp, prims in cases:
                for mode in ("eager", "compile"):
                    def vjp_of(f):
                        fn = lambda *p: mx.vjp(f, list(p), [g])[1]  # noqa: E731
                        return mx.compile(fn) if mode == "compile" else fn
                    vf, vc = vjp_of(fast), vjp_of(comp)
                    tf = timed(lambda: vf(*prims), args.reps)
                    tc = timed(lambda: vc(*prims), args.reps)
                    print(f"{name:<11} {str(shape):<12} {str(dt).split('.')[-1]:<9} {mode:<8} "
                          f"{tf * 1e3:9.3f} {tc * 1e3:9.3f} {tc / tf:10.2f}")


if __name__ == "__main__":
    main()
