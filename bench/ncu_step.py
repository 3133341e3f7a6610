#!/usr/bin/env python3
"""One forward step of an ncu CSV, kernel by kernel (not a test).

scripts/device_kernels.sh's `trace` phase runs bench_gpu under
`ncu --metrics gpu__time_duration.sum --csv` and saves trace_<run>.csv.gz. A forward starts with
the embedding kernel; this prints the last whole step (between the last two embed launches, or
from the last embed launch to the end with --last) grouped by kernel: launches, grid, time per
launch and in all, and the step's sum. ncu replays each kernel alone, so the sum is the kernels'
own time with no overlap between them (programmatic dependent launch, graphs), not the step's.

    python3 bench/ncu_step.py bench/results/trace_1b_h100_e014e69/trace_decode_b1.csv.gz
    python3 bench/ncu_step.py --last bench/results/trace_1b_h100_e014e69/trace_lazy_8k.csv.gz
"""
import argparse
import csv
import gzip


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="ncu --csv output, gzipped or not")
    ap.add_argument("--last", action="store_true", help="the step from the last embed launch to the end")
    ap.add_argument("--skip", default="fill_uniform", help="kernels to leave out (substring; random weights)")
    a = ap.parse_args()
    opener = gzip.open if a.csv.endswith(".gz") else open
    with opener(a.csv, "rt") as f:
        rows = [r for r in csv.reader(f)]
    head = next(r for r in rows if r and r[0] == "ID")
    data = [r for r in rows if len(r) == len(head) and r[0] != "ID"]
    ki, gi, vi, ui = (head.index(k) for k in ("Kernel Name", "Grid Size", "Metric Value", "Metric Unit"))
    scale = {"ns": 1e-3, "us": 1.0, "usecond": 1.0, "msecond": 1e3, "ms": 1e3, "nsecond": 1e-3}
    seq = [(r[ki], r[gi], float(r[vi].replace(",", "")) * scale.get(r[ui], 1e-3)) for r in data]
    starts = [i for i, s in enumerate(seq) if "embed_kernel" in s[0]]
    if not starts or (not a.last and len(starts) < 2):
        raise SystemExit("ncu_step: fewer embed launches than a whole step needs")
    lo, hi = (starts[-1], len(seq)) if a.last else (starts[-2], starts[-1])
    step = [s for s in seq[lo:hi] if a.skip not in s[0]]
    agg = {}
    for name, grid, us in step:
        e = agg.setdefault(name[:70], [0, 0.0, grid])
        e[0] += 1
        e[1] += us
    print(f"{'kernel':70s} {'n':>4s} {'grid':>12s} {'us/launch':>10s} {'us':>9s}")
    for name, (n, us, grid) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        print(f"{name:70s} {n:4d} {grid:>12s} {us / n:10.2f} {us:9.1f}")
    print(f"{len(step)} launches, {sum(s[2] for s in step):.1f} us in all")


if __name__ == "__main__":
    main()
