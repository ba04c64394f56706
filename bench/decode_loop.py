"""A steady pipelined decode loop (mlx-lm's model and generate_step's async_eval pattern) for
a sampling profiler to attach to: builds one `bench/llm.py` model through kiln's `mlx` alias
(or real MLX with --mlx), warms it up, prints `ready <pid>` (and touches --ready), then runs
decode steps for --seconds and prints the median step split (build, issue, wait; ms).

    python3 bench/decode_loop.py --model llama-8b --quant q4 --seconds 20 --ready /tmp/r &
    while [ ! -e /tmp/r ]; do sleep 0.2; done
    py-spy record --native --pid $! -d 8 -r 500 -f raw -o stacks.txt
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llm  # noqa: E402  (bench/llm.py: the models and their random weights)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="llama-8b", choices=list(llm.MODELS))
    p.add_argument("--quant", default="q4", choices=["bf16", "q8", "q4"])
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--prompt", type=int, default=512)
    p.add_argument("--ready", default=None, help="touch this file once the loop starts")
    p.add_argument("--mlx", action="store_true", help="real MLX instead of kiln")
    p.add_argument("--tiny", action="store_true", help="2 layers, hidden 256 (a CPU smoke test)")
    p.add_argument("--kernels", type=int, default=0, metavar="N",
                   help="after the loop, N steps under kiln.profiler: device time a step and the "
                        "kernels that take it (the GPU's busy time, beside the host's step)")
    p.add_argument("--gpu-time", type=int, default=0, metavar="N",
                   help="after the loop, N steps each issued behind a kernel that holds the GPU: "
                        "the GPU's own time a step, with no wait for the host")
    p.add_argument("--ncu", type=int, default=0, metavar="N",
                   help="after the loop, N synchronous steps inside cuProfilerStart/Stop, for "
                        "`ncu --profile-from-start off` (bench/ncu_table.py sums its CSV a step)")
    p.add_argument("--host-ops", type=int, default=0, metavar="N",
                   help="after the loop, N steps under kiln.profiler without device events: the "
                        "host time an evaluation spends on each primitive")
    args = p.parse_args()
    if not args.mlx:
        import kiln

        kiln.alias_mlx()
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    mx.set_default_device(mx.gpu if mx.is_available(mx.gpu) else mx.cpu)
    _, config = llm.MODELS[args.model]
    config = llm.shrink(config) if args.tiny else dict(config)
    model, _ = llm.build_mlx_model(mx, config, args.quant)
    prompt = llm.prompt_tokens(args.prompt, config["vocab_size"], 0)
    cache = make_prompt_cache(model)
    step = llm.greedy_step(mx, model, cache)
    y, lp = step(mx.array(prompt))
    mx.eval(y, lp)
    for _ in range(8):
        y, lp = step(y)
        mx.eval(y, lp)
    print(f"ready {os.getpid()}", flush=True)
    if args.ready:
        open(args.ready, "w").close()
    split = {"build": [], "issue": [], "wait": []}
    y, lp = step(y)
    mx.async_eval(y, lp)
    core = None if args.mlx else sys.modules["kiln"]._core
    thread_stats = getattr(core, "_async_thread_stats", None)
    thread0 = thread_stats() if thread_stats else None
    end = time.perf_counter() + args.seconds
    steps = 0
    # The cache grows by one token a step; start over before it passes 4096 entries.
    while time.perf_counter() < end:
        y, lp = llm.pipelined_step(mx, step, y, split)
        steps += 1
        if cache[0].offset > 4000:
            mx.eval(y, lp)
            cache = make_prompt_cache(model)
            step = llm.greedy_step(mx, model, cache)
            y, lp = step(mx.array(prompt))
            mx.async_eval(y, lp)
    mx.eval(y, lp)
    med = lambda xs: sorted(xs)[len(xs) // 2] * 1e3  # noqa: E731
    build, issue, wait = split["build"], split["issue"], split["wait"]
    step_ms = med([a + b + c for a, b, c in zip(build, issue, wait)])
    print(f"{args.model} {args.quant} {'mlx' if args.mlx else 'kiln'}: {steps} steps, build "
          f"{med(build):.2f} ms, issue {med(issue):.2f}, wait {med(wait):.2f}, step {step_ms:.2f} "
          f"({1e3 / step_ms:.0f} tok/s)", flush=True)
    if thread0 is not None:
        jobs, busy = (b - a for a, b in zip(thread0, thread_stats()))
        if jobs:
            # Near the step time: issuing bounds the loop; well under it: the GPU does.
            print(f"  issuing thread: {jobs} jobs, busy {busy / jobs * 1e3:.2f} ms a job "
                  f"({busy / (jobs * step_ms * 1e-3):.0%} of a step)", flush=True)
    if args.gpu_time and not args.mlx:
        gpu_step_time(mx, step, y, args.gpu_time)
    if args.kernels and not args.mlx:
        kernel_table(mx, step, y, args.kernels)
    if args.host_ops and not args.mlx:
        host_table(mx, step, y, args.host_ops)
    if args.ncu:
        profiled_steps(mx, step, y, args.ncu)


def profiled_steps(mx, step, y, steps):
    """`steps` synchronous steps inside a profiler range (bench/cuda_profiler_range.py)."""
    from cuda_profiler_range import profiler_range

    mx.eval(y)
    with profiler_range():
        for _ in range(steps):
            y, lp = step(y)
            mx.eval(y, lp)
    print(f"  profiled {steps} steps (cuProfilerStart/Stop)", flush=True)


def host_table(mx, step, y, steps):
    """Host time a synchronous step spends issuing each primitive (no CUDA events)."""
    import kiln.profiler

    with kiln.profiler.profile(device_times=False) as prof:
        for _ in range(steps):
            y, lp = step(y)
            mx.eval(y, lp)
    rows = sorted(prof.key_averages(), key=lambda r: -r.self_host_time_total)
    t = prof.totals()
    print(f"  host a step: eval {t['wall_us'] / steps / 1e3:.3f} ms; by primitive (self time, "
          f"count, per call):")
    for r in rows[:int(os.environ.get("HOST_ROWS", 16))]:
        print(f"  {r.self_host_time_total / steps:8.1f} us {r.count // steps:4d}x "
              f"{r.self_host_time_total / max(r.count, 1):6.2f} us  {r.key[:60]}")


HOLD_MS = 25


def gpu_step_time(mx, step, y, steps):
    """The GPU's time a step when it never waits for the host: a one-thread kernel spins
    for HOLD_MS on the GPU clock while the step is built and issued behind it, so the step's
    kernels run back to back; the wall time less the hold is the step's (plus one read)."""
    hold = mx.fast.cuda_kernel("kiln_bench_hold", ["x"], ["y"], """
        unsigned long long t0, t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
        do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < NS);
        y[0] = x[0];
    """)
    x = mx.zeros((1,))
    times = []
    for i in range(steps + 2):
        mx.eval(x, y)
        t0 = time.perf_counter()
        (h,) = hold(inputs=[x], grid=(1, 1, 1), threadgroup=(1, 1, 1), output_shapes=[(1,)],
                    output_dtypes=[mx.float32], template=[("NS", HOLD_MS * 1_000_000)])
        mx.async_eval(h)
        y, lp = step(y)
        mx.async_eval(y, lp)
        issued = time.perf_counter() - t0
        mx.eval(y, lp, h)
        times.append(time.perf_counter() - t0 - HOLD_MS * 1e-3)
        # (the first calls build the hold kernel while it should be holding)
        assert i < 2 or issued < HOLD_MS * 1e-3, "the step took longer to issue than the hold"
    times = sorted(times[2:])
    print(f"  GPU time a step (issued behind a {HOLD_MS} ms hold): median "
          f"{times[len(times) // 2] * 1e3:.2f} ms, min {times[0] * 1e3:.2f} over {steps}",
          flush=True)


def kernel_table(mx, step, y, steps):
    """Device time of `steps` synchronous decode steps by kernel (CUDA events around each
    call): what the GPU alone needs a step, whatever the host does."""
    import kiln.profiler

    with kiln.profiler.profile() as prof:
        for _ in range(steps):
            y, lp = step(y)
            mx.eval(y, lp)
    rows = [r for r in prof.key_averages() if r.device_time_total]
    rows.sort(key=lambda r: -r.device_time_total)
    total = sum(r.device_time_total for r in rows) / steps
    print(f"device time a step {total / 1e3:.3f} ms over {steps} steps "
          f"(host wall {prof.totals()['wall_us'] / steps / 1e3:.3f} ms)")
    for r in rows[:14]:
        print(f"  {r.device_time_total / steps:8.1f} us  {r.count // steps:4d}x  {r.key[:70]}")


if __name__ == "__main__":
    main()
