"""kiln's benchmark harness: every system on the same workloads, each system in its own
process, one table of times and ratios.

    python3 bench/harness.py                      # every installed system, default sizes
    python3 bench/harness.py --systems kiln numpy --n 22 --reps 5

Workloads follow shared/bench/PEERS.md (2^24 float32 elementwise chains, sgemm, softmax). The
bandwidth floor is a plain copy of the same bytes, measured by each system in the same run.
To add a workload: one entry in WORKLOADS (inputs, outputs, a function of an array module).
To add a system: one Runner subclass in RUNNERS.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time

import numpy as np

# ---- workloads: name -> (kind, make inputs, per-system function) ----------------------------


def adam(xp, sqrt, p, g, m, v, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
    m2 = b1 * m + (1 - b1) * g
    v2 = b2 * v + (1 - b2) * g * g
    return p - lr * m2 / (sqrt(v2) + eps), m2, v2


def softmax_composed(xp, x):
    e = xp.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def elementwise(xp, ops):
    """The elementwise workloads written once over an array module's functions."""
    erf, sigmoid, tanh, sqrt, maximum = ops
    return {
        "copy": (1, 1, None),  # each runner times its own copy (the bandwidth floor)
        "add": (2, 1, lambda a, b: a + b),
        "gelu_erf": (1, 1, lambda x: x * (1 + erf(x / math.sqrt(2))) / 2),
        "gelu_tanh": (1, 1, lambda x: 0.5 * x * (1 + tanh(0.7978845608 * (x + 0.044715 * x * x * x)))),
        "silu_mul": (2, 1, lambda g, u: g * sigmoid(g) * u),
        "relu_chain": (3, 1, lambda x, y, z: maximum(x * y + z, 0) * 0.5 + x),
        "adam": (4, 3, lambda p, g, m, v: adam(xp, sqrt, p, g, m, v)),
    }


MATMUL_SIZES = [1024, 4096]
SOFTMAX_SHAPE = (4096, 4096)


def timeit(fn, sync, reps, warm=2):
    for _ in range(warm):
        sync(fn())
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        sync(fn())
        times.append(time.perf_counter() - t)
    return statistics.median(times)


# ---- systems --------------------------------------------------------------------------------


class Runner:
    """One system: converts numpy inputs, runs a function, waits for its result."""

    name = "?"

    def available(self) -> bool:
        return True

    def ops(self):
        raise NotImplementedError

    def module(self):
        raise NotImplementedError

    def convert(self, a):
        return a

    def sync(self, out):
        return None

    def copy(self, a):
        return a.copy()

    def softmax(self, x):
        return softmax_composed(self.module(), x)

    def matmul(self, a, b):
        return a @ b


class NumpyRunner(Runner):
    name = "numpy"

    def module(self):
        return np

    def ops(self):
        try:
            from scipy.special import erf
        except ImportError:
            erf = None  # numpy has no erf: gelu_erf is skipped
        return (erf, lambda x: 1 / (1 + np.exp(-x)), np.tanh, np.sqrt, np.maximum)


class KilnRunner(Runner):
    name = "kiln"

    def available(self):
        try:
            import kiln.core  # noqa: F401
        except ImportError:
            return False
        return True

    def module(self):
        import kiln.core as mx

        return mx

    def ops(self):
        mx = self.module()
        return (mx.erf, mx.sigmoid, mx.tanh, mx.sqrt, mx.maximum)

    def convert(self, a):
        return self.module().array(a)

    def sync(self, out):
        self.module().eval(out)

    def copy(self, a):
        return a + 0  # kiln arrays are immutable: the cheapest full read and write

    def softmax(self, x):
        mx = self.module()
        return mx.softmax(x, axis=-1) if hasattr(mx, "softmax") else softmax_composed(mx, x)


class MlxRunner(KilnRunner):
    name = "mlx"

    def available(self):
        try:
            import mlx.core  # noqa: F401
        except ImportError:
            return False
        return True

    def module(self):
        import mlx.core as mx

        return mx


