"""Sums an `ncu --csv --metrics gpu__time_duration.sum` log of N decode steps
(`bench/decode_loop.py --ncu N`) into a table a step: each kernel's count and time (by name,
grid and block, since kiln's variants of one family share a symbol), the sum of the kernels'
own times, and the largest rows. ncu runs the kernels one at a time, so the sum has no
launch gaps and no overlap: set beside the loop's "GPU time a step", the difference is what
the pipelined step loses between kernels.

    ncu --clock-control none --profile-from-start off --csv \\
        --metrics gpu__time_duration.sum python3 bench/decode_loop.py --ncu 2 ... > ncu.csv
    python3 bench/ncu_table.py ncu.csv --steps 2 [--rows 30]
"""

from __future__ import annotations

import argparse
import csv
import io
from collections import defaultdict

UNIT_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}


def kernel_times(text):
    """(kernel name, grid, block, microseconds) for each profiled launch in ncu's CSV."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    rows = csv.DictReader(io.StringIO("\n".join(lines[start:])))
    out = []
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(r["Metric Value"].replace(",", ""))
        scale = UNIT_US.get(r.get("Metric Unit", "nsecond").strip(), 1e-3)
        name = r["Kernel Name"].split("(")[0]
        out.append((name, r.get("Grid Size", ""), r.get("Block Size", ""), value * scale))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("log")
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--rows", type=int, default=30)
    args = p.parse_args()
    times = kernel_times(open(args.log, errors="replace").read())
    if not times:
        print("ncu table: no gpu__time_duration rows in", args.log)
        return
    rows = defaultdict(lambda: [0, 0.0])
    for name, grid, block, us in times:
        rows[(name, grid, block)][0] += 1
        rows[(name, grid, block)][1] += us
    total = sum(us for *_, us in times) / args.steps
    print(f"ncu: {len(times) / args.steps:.0f} kernels a step, their own times sum to "
          f"{total / 1e3:.3f} ms a step")
    by_family = defaultdict(float)
    for (name, _, _), (_, us) in rows.items():
        by_family[name] += us / args.steps
    print("  by kernel: " + ", ".join(f"{n} {us:.0f}" for n, us in
                                      sorted(by_family.items(), key=lambda kv: -kv[1])[:12]))
    for (name, grid, block), (count, us) in sorted(rows.items(), key=lambda kv: -kv[1][1])[:args.rows]:
        print(f"  {us / args.steps:8.1f} us {count / args.steps:5.0f}x {us / count:7.2f} us  "
              f"{name[:40]} grid {grid} block {block}")


if __name__ == "__main__":
    main()
