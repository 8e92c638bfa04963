#!/usr/bin/env python3
"""Where a traced run's device idled: reads a CUPTI timeline (kernel_profile.cpp's
IB_KERNEL_TIMELINE CSV, plain or .gz: start_ns, end_ns, advance_ns, gap_ns, kernel) and prints
the span, the busy time and the gaps: those of at least --big-us before a cuBLASLt kernel
(nvjet / cutlass / sm90_xmma: a new kernel's module loading mid-run, or the heuristic), before
the step's first kernel (--step-kernel, the embedding gather: the host's step between two device
steps) and the rest; then each cuBLASLt kernel name's first launch, when it came after --after of
the span (a kernel first loaded mid-run).

Usage: python3 bench/gpu/step_gaps.py timeline.csv.gz [--big-us 500] [--after 0.05]
"""
import argparse
import csv
import gzip
import sys


def cublas(name):
    return any(s in name for s in ("nvjet", "cutlass", "sm90_xmma", "cublasLt"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("timeline")
    ap.add_argument("--big-us", type=float, default=500.0)
    ap.add_argument("--after", type=float, default=0.05)
    ap.add_argument("--step-kernel", default="gather_rows_kernel")
    a = ap.parse_args()
    opener = gzip.open if a.timeline.endswith(".gz") else open
    with opener(a.timeline, "rt") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit("step_gaps: no kernels in " + a.timeline)
    t0, t1 = int(rows[0]["start_ns"]), int(rows[-1]["end_ns"])
    span = t1 - t0
    sums = {"big gap before a cuBLASLt kernel": [0, 0], "gap before a step's first kernel": [0, 0],
            "other gaps": [0, 0]}
    busy = 0
    first = {}
    for r in rows:
        gap, name = int(r["gap_ns"]), r["kernel"]
        busy += int(r["end_ns"]) - int(r["start_ns"])
        if cublas(name) and gap >= a.big_us * 1e3:
            key = "big gap before a cuBLASLt kernel"
        elif a.step_kernel in name:
            key = "gap before a step's first kernel"
        else:
            key = "other gaps"
        sums[key][0] += gap
        sums[key][1] += 1
        if cublas(name) and name not in first:
            first[name] = (int(r["start_ns"]) - t0, gap)
    print(f"{len(rows)} kernels, span {span / 1e6:.1f} ms, busy (sum of kernel times) "
          f"{busy / 1e6:.1f} ms")
    for key, (ns, n) in sums.items():
        print(f"  {key}: {ns / 1e6:.1f} ms ({100.0 * ns / span:.2f} % of the span), {n} kernels")
    late = sorted((t, g, n) for n, (t, g) in first.items() if t > a.after * span)
    print(f"cuBLASLt kernels first launched after {100 * a.after:.0f} % of the span: {len(late)}")
    for t, g, n in late:
        print(f"  at {t / 1e6:9.1f} ms, gap before {g / 1e3:8.1f} us  {n[:90]}")


if __name__ == "__main__":
    main()
