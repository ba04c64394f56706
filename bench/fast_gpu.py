"""mx.fast on the GPU beside torch, one run: layer_norm and rms_norm on (8192, 8192) and
(32, 1024, 4096), rope on (8, 32, 2048, 128), attention forward on (8, 16, 2048, 128) and
(8, 16, 2048, 64) causal and not, in bf16 (and fp32 for the norms); the norms' backward
(`--only norm_bwd`: kiln's fused `layer_norm_vjp`/`rms_norm_vjp` beside torch's autograd of
F.layer_norm / F.rms_norm, gradients of x, weight and bias); attention's backward
(`--only attention-bwd`, on (8, 16, 2048, 128): the time of forward and backward, compiled in
kiln, minus the forward's; TFLOP/s at 2.5 times the forward's FLOPs).

    python3 bench/fast_gpu.py                 # kiln and, where installed, torch
    python3 bench/fast_gpu.py --reps 10 --only norm attention
    KILN_CUDA_ATTENTION=simple python3 bench/fast_gpu.py --only attention   # the simple path

Times: 10 calls issued back to back, one synchronize, divided by 10; median of --reps such
groups. Norm and rope rows print GB/s (bytes read + written) and `floor`: the time of a
device-to-device copy of the same bytes (torch's `copy_` when torch is installed, else a
kiln elementwise negate of the input) over the row's time; backward rows move x, g and dx,
so their floor is an elementwise add of two inputs (`copy floor 3x`). Attention rows print TFLOP/s
(4 B H Lq Lk D, halved under the causal mask) and the ratio to torch's flash backend
(`torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION)`). torch rows are skipped
cleanly where torch (or CUDA in it) is missing. MLX-CUDA's rows (`mlx`, MLX's own kernels:
cuDNN attention where it uses it) come from a process of their own, skipped where `import
mlx.core` fails; kiln rows print their speed over MLX's as `mlx x.xx`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import time

INNER = 10


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


NORM_SHAPES = [(8192, 8192), (32, 1024, 4096)]
ROPE_SHAPE = (8, 32, 2048, 128)
ATTN_SHAPES = [(8, 16, 2048, 128), (8, 16, 2048, 64)]


# kiln's default attention kernels (on sm_90 the wgmma kernel's persistent form, pingpong
# under the causal mask), then with --hopper the mma.sync kernels (off) and the wgmma
# kernel's other forms.
HOPPER_SYSTEMS = (("kiln", None), ("kiln mma", "off"), ("kiln hopper cp", "cp"),
                  ("kiln hopper ws", "ws"), ("kiln pingpong", "pingpong"))


@contextlib.contextmanager
def kernel_choice(value):
    """KILN_HOPPER_ATTN set to `value` inside the block (unchanged for None)."""
    before = os.environ.get("KILN_HOPPER_ATTN")
    if value is not None:
        os.environ["KILN_HOPPER_ATTN"] = value
    try:
        yield
    finally:
        if value is not None:
            if before is None:
                del os.environ["KILN_HOPPER_ATTN"]
            else:
                os.environ["KILN_HOPPER_ATTN"] = before


def load_torch():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def kiln_rows(args, rows, mx=None, name="kiln"):
    """The rows of one mlx.core-shaped API: kiln's, or MLX-CUDA's (`mlx_rows`)."""
    import numpy as np

    if mx is None:
        import kiln.core as mx
    if not mx.is_available(mx.gpu):
        print(f"{name} found no GPU; nothing to time")
        return
    # MLX has one attention kernel choice; kiln's others come with --hopper.
    systems = HOPPER_SYSTEMS if name == "kiln" else ((name, None),)
    mx.set_default_device(mx.gpu)
    rng = np.random.default_rng(0)
    dtypes = {"bf16": mx.bfloat16, "fp32": mx.float32}

    def run(fn, *xs):
        def call():
            mx.async_eval(fn(*xs))
        return timed(call, mx.synchronize, args.reps)

    def randn(shape, dtype):
        return mx.array(rng.standard_normal(shape, dtype=np.float32)).astype(dtype)

    if "norm" in args.only:
        for shape in NORM_SHAPES:
            for dn, dt in dtypes.items():
                x, w, b = randn(shape, dt), randn(shape[-1:], dt), randn(shape[-1:], dt)
                mx.eval(x, w, b)
                nbytes = 2 * x.size * x.itemsize
                rows.append(("copy floor", shape, dn, f"{name} negate", run(mx.negative, x), nbytes))
                rows.append(("layer_norm", shape, dn, name,
                             run(lambda x: mx.fast.layer_norm(x, w, b, 1e-5), x), nbytes))
                rows.append(("rms_norm", shape, dn, name,
                             run(lambda x: mx.fast.rms_norm(x, w, 1e-5), x), nbytes))
                del x
                mx.clear_cache()
    if "norm_bwd" in args.only:
        for shape in NORM_SHAPES:
            for dn, dt in dtypes.items():
                x, g = randn(shape, dt), randn(shape, dt)
                w, b = randn(shape[-1:], dt), randn(shape[-1:], dt)
                mx.eval(x, g, w, b)
                nbytes = 3 * x.size * x.itemsize
                rows.append(("copy floor 3x", shape, dn, f"{name} add", run(mx.add, x, g), nbytes))
                ln = lambda x, w, b: mx.fast.layer_norm(x, w, b, 1e-5)  # noqa: E731
                rms = lambda x, w: mx.fast.rms_norm(x, w, 1e-5)  # noqa: E731
                for wname, f, prims in (("layer_norm bwd", ln, [w, b]), ("rms_norm bwd", rms, [w])):
                    def grads(x, g, f=f, prims=prims):
                        return mx.vjp(f, [x, *prims], [g])[1]
                    rows.append((wname, shape, dn, name, run(grads, x, g), nbytes))
                del x, g
                mx.clear_cache()
    if "rope" in args.only:
        x = randn(ROPE_SHAPE, mx.bfloat16)
        mx.eval(x)
        nbytes = 2 * x.size * x.itemsize
        for trad in (False, True):
            f = lambda x, t=trad: mx.fast.rope(x, 128, traditional=t, base=1e4, scale=1.0, offset=7)  # noqa: E731
            rows.append(("rope" + (" trad" if trad else ""), ROPE_SHAPE, "bf16", name, run(f, x), nbytes))
        del x
        mx.clear_cache()
    if "attention" in args.only:
        for shape in ATTN_SHAPES:
            b, h, l, d = shape
            q, k, v = (randn(shape, mx.bfloat16) for _ in range(3))
            mx.eval(q, k, v)
            for system, kernel in systems:
                if kernel and not args.hopper:
                    continue
                for causal in (False, True):
                    f = lambda q, k, v, c=causal: mx.fast.scaled_dot_product_attention(  # noqa: E731
                        q, k, v, scale=1 / math.sqrt(d), mask="causal" if c else None)
                    flops = 4 * b * h * l * l * d / (2 if causal else 1)
                    with kernel_choice(kernel):
                        t = run(f, q, k, v)
                    rows.append(("attention" + (" causal" if causal else ""), shape, "bf16", system,
                                 t, -flops))
            del q, k, v
            mx.clear_cache()
    if "attention-bwd" in args.only:
        for shape in ATTN_SHAPES[:1]:
            b, h, l, d = shape
            q, k, v, do = (randn(shape, mx.bfloat16) for _ in range(4))
            mx.eval(q, k, v, do)
            for system, kernel in systems:
                if kernel and not args.hopper:
                    continue
                for causal in (False, True):
                    def fwd(q, k, v, c=causal):
                        return mx.fast.scaled_dot_product_attention(
                            q, k, v, scale=1 / math.sqrt(d), mask="causal" if c else None)
                    fb = mx.compile(lambda q, k, v, do: mx.vjp(fwd, [q, k, v], [do])[1])
                    with kernel_choice(kernel):
                        t = run(fb, q, k, v, do) - run(fwd, q, k, v)
                    flops = 2.5 * 4 * b * h * l * l * d / (2 if causal else 1)
                    rows.append(("attention bwd" + (" causal" if causal else ""), shape, "bf16",
                                 system, t, -flops))
            del q, k, v, do
            mx.clear_cache()


def mlx_rows(args, rows):
    """MLX-CUDA's rows, in a process of their own (its CUDA runtime apart from kiln's and
    torch's): this script again with --mlx-worker, its rows back as JSON."""
    cmd = [sys.executable, os.path.abspath(__file__), "--mlx-worker", "--reps", str(args.reps),
           "--only", *args.only]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.mlx_timeout)
    except subprocess.TimeoutExpired:
        print(f"MLX-CUDA rows timed out after {args.mlx_timeout} s: skipped")
        return
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines or not lines[-1].startswith("["):
        why = (done.stderr.strip().splitlines() or lines or ["no output"])[-1]
        print(f"MLX-CUDA rows skipped ({why})")
        return
    rows.extend((w, tuple(s), d, sysname, t, work) for w, s, d, sysname, t, work in json.loads(lines[-1]))


