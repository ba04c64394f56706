"""logsumexp over a decode step's row of logits on the GPU: the fused LogSumExp primitive
against the composition it replaced (max, subtract, exp, sum, log, add, abs, equal, where),
eager and compiled, for mlx-lm's two forms: `logits - logsumexp(logits, axis=-1,
keepdims=True)` and `logsumexp(logits, keepdims=True)`; and the kernels each runs (from
kiln.profiler), optionally next to torch.

    python bench/logsumexp_gpu.py [--vocab 128256] [--rows 1] [--reps 15] [--torch] [--device cpu]

Time per call: 50 calls issued back to back with one synchronize, divided by 50, median of
--reps."""

import argparse
import statistics
import time

import kiln.core as mx
import numpy as np


def composed(x, axis=None, keepdims=False):
    m = mx.stop_gradient(mx.max(x, axis=axis, keepdims=True))
    out = mx.log(mx.sum(mx.exp(x - m), axis=axis, keepdims=True)) + m
    out = mx.where(mx.abs(m) == float("inf"), m, out)
    return out if keepdims else mx.squeeze(out, axis=axis)


def timed(call, sync, reps, inner=50):
    call()
    sync()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(inner):
            call()
        sync()
        times.append((time.perf_counter() - t) / inner)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--vocab", type=int, default=128256)
    p.add_argument("--rows", type=int, default=1)
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--torch", action="store_true")
    p.add_argument("--device", default="gpu", choices=["gpu", "cpu"])
    args = p.parse_args()
    mx.set_default_device(getattr(mx, args.device))
    rng = np.random.default_rng(0)
    x32 = (rng.standard_normal((args.rows, args.vocab)) * 4).astype(np.float32)
    forms = {
        "log_probs": (lambda x: x - mx.logsumexp(x, axis=-1, keepdims=True),
                      lambda x: x - composed(x, axis=-1, keepdims=True)),
        "lse_all": (lambda x: mx.logsumexp(x, keepdims=True),
                    lambda x: composed(x, keepdims=True)),
    }  # fmt: skip
    print(f"rows {args.rows} x vocab {args.vocab}; microseconds per call")
    print(f"{'form':<10} {'dtype':<9} {'mode':<8} {'fused':>8} {'composed':>9} {'ratio':>6}")
    for dname in ("bfloat16", "float32"):
        x = mx.array(x32).astype(getattr(mx, dname))
        mx.eval(x)
        for form, (fused, comp) in forms.items():
            for mode in ("eager", "compile"):
                fa, fb = (fused, comp) if mode == "eager" else (mx.compile(fused), mx.compile(comp))
                ta = timed(lambda: mx.async_eval(fa(x)), mx.synchronize, args.reps)
                tb = timed(lambda: mx.async_eval(fb(x)), mx.synchronize, args.reps)
                print(f"{form:<10} {dname:<9} {mode:<8} {ta * 1e6:8.1f} {tb * 1e6:9.1f} "
                      f"{tb / ta:6.2f}")  # fmt: skip
            # The values agree.
            a = np.array(fused(x).astype(mx.float32))
            b = np.array(comp(x).astype(mx.float32))
            np.testing.assert_allclose(a, b, rtol=2e-2, atol=2e-2)
    import kiln.profiler

    x = mx.array(x32).astype(mx.bfloat16)
    for label, f in [("fused", forms["log_probs"][0]), ("composed", forms["log_probs"][1])]:
        mx.eval(f(x))
        with kiln.profiler.profile() as prof:
            mx.eval(f(x))
        print(f"\n{label} log_probs, bfloat16, eager: the calls of one step")
        print(prof.key_averages().table(sort_by="host_time_total", row_limit=20))
    if args.torch:
        import torch

        for dname in ("bfloat16", "float32"):
            t = torch.tensor(x32, device="cuda").to(getattr(torch, dname))
            for form, f in [("log_probs", lambda t: t - torch.logsumexp(t, -1, keepdim=True)),
                            ("lse_all", lambda t: torch.logsumexp(t.reshape(-1), 0))]:  # fmt: skip
                sec = timed(lambda: f(t), torch.cuda.synchronize, args.reps)
                print(f"torch {form:<10} {dname:<9} {sec * 1e6:8.1f} us")


if __name__ == "__main__":
    main()
