"""kiln's main job, for now: build a lazy graph, evaluate it, and say what happened.

Run: pip install . && python3 examples/demo.py
"""

import time

import numpy as np

import kiln.core as mx


def gelu(x):
    return x * (1 + mx.erf(x / 1.4142135)) / 2


def main():
    n = 1 << 22
    x = mx.random.normal((n,), key=mx.random.key(0))
    mx.eval(x)
    mx.reset_peak_memory()
    base = mx.get_active_memory()

    t0 = time.perf_counter()
    y = gelu(x)                      # five ops recorded, nothing computed
    m = mx.mean(y)
    t1 = time.perf_counter()
    print(f"recorded mean(gelu(x)) over {n:,} normal samples in {1e6 * (t1 - t0):.0f} us")
    print(f"  memory held by new arrays so far: {mx.get_active_memory() - base} bytes (lazy)")

    mx.eval(m, y)                    # the graph runs here
    t2 = time.perf_counter()
    print(f"evaluated in {1e3 * (t2 - t1):.1f} ms")
    print(f"  now held: {(mx.get_active_memory() - base) / 2**20:.1f} MiB (y and m; "
          f"intermediates freed), peak {(mx.get_peak_memory() - base) / 2**20:.1f} MiB")
    print(f"  mean(gelu(x)) = {m.item():.5f}  (about 0.28209 for a standard normal)")

    ref = np.array(x, dtype=np.float64)
    from math import erf
    ref_y = ref[:5] * (1 + np.array([erf(v / 1.4142135) for v in ref[:5]])) / 2
    print(f"  y[:5] = {y[:5]}")
    print(f"  max |y - numpy| on the first 5: {np.abs(np.array(y[:5]) - ref_y).max():.2e}")


if __name__ == "__main__":
    main()
