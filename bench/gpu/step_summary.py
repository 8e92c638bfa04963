#!/usr/bin/env python3
"""Per decode step, where the time goes, for any model family, from a kernel timeline
(kernel_profile.cpp's IB_KERNEL_TIMELINE CSV: the run's last kernels). A step runs from one
sampling kernel (argmax_final) to the next; the last 40 whole steps are summarised. For each kernel
name (templates and namespaces dropped): calls per step, the mean advance of the GPU's busy
frontier per step (what the kernel adds to the step, overlap removed) and the idle gap before it.
timeline_summary.py names the Llama-family fused GEMVs by role; this one only groups by name.

Usage: bench/gpu/step_summary.py [--templates] TIMELINE.csv ...
  --templates: group by the name with its template arguments (e.g. a kernel's gate_up and down
  instantiations apart), namespaces dropped.
"""
import collections
import csv
import statistics
import sys


TEMPLATES = False


def short_name(kernel):
    kernel = kernel.replace("(anonymous namespace)::", "")
    if TEMPLATES:
        return kernel.split("(")[0].replace("ib::cuda::", "")
    kernel = kernel.split("<")[0].split("(")[0]
    return kernel.split("::")[-1]


def main(path):
    rows = list(csv.reader(open(path)))[1:]
    marks = [i for i, r in enumerate(rows) if "argmax_final" in r[4]]
    steps = [(a, b, int(rows[b][1]) - int(rows[a][1])) for a, b in zip(marks, marks[1:])]
    steps = [s for s in steps if s[2] < 20e6][-40:]
    if not steps:
        print(f"{path}: no whole decode steps")
        return
    n = len(steps)
    advance, gap, calls = (collections.defaultdict(float), collections.defaultdict(float),
                           collections.defaultdict(int))
    for a, b, _ in steps:
        for r in rows[a + 1:b + 1]:
            k = short_name(r[4])
            advance[k] += int(r[2])
            gap[k] += int(r[3])
            calls[k] += 1
    print(f"{path}: {n} steps (sampling to sampling), median "
          f"{statistics.median(s[2] for s in steps) / 1e3:.1f} us")
    width = 60 if TEMPLATES else 40
    print(f"  {'kernel':{width}s} {'calls':>6s} {'advance us':>11s} {'gap us':>8s}")
    for k in sorted(advance, key=lambda k: -(advance[k] + gap[k])):
        print(f"  {k[:width]:{width}s} {calls[k] / n:6.1f} {advance[k] / n / 1e3:11.1f} "
              f"{gap[k] / n / 1e3:8.1f}")
    print(f"  {'total':40s} {'':6s} {sum(advance.values()) / n / 1e3:11.1f} "
          f"{sum(gap.values()) / n / 1e3:8.1f}")


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--templates" in args:
        TEMPLATES = True
        args.remove("--templates")
    for p in args:
        main(p)