def mlx_worker(args):
    import mlx.core as mlx_mx

    rows = []
    kiln_rows(args, rows, mlx_mx, "mlx")
    print(json.dumps(rows))


def torch_rope(torch, x, dims, base, offset, traditional):
    """MLX's RoPE in torch ops (angles in float32), the baseline for the rope rows."""
    half = dims // 2
    inv = base ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
    t = torch.arange(offset, offset + x.shape[-2], device=x.device, dtype=torch.float32)
    ang = t[:, None] * inv[None, :]
    c, s = ang.cos(), ang.sin()
    xf = x[..., :dims].float()
    if traditional:
        x1, x2 = xf[..., 0::2], xf[..., 1::2]
        rot = torch.stack([x1 * c - x2 * s, x1 * s + x2 * c], -1).flatten(-2)
    else:
        x1, x2 = xf[..., :half], xf[..., half:]
        rot = torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], -1)
    return torch.cat([rot.to(x.dtype), x[..., dims:]], -1)


def torch_rows(args, rows, torch):
    sync = torch.cuda.synchronize
    dtypes = {"bf16": torch.bfloat16, "fp32": torch.float32}
    F = torch.nn.functional

    def run(fn, *xs):
        return timed(lambda: fn(*xs), sync, args.reps)

    if "norm" in args.only:
        for shape in NORM_SHAPES:
            for dn, dt in dtypes.items():
                x = torch.randn(shape, device="cuda", dtype=dt)
                w, b = torch.randn(shape[-1], device="cuda", dtype=dt), torch.randn(shape[-1], device="cuda", dtype=dt)
                y = torch.empty_like(x)
                nbytes = 2 * x.numel() * x.element_size()
                rows.append(("copy floor", shape, dn, "torch copy_", run(lambda: y.copy_(x)), nbytes))
                ln = lambda x: F.layer_norm(x, shape[-1:], w, b, 1e-5)  # noqa: E731
                rms = lambda x: F.rms_norm(x, shape[-1:], w, 1e-5)  # noqa: E731
                for name, f in (("layer_norm", ln), ("rms_norm", rms)):
                    rows.append((name, shape, dn, "torch eager", run(f, x), nbytes))
                    rows.append((name, shape, dn, "torch.compile", run(torch.compile(f), x), nbytes))
                del x, y
                torch.cuda.empty_cache()
    if "norm_bwd" in args.only:
        for shape in NORM_SHAPES:
            for dn, dt in dtypes.items():
                x = torch.randn(shape, device="cuda", dtype=dt, requires_grad=True)
                g = torch.randn(shape, device="cuda", dtype=dt)
                w = torch.randn(shape[-1], device="cuda", dtype=dt, requires_grad=True)
                b = torch.randn(shape[-1], device="cuda", dtype=dt, requires_grad=True)
                y = torch.empty_like(g)
                nbytes = 3 * g.numel() * g.element_size()
                rows.append(("copy floor 3x", shape, dn, "torch add",
                             run(lambda: torch.add(x.detach(), g, out=y)), nbytes))
                ln = F.layer_norm(x, shape[-1:], w, b, 1e-5)
                rms = F.rms_norm(x, shape[-1:], w, 1e-5)
                for name, out, prims in (("layer_norm bwd", ln, (x, w, b)), ("rms_norm bwd", rms, (x, w))):
                    f = lambda out=out, prims=prims: torch.autograd.grad(out, prims, g, retain_graph=True)  # noqa: E731
                    rows.append((name, shape, dn, "torch eager", run(f), nbytes))
                del x, g, y, ln, rms
                torch.cuda.empty_cache()
    if "rope" in args.only:
        x = torch.randn(ROPE_SHAPE, device="cuda", dtype=torch.bfloat16)
        nbytes = 2 * x.numel() * x.element_size()
        for trad in (False, True):
            f = lambda x, t=trad: torch_rope(torch, x, 128, 1e4, 7, t)  # noqa: E731
            name = "rope" + (" trad" if trad else "")
            rows.append((name, ROPE_SHAPE, "bf16", "torch eager", run(f, x), nbytes))
            rows.append((name, ROPE_SHAPE, "bf16", "torch.compile", run(torch.compile(f), x), nbytes))
        del x
        torch.cuda.empty_cache()
    if "attention" in args.only:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        for shape in ATTN_SHAPES:
            b, h, l, d = shape
            q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            for causal in (False, True):
                flops = 4 * b * h * l * l * d / (2 if causal else 1)
                f = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    rows.append(("attention" + (" causal" if causal else ""), shape, "bf16",
                                 "torch flash", run(f), -flops))
                rows.append(("attention" + (" causal" if causal else ""), shape, "bf16",
                             "torch default", run(f), -flops))
                rows.append(("attention" + (" causal" if causal else ""), shape, "bf16",
                             "torch.compile", run(torch.compile(f)), -flops))
    if "attention-bwd" in args.only:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        for shape in ATTN_SHAPES[:1]:
            b, h, l, d = shape
            q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                       for _ in range(3))
            do = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
            for causal in (False, True):
                flops = 2.5 * 4 * b * h * l * l * d / (2 if causal else 1)

                def fb(c=causal):
                    out = F.scaled_dot_product_attention(q, k, v, is_causal=c)
                    return torch.autograd.grad(out, (q, k, v), do)

                def fwd(c=causal):
                    with torch.no_grad():
                        return F.scaled_dot_product_attention(q, k, v, is_causal=c)
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    t = run(fb) - run(fwd)
                rows.append(("attention bwd" + (" causal" if causal else ""), shape, "bf16",
                             "torch flash", t, -flops))


