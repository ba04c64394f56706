"""Decode-step products on the GPU: kiln's `quantized_matmul` (4-bit, packed weights read in
place), `gather_qmm` and `gather_mm` (a mixture of experts' step: top-k experts of many)
beside the dense bfloat16 product, in kiln and in torch, on the same GPU in one run.

    python bench/gathered_gpu.py [--reps 50]

Prints microseconds per call (median of `--reps` back-to-back calls, each synchronised), the
device time of kiln's kernels per call (`kiln.profiler`'s CUDA events around each primitive,
no launch or host time) and the effective bandwidth over the weight bytes each call must
read at that device time. The prefill rows multiply a 512-row x.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def median_us(fn, sync, reps):
    for _ in range(5):
        fn()
    sync()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def device_us(fn, reps):
    """Kiln's GPU time per call: the profiler's events around each primitive, summed."""
    import kiln.core as mx
    import kiln.profiler as kp

    fn()
    mx.synchronize()
    with kp.profile() as prof:
        for _ in range(reps):
            fn()
        mx.synchronize()
    return prof.totals()["device_us"] / reps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=50)
    a = ap.parse_args()
    import kiln.core as mx

    try:
        import torch
    except ImportError:
        torch = None
    rng = np.random.default_rng(0)
    kiln_sync = mx.synchronize
    rows = []

    def row(name, us, nbytes, torch_us=None, dev=None):
        dev = dev or us
        rows.append((name, us, nbytes / dev / 1e3, torch_us))
        t = "" if torch_us is None else f"{torch_us:10.1f}"
        print(f"{name:<44}{us:10.1f}{dev:10.1f}{nbytes / dev / 1e3:10.0f}{t}", flush=True)

    print(f"{'product (1 row)':<44}{'kiln us':>10}{'dev us':>10}{'GB/s':>10}{'torch us':>10}")
    for n, k in [(4096, 4096), (14336, 4096), (4096, 14336), (1024, 4096), (2048, 8192)]:
        w = mx.array(rng.normal(size=(n, k)).astype(np.float32)).astype(mx.bfloat16)
        q, s, b = mx.quantize(w, 64, 4)
        x = mx.array(rng.normal(size=(1, k)).astype(np.float32)).astype(mx.bfloat16)
        mx.eval(q, s, b, x, w)
        qbytes = q.nbytes + s.nbytes + b.nbytes
        for r in (1, 4):
            xr = mx.concatenate([x] * r)
            qmm = lambda: mx.eval(mx.quantized_matmul(xr, q, s, b, True, 64, 4))  # noqa: E731
            row(f"quantized_matmul 4-bit {n}x{k} {r} rows", median_us(qmm, kiln_sync, a.reps),
                qbytes, dev=device_us(qmm, a.reps))
        dense = lambda: mx.eval(x @ w.T)  # noqa: E731
        us = median_us(dense, kiln_sync, a.reps)
        tus = None
        if torch is not None and torch.cuda.is_available():
            tw = torch.tensor(np.array(w.astype(mx.float32)), device="cuda").bfloat16()
            tx = torch.tensor(np.array(x.astype(mx.float32)), device="cuda").bfloat16()
            tus = median_us(lambda: tx @ tw.T, torch.cuda.synchronize, a.reps)
        row(f"dense bf16 {n}x{k}", us, w.nbytes, tus, dev=device_us(dense, a.reps))
    # Prefill: 512 rows (dequantize blocks, then cuBLAS) against the dense bf16 product.
    for n, k in [(14336, 4096), (4096, 14336)]:
        w = mx.array(rng.normal(size=(n, k)).astype(np.float32)).astype(mx.bfloat16)
        q, s, b = mx.quantize(w, 64, 4)
        x = mx.array(rng.normal(size=(512, k)).astype(np.float32)).astype(mx.bfloat16)
        mx.eval(q, s, b, x, w)
        qmm = lambda: mx.eval(mx.quantized_matmul(x, q, s, b, True, 64, 4))  # noqa: E731
        row(f"prefill 512 rows 4-bit {n}x{k}", median_us(qmm, kiln_sync, a.reps),
            q.nbytes + s.nbytes + b.nbytes, dev=device_us(qmm, a.reps))
        dense = lambda: mx.eval(x @ w.T)  # noqa: E731
        tus = None
        if torch is not None and torch.cuda.is_available():
            tw = torch.tensor(np.array(w.astype(mx.float32)), device="cuda").bfloat16()
            tx = torch.tensor(np.array(x.astype(mx.float32)), device="cuda").bfloat16()
            tus = median_us(lambda: tx @ tw.T, torch.cuda.synchronize, a.reps)
        row(f"prefill 512 rows bf16 {n}x{k}", median_us(dense, kiln_sync, a.reps), w.nbytes, tus,
            dev=device_us(dense, a.reps))
    # A mixture of experts' decode step: 8 of 64 experts, (1408 x 2048) each.
    e, top, n, k = 64, 8, 1408, 2048
    w = mx.array(rng.normal(size=(e, n, k)).astype(np.float32)).astype(mx.bfloat16)
    q, s, b = mx.quantize(w, 64, 4)
    x = mx.array(rng.normal(size=(1, 1, 1, k)).astype(np.float32)).astype(mx.bfloat16)
    idx = mx.array(rng.choice(e, size=(1, 1, top), replace=False).astype(np.uint32))
    mx.eval(w, q, s, b, x, idx)
    per = (q.nbytes + s.nbytes + b.nbytes) // e * top
    us = median_us(lambda: mx.eval(mx.gather_qmm(x, q, s, b, rhs_indices=idx)), kiln_sync, a.reps)
    row(f"gather_qmm 4-bit {top} of {e} ({n}x{k})", us, per)
    wt = mx.swapaxes(w, -1, -2)
    us = median_us(lambda: mx.eval(mx.gather_mm(x, wt, rhs_indices=idx)), kiln_sync, a.reps)
    tus = None
    if torch is not None and torch.cuda.is_available():
        tw = torch.tensor(np.array(w.astype(mx.float32)), device="cuda").bfloat16()
        tx = torch.tensor(np.array(x.astype(mx.float32)).reshape(1, k), device="cuda").bfloat16()
        ti = torch.tensor(np.array(idx).reshape(-1).astype(np.int64), device="cuda")
        tus = median_us(lambda: torch.einsum("k,enk->en", tx[0], tw[ti]), torch.cuda.synchronize,
                        a.reps)
    row(f"gather_mm bf16 {top} of {e} ({n}x{k})", us, w.nbytes // e * top, tus)
    # Prefill through the sorted path: 512 tokens x 8 picks, sorted by expert.
    t = 512
    xs = mx.array(rng.normal(size=(t * top, 1, k)).astype(np.float32)).astype(mx.bfloat16)
    ids = mx.array(np.sort(rng.integers(0, e, size=(t * top,))).astype(np.uint32))
    mx.eval(xs, ids)
    us = median_us(lambda: mx.eval(mx.gather_qmm(xs, q, s, b, rhs_indices=ids,
                                                 sorted_indices=True)), kiln_sync, a.reps)
    row(f"gather_qmm 4-bit prefill {t}x{top} sorted", us, q.nbytes + s.nbytes + b.nbytes)


if __name__ == "__main__":
    main()
