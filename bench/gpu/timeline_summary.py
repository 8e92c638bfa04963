#!/usr/bin/env python3
"""Per decode step, where the time goes, from a kernel timeline (kernel_profile.cpp's
IB_KERNEL_TIMELINE CSV) of a Llama-family run on the fused decode path.

Each kernel is named by its role: the fused GEMVs by their epilogue (qkv: RoPE and cache; gateup:
SwiGLU; o / down: the residual add after the attention / after gate-up), attn (split-KV), lt
(cuBLASLt, the lm_head), the rest by kernel name. A decode step runs from one embedding gather to
the next (two gathers per step: the embedding and the sampled rows). For each role the script
prints calls per step, the mean advance of the GPU's busy frontier per call (what the kernel adds
to the step, overlap under programmatic dependent launch removed) and the mean idle gap before
it; the gap before the embedding gather is the time between steps when the GPU has no work.

Usage: bench/gpu/timeline_summary.py TIMELINE.csv [...]
       bench/gpu/timeline_summary.py --diff BASE.csv OTHER.csv (each role's per-step time in
       both and what OTHER adds, e.g. the base model's steps against an adapter's)
"""
import collections
import csv
import re
import sys

ROLES = {"0": "store", "1": "acc", "2": "gateup", "3": "qkv"}


def role(name):
    m = re.search(r"gemv_kernel<([^>]*)>", name)
    if m:  # the 7th template argument is the epilogue (gemv_kernel.cuh)
        args = [a.strip() for a in m.group(1).split(",")]
        if len(args) >= 7 and args[6] in ROLES:
            return ROLES[args[6]]
    if "split_kv" in name:
        return "attn"
    if name.startswith("nvjet") or "cublas" in name.lower():
        return "lt"
    return name.split("::")[-1].split("(")[0][:40]


def summarize(path, quiet=False):
    rows = list(csv.DictReader(open(path)))
    kernels, last = [], None
    for r in rows:
        k = role(r["kernel"])
        if k == "acc":  # o follows the attention, down the gate/up GEMV (LoRA kernels between)
            k = "o" if last == "attn" else "down"
        if k in ("attn", "gateup", "qkv", "o", "down"):
            last = k
        kernels.append((k, int(r["start_ns"]), int(r["advance_ns"]), int(r["gap_ns"])))
    gathers = [i for i, k in enumerate(kernels) if k[0].startswith("gather_rows")]
    # Two gathers a step; the step starts at the embedding's, the one after the wider gap.
    first = 1 if len(gathers) >= 2 and kernels[gathers[1]][3] > kernels[gathers[0]][3] else 0
    starts = gathers[first::2]
    totals = collections.defaultdict(lambda: [0, 0, 0])
    periods, steps = [], 0
    for a, b in zip(starts, starts[1:]):
        steps += 1
        periods.append(kernels[b][1] - kernels[a][1])
        for k, _, adv, gap in kernels[a:b]:
            t = totals[k]
            t[0] += 1
            t[1] += adv
            t[2] += gap
    if steps == 0:
        print(f"{path}: no whole decode step")
        return None
    periods.sort()
    if quiet:
        return periods[len(periods) // 2], {k: (c / steps, (a + g) / steps)
                                             for k, (c, a, g) in totals.items()}
    print(f"{path}: {steps} steps, median period {periods[len(periods) // 2] / 1e3:.1f} us")
    print(f"  {'kernel':34s} {'calls':>6s} {'advance us':>11s} {'gap us':>8s} "
          f"{'per step us':>12s}")
    for k, (calls, adv, gap) in sorted(totals.items(), key=lambda x: -(x[1][1] + x[1][2])):
        print(f"  {k:34s} {calls / steps:6.1f} {adv / calls / 1e3:11.2f} {gap / calls / 1e3:8.2f} "
              f"{(adv + gap) / steps / 1e3:12.1f}")


def diff(base_path, other_path):
    base, other = summarize(base_path, True), summarize(other_path, True)
    if base is None or other is None:
        return
    print(f"median step {base[0] / 1e3:.1f} us -> {other[0] / 1e3:.1f} us "
          f"(+{(other[0] - base[0]) / 1e3:.1f})")
    print(f"  {'kernel':34s} {'calls':>6s} {'base us':>9s} {'calls':>6s} {'other us':>9s} "
          f"{'added us':>9s}")
    keys = sorted(set(base[1]) | set(other[1]),
                  key=lambda k: -abs(other[1].get(k, (0, 0))[1] - base[1].get(k, (0, 0))[1]))
    for k in keys:
        (bc, bt), (oc, ot) = base[1].get(k, (0, 0)), other[1].get(k, (0, 0))
        print(f"  {k:34s} {bc:6.1f} {bt / 1e3:9.1f} {oc:6.1f} {ot / 1e3:9.1f} "
              f"{(ot - bt) / 1e3:9.1f}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--diff":
        diff(sys.argv[2], sys.argv[3])
    else:
        for p in sys.argv[1:]:
            summarize(p)
