"""Summarises an `ncu --set full` report exported as CSV (`--page details` and `--page raw`):
for each kernel, the details rows that say where a bandwidth-bound kernel stands (duration,
DRAM and memory throughput, L1/L2 hit rates, occupancy, registers, issue rate) and its five
largest warp stall reasons (cycles a warp waits per issued instruction, by reason).

    ncu --import run.ncu-rep --csv --page details > details.csv
    ncu --import run.ncu-rep --csv --page raw > raw.csv
    python3 bench/ncu_sections.py details.csv raw.csv
"""

from __future__ import annotations

import csv
import io
import re
import sys
from collections import defaultdict

DETAILS = [
    "Duration", "DRAM Throughput", "Memory Throughput", "L1/TEX Hit Rate", "L2 Hit Rate",
    "Mem Busy", "Max Bandwidth", "Registers Per Thread", "Achieved Occupancy",
    "Theoretical Occupancy", "Issue Slots Busy", "Warp Cycles Per Issued Instruction",
    "Eligible Warps Per Scheduler", "Grid Size", "Block Size", "Dynamic Shared Memory Per Block",
]
STALL = re.compile(r"smsp__average_warps?_issue_stalled_(\w+?)_per_issue_active\.ratio")


def csv_rows(path):
    text = open(path, errors="replace").read()
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    return [] if start is None else list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))


def main():
    details, raw = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None
    by_kernel = defaultdict(dict)
    names = {}
    for r in csv_rows(details):
        key = r["ID"]
        names[key] = f'{r["Kernel Name"].split("(")[0][:40]} grid {r.get("Grid Size", "")}'
        if r["Metric Name"] in DETAILS:
            by_kernel[key][r["Metric Name"]] = f'{r["Metric Value"]} {r["Metric Unit"]}'.strip()
    stalls = {}
    if raw:
        for r in csv_rows(raw):
            if not r.get("ID", "").isdigit():
                continue  # the units row
            found = []
            for col, value in r.items():
                m = STALL.fullmatch(col or "")
                if m:
                    try:
                        found.append((float(value.replace(",", "")), m.group(1)))
                    except ValueError:
                        pass
            stalls[r["ID"]] = sorted(found, reverse=True)[:5]
    for key in sorted(by_kernel, key=int):
        print(f"-- {key} {names[key]}")
        print("   " + "; ".join(f"{m}: {by_kernel[key][m]}" for m in DETAILS if m in by_kernel[key]))
        if stalls.get(key):
            print("   stalls/issue: " + ", ".join(f"{n} {v:.2f}" for v, n in stalls[key]))


if __name__ == "__main__":
    main()
