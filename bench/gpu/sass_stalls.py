#!/usr/bin/env python3
"""A kernel's stall samples from Nsight Compute's source page (the sass_NAME.csv.gz that ncu_on in
build_inferbench.sh writes): the warp instructions executed, each stall reason's share of the
samples, and the opcodes holding the most samples (predicates dropped, modifiers cut: LDG.E.128
counts as LDG).

Usage: sass_stalls.py SASS.csv.gz ... > stalls.txt
"""
import collections
import csv
import gzip
import sys


def summary(path, top=8):
    rows = list(csv.reader(gzip.open(path, "rt")))
    header = rows[1]  # rows[0] names the kernel
    reasons = [i for i, h in enumerate(header) if h.startswith("stall_") and "Not Issued" not in h]
    executed = header.index("Instructions Executed")
    by_reason, by_op, instructions = collections.Counter(), collections.Counter(), 0.0
    for row in rows[2:]:
        if len(row) < len(header):
            continue
        samples = 0.0
        for i in reasons:
            by_reason[header[i][len("stall_"):]] += float(row[i])
            samples += float(row[i])
        words = row[1].split()
        op = words[1] if words and words[0].startswith("@") and len(words) > 1 else (
            words[0] if words else "")
        by_op[op.split(".")[0]] += samples
        instructions += float(row[executed])
    total = sum(by_reason.values()) or 1.0
    pct = lambda c: ", ".join(f"{k} {v / total * 100:.1f} %" for k, v in c.most_common(top))
    return (f"{path}: {instructions:.3g} warp instructions executed\n"
            f"  stall samples by reason: {pct(by_reason)}\n"
            f"  stall samples by opcode: {pct(by_op)}")


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: sass_stalls.py SASS.csv.gz ...")
    for path in sys.argv[1:]:
        print(summary(path))


if __name__ == "__main__":
    main()
