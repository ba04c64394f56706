"""all_sum bandwidth and data-parallel training steps on local ranks, beside mpi4py (MPI) and
torch.distributed (NCCL).

    python -m kiln.launch -n 2 bench/distributed.py            # CPU ranks over MPI
    python -m kiln.launch -n 2 bench/distributed.py --sizes 1e6,1e7 --reps 20
    python -m kiln.launch -n 2 --backend nccl bench/distributed.py --train anchor   # GPUs

Rank 0 prints, per message size (float32 bytes): kiln's `mx.distributed.all_sum` (eager,
evaluated) and mpi4py's `Allreduce` on the same ranks, their bus bandwidth (2 (n-1)/n bytes
over time, as nccl-tests count) and the ratio; then a compiled data-parallel step (an MLP's
loss, grad, `nn.average_gradients`, Adam) against the one-process step on half the batch plus
an all_sum of the gradients' size, measured in alternating rounds. Times are medians; run on a
quiet machine.

On NCCL ranks (GPU arrays) the peer is torch.distributed's NCCL all_reduce on the same GPUs
(its process group set up from the launcher's KILN_RANK, KILN_WORLD_SIZE and KILN_NCCL_DIR),
and `--train small|anchor` adds bench/harness.py's training step (an LM, AdamW, compiled):
data-parallel over the ranks against the same step without the averaging on each rank's own
GPU, as tokens per second and weak-scaling efficiency (one-GPU step time over the
data-parallel step time). A world of one process runs every row (its collectives are the
input, so only the code paths are checked).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import kiln.core as mx
import kiln.nn as nn
import kiln.optimizers as optim
from kiln.utils import tree_flatten


def median_time(fn, reps):
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def barrier(world):
    mx.eval(mx.distributed.all_sum(mx.zeros((1,)), group=world))


def td_initialized():
    try:
        import torch.distributed as td
    except ImportError:
        return False
    return td.is_initialized()


def torch_group(world):
    """torch.distributed over NCCL on the launcher's ranks, or None without torch."""
    try:
        import torch
        import torch.distributed as td
    except ImportError:
        return None
    import os

    if not td.is_initialized():
        store = os.path.join(os.environ.get("KILN_NCCL_DIR", "/tmp"), "torch_store")
        td.init_process_group("nccl", init_method=f"file://{store}", rank=world.rank(),
                              world_size=world.size(), device_id=torch.device("cuda", 0))
    return td


def bandwidth(world, sizes, reps, on_gpu):
    if on_gpu:
        td = torch_group(world)
        import torch
    else:
        try:
            from mpi4py import MPI
        except ImportError:
            MPI = None
    n, rows = world.size(), []
    for nbytes in sizes:
        count = max(1, int(nbytes) // 4)
        x = mx.array(np.random.default_rng(0).normal(size=count).astype(np.float32))
        mx.eval(x)
        barrier(world)
        if on_gpu:
            # Issued back to back, one synchronize: how GPU code uses a collective.
            def kiln_sum():
                for _ in range(10):
                    mx.async_eval(mx.distributed.all_sum(x, group=world))
                mx.synchronize()

            t_kiln = median_time(kiln_sum, reps) / 10
            t_peer = None
            if td is not None:
                a = torch.from_numpy(np.array(x)).cuda()

                def torch_sum():
                    for _ in range(10):
                        td.all_reduce(a)
                    torch.cuda.synchronize()

                td.barrier()
                t_peer = median_time(torch_sum, reps) / 10
        else:
            t_kiln = median_time(lambda: mx.eval(mx.distributed.all_sum(x, group=world)), reps)
            t_peer = None
            if MPI is not None:
                a, b = np.array(x), np.empty(count, np.float32)
                MPI.COMM_WORLD.Barrier()
                t_peer = median_time(lambda: MPI.COMM_WORLD.Allreduce(a, b, op=MPI.SUM), reps)
        bus = 2 * (n - 1) / n * count * 4
        rows.append((count * 4, t_kiln, t_peer, bus))
    return rows


def lm_steps(world, size):
    """bench/harness.py's training step, data-parallel and alone on each rank's GPU."""
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import harness

    harness.TRAIN_SIZE = size
    barrier(world)
    dp = harness.train_step_bench("kiln", True, group=world)
    barrier(world)
    one = harness.train_step_bench("kiln", True)
    return dp, one


def mlp(width):
    return nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))