class JaxRunner(Runner):
    name = "jax.jit"

    def available(self):
        try:
            import jax  # noqa: F401
        except ImportError:
            return False
        return True

    def module(self):
        import jax.numpy as jnp

        return jnp

    def ops(self):
        import jax
        import jax.numpy as jnp
        from jax.scipy.special import erf

        return (erf, jax.nn.sigmoid, jnp.tanh, jnp.sqrt, jnp.maximum)

    def convert(self, a):
        import jax.numpy as jnp

        return jnp.asarray(a)

    def sync(self, out):
        import jax

        jax.block_until_ready(out)

    def wrap(self, f):
        import jax

        return jax.jit(f)


RUNNERS = {r.name: r for r in [KilnRunner(), NumpyRunner(), JaxRunner(), MlxRunner()]}


def run_system(name: str, n: int, reps: int) -> dict:
    """Times every workload on one system (runs in its own process)."""
    runner = RUNNERS[name]
    rng = np.random.default_rng(0)
    base = [np.abs(rng.standard_normal(n, dtype=np.float32)) + 0.1 for _ in range(4)]
    args = [runner.convert(b) for b in base]
    wrap = getattr(runner, "wrap", lambda f: f)
    results = {}
    for wl, (nin, nout, f) in elementwise(runner.module(), runner.ops()).items():
        if wl == "copy":
            f = runner.copy
        elif f is None or (wl == "gelu_erf" and runner.ops()[0] is None):
            continue
        g = wrap(f)
        results[wl] = {"sec": timeit(lambda: g(*args[:nin]), runner.sync, reps),
                       "bytes": (nin + nout) * n * 4}
    for size in MATMUL_SIZES:
        a = runner.convert(rng.standard_normal((size, size), dtype=np.float32))
        b = runner.convert(rng.standard_normal((size, size), dtype=np.float32))
        mm = wrap(runner.matmul)
        sec = timeit(lambda: mm(a, b), runner.sync, max(3, reps // 2), warm=1)
        results[f"sgemm_{size}"] = {"sec": sec, "flops": 2 * size**3}
    x = runner.convert(rng.standard_normal(SOFTMAX_SHAPE, dtype=np.float32))
    sm = wrap(runner.softmax)
    results["softmax"] = {"sec": timeit(lambda: sm(x), runner.sync, reps),
                          "bytes": 2 * x.size * 4}
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--systems", nargs="*", default=list(RUNNERS))
    parser.add_argument("--n", type=int, default=24, help="log2 of the elementwise size")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.worker:
        print(json.dumps(run_system(opts.worker, 1 << opts.n, opts.reps)))
        return
    table = {}
    for name in opts.systems:
        if name not in RUNNERS or not RUNNERS[name].available():
            print(f"(skipping {name}: not installed)", file=sys.stderr)
            continue
        cmd = [sys.executable, __file__, "--worker", name, "--n", str(opts.n), "--reps", str(opts.reps)]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            print(f"(skipping {name}: {out.stderr.strip().splitlines()[-1:]})", file=sys.stderr)
            continue
        table[name] = json.loads(out.stdout)
    print_table(table, opts.n)


def print_table(table: dict, n: int):
    systems = list(table)
    workloads = [w for w in dict.fromkeys(w for s in systems for w in table[s])]
    ref = "numpy" if "numpy" in table else systems[0]
    print(f"\nkiln bench: elementwise on 2^{n} float32, median times in ms "
          f"(x = speed-up over {ref}; GB/s or GFLOP/s in brackets)\n")
    print(f"{'workload':12s}" + "".join(f"{s:>26s}" for s in systems))
    for w in workloads:
        row = f"{w:12s}"
        for s in systems:
            r = table[s].get(w)
            if r is None:
                row += f"{'-':>26s}"
                continue
            rate = (f"{r['bytes'] / r['sec'] / 1e9:.1f} GB/s" if "bytes" in r
                    else f"{r['flops'] / r['sec'] / 1e9:.0f} GF/s")
            base = table[ref].get(w)
            speed = f"x{base['sec'] / r['sec']:.2f}" if base else ""
            row += f"{r['sec'] * 1e3:9.2f} {speed:>6s} [{rate:>10s}]"
        print(row)
    if "kiln" in table and "copy" in table["kiln"]:
        floor = table["kiln"]["copy"]["bytes"] / table["kiln"]["copy"]["sec"]
        add = table["kiln"].get("add")
        if add:
            print(f"\nkiln add at {add['bytes'] / add['sec'] / floor:.0%} of kiln's copy bandwidth")


if __name__ == "__main__":
    main()
