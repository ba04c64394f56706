"""First-call cost of a compiled GPU function with many fused regions: NVRTC time per
kernel, and the first call's wall time with the kernels built in parallel
(kiln_cuda::prebuild), on one thread, with batches off (each kernel built at its first
launch), and in a second process with a warm disk cache.

Each case runs in a fresh process with its own cache directory. On the GPU machine:
`python bench/nvrtc_parallel.py [regions]` (default 8 regions)."""

import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time
import kiln.core as mx
regions = int(sys.argv[1])

def fn(x):
    # Regions split by reductions; each has its own literals, so its own kernel.
    outs = []
    for k in range(regions):
        x = mx.tanh(x * (1.0 + k)) + mx.exp(-x) * (0.5 + k)
        x = x - mx.mean(x, axis=-1, keepdims=True)
        outs.append(x)
    return outs

x = mx.random.normal((256, 1024))
mx.eval(x)
f = mx.compile(fn)
t = time.perf_counter()
mx.eval(f(x))
first = (time.perf_counter() - t) * 1e3
t = time.perf_counter()
mx.eval(f(x))
second = (time.perf_counter() - t) * 1e3
info = f.explain()
cuda = info["kernels"]["cuda"]
print(json.dumps({"first_ms": first, "second_ms": second,
                  "batch": info["entries"][0]["gpu_prebuild"],
                  "builds": cuda["builds"], "disk_hits": cuda["disk_hits"],
                  "kernel_ms": [k["build_ms"] for k in cuda["kernels"] if not k["from_disk"]]}))
"""


def run(cache, regions, **env):
    full = dict(os.environ, KILN_CACHE_DIR=cache, **env)
    out = subprocess.run([sys.executable, "-c", CHILD, str(regions)], env=full,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    regions = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    print(f"{regions} fused regions, threads available: {os.cpu_count()}")
    print(f"{'case':32s} {'first call ms':>14s} {'batch wall ms':>14s} {'NVRTC sum ms':>13s} "
          f"{'builds':>7s} {'disk':>5s} {'per kernel ms (min/median/max)':>32s}")
    with tempfile.TemporaryDirectory() as tmp:
        cases = [
            ("parallel (default threads)", "par", {}),
            ("parallel, warm disk cache", "par", {}),
            ("one thread", "one", {"KILN_NVRTC_THREADS": "1"}),
            ("batches off (build at launch)", "off", {"KILN_CUDA_PREBUILD": "0"}),
        ]
        for name, cache, env in cases:
            r = run(os.path.join(tmp, cache), regions, **env)
            b = r["batch"] or {}
            ks = sorted(r["kernel_ms"])
            per = f"{ks[0]:.1f}/{ks[len(ks) // 2]:.1f}/{ks[-1]:.1f}" if ks else "-"
            print(f"{name:32s} {r['first_ms']:14.1f} {b.get('wall_ms', 0):14.1f} "
                  f"{b.get('build_ms', 0):13.1f} {r['builds']:7d} {r['disk_hits']:5d} {per:>32s}")


if __name__ == "__main__":
    main()