def report(rows):
    # Copy floors by bytes moved (the rope rows move as many as the bf16 (8192, 8192) norms).
    floors = {b: t for (w, s, d, sysname, t, b) in rows if w.startswith("copy floor") and "torch" in sysname}
    floors_k = {b: t for (w, s, d, sysname, t, b) in rows if w.startswith("copy floor") and "kiln" in sysname}
    flash = {(w, s): t for (w, s, d, sysname, t, _) in rows if sysname == "torch flash"}
    mlx = {(w, s, d): t for (w, s, d, sysname, t, _) in rows if sysname == "mlx"}
    best_torch = {}
    for (w, s, d, sysname, t, _) in rows:
        if sysname.startswith("torch") and not w.startswith("copy floor"):
            key = (w, s, d)
            best_torch[key] = min(t, best_torch.get(key, math.inf))
    print(f"{'workload':<18} {'shape':<18} {'dtype':<5} {'system':<14} {'ms':>9} {'rate':>14} {'vs':>22}")
    for (w, s, d, sysname, t, work) in rows:
        if work >= 0:
            rate = f"{work / t / 1e9:8.1f} GB/s"
            floor = floors.get(work, floors_k.get(work))
            vs = f"floor {floor / t:5.2f}" if floor and not w.startswith("copy floor") else ""
            bt = best_torch.get((w, s, d))
            if bt and sysname == "kiln":
                vs += f" torch {bt / t:5.2f}"
        else:
            rate = f"{-work / t / 1e12:7.1f} TFLOP/s"
            fl = flash.get((w, s))
            vs = f"flash {fl / t:5.2f}" if fl and sysname == "kiln" else ""
        if sysname == "kiln" and (w, s, d) in mlx:
            vs += f" mlx {mlx[(w, s, d)] / t:5.2f}"
        print(f"{w:<18} {str(s):<18} {d:<5} {sysname:<14} {t * 1e3:9.3f} {rate:>14} {vs:>22}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--only", nargs="*", default=["norm", "norm_bwd", "rope", "attention"])
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--no-mlx", action="store_true", help="skip MLX-CUDA's rows")
    p.add_argument("--mlx-timeout", type=float, default=600)
    p.add_argument("--mlx-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--hopper", action="store_true",
                   help="attention rows for the mma.sync kernels and the other forms of the "
                        "sm_90 wgmma kernel too")
    args = p.parse_args()
    if args.mlx_worker:
        mlx_worker(args)
        return
    rows = []
    kiln_rows(args, rows)
    if not args.no_mlx:
        mlx_rows(args, rows)
    torch = None if args.no_torch else load_torch()
    if torch is None:
        print("torch with CUDA is not installed: torch rows skipped")
    else:
        torch_rows(args, rows, torch)
    report(rows)


if __name__ == "__main__":
    main()