def train_step(world, batch, width, data_parallel):
    """A compiled step's runner (evaluated, state included) and the parameter count."""
    mx.random.seed(0)
    model = mlp(width)
    opt = optim.Adam(learning_rate=1e-3)
    state = [model.state, opt.state]
    grad_fn = nn.value_and_grad(model, lambda m, x, y: ((m(x) - y) ** 2).mean())

    def step(x, y):
        loss, grads = grad_fn(model, x, y)
        if data_parallel:
            grads = nn.average_gradients(grads, group=world)
        opt.update(model, grads)
        return loss

    step = mx.compile(step, inputs=state, outputs=state)
    x = mx.random.normal((batch, width))
    y = mx.random.normal((batch, width))

    def run():
        mx.eval(step(x, y), state)

    run()
    return run, sum(p.size for _, p in tree_flatten(model.parameters()))


def interleaved(world, runners, reps, rounds=5):
    """Median time of each runner, measured in alternating rounds so that drift in the
    machine's speed falls on all of them alike."""
    times = [[] for _ in runners]
    for _ in range(rounds):
        for t, run in zip(times, runners):
            barrier(world)
            for _ in range(reps):
                start = time.perf_counter()
                run()
                t.append(time.perf_counter() - start)
    return [float(np.median(t)) for t in times]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1e4,1e5,1e6,4e6,1.6e7,6.4e7")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--train", choices=["small", "anchor"], default=None,
                    help="also bench/harness.py's LM training step at this size")
    args = ap.parse_args()
    world = mx.distributed.init()
    r, n = world.rank(), world.size()
    sizes = [float(s) for s in args.sizes.split(",")]
    on_gpu = mx.default_device() == mx.gpu and "nccl" in repr(world)
    peer = "torch.distributed" if on_gpu else "mpi4py"
    rows = bandwidth(world, sizes, args.reps, on_gpu)
    if r == 0:
        print(f"all_sum on {n} ranks ({world!r}); bus GB/s = 2(n-1)/n bytes / time")
        print(f"{'bytes':>12} {'kiln us':>10} {'peer us':>10} {'kiln GB/s':>10} "
              f"{'peer GB/s':>10} {'kiln/peer time':>15}   (peer: {peer})")
        for nbytes, tk, tm, bus in rows:
            mpi = f"{tm * 1e6:10.1f}" if tm else f"{'-':>10}"
            mbw = f"{bus / tm / 1e9:10.2f}" if tm else f"{'-':>10}"
            ratio = f"{tk / tm:15.2f}" if tm else f"{'-':>15}"
            print(f"{nbytes:12d} {tk * 1e6:10.1f} {mpi} {bus / tk / 1e9:10.2f} {mbw} {ratio}")
    if args.train:
        dp, one = lm_steps(world, args.train)
        if r == 0:
            print(f"\nLM training step ({args.train}, {dp['params']} parameters, "
                  f"{dp['tokens']} tokens per rank), compiled, {n} ranks")
            print(f"  data-parallel step {dp['sec'] * 1e3:8.2f} ms  "
                  f"{n * dp['tokens'] / dp['sec'] / 1e3:8.1f} ktok/s")
            print(f"  one-rank step      {one['sec'] * 1e3:8.2f} ms  "
                  f"{one['tokens'] / one['sec'] / 1e3:8.1f} ktok/s")
            print(f"  scaling efficiency {one['sec'] / dp['sec']:.3f}")
    if on_gpu:
        if td_initialized():
            import torch.distributed as td

            td.destroy_process_group()
        return
    # The data-parallel step against one process on its share of the batch plus the all_sum
    # of the gradients (the cost the target allows).
    share = args.batch // n
    dp, params = train_step(world, share, args.width, True)
    one, _ = train_step(world, share, args.width, False)
    grads = mx.zeros((params,))
    mx.eval(grads)

    def all_sum():
        mx.eval(mx.distributed.all_sum(grads, group=world))

    t_dp, t_one, t_sum = interleaved(world, [dp, one, all_sum], args.reps)
    # Every rank's one-process median: the data-parallel step waits for the slowest rank, so
    # the allowance is that rank's step (printed beside rank 0's).
    ones = np.array(mx.distributed.all_gather(mx.array([t_one]), group=world)).tolist()
    if r == 0:
        print(f"\ntraining step, MLP width {args.width}, {params} parameters, batch {args.batch}"
              f" over {n} ranks ({share} each), compiled")
        print(f"  data-parallel step      {t_dp * 1e3:8.2f} ms")
        print(f"  one-process step ({share:3d}) {t_one * 1e3:8.2f} ms on rank 0, "
              f"{max(ones) * 1e3:.2f} ms on the slowest rank")
        print(f"  all_sum of the gradients {t_sum * 1e3:7.2f} ms")
        print(f"  data-parallel / (step + all_sum) = {t_dp / (t_one + t_sum):.3f} "
              f"(rank 0's step), {t_dp / (max(ones) + t_sum):.3f} (the slowest rank's)")


if __name__ == "__main__":
    main()
