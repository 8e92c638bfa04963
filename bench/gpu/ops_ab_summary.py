#!/usr/bin/env python3
"""The op benchmark's A/B (bench/gpu/ops_ab.sh): each row (group, op, shape, path) of the
base_N.json and new_N.json files in DIR, its time per pass and the change of the new tree's
median against the base's."""
import json
import statistics
import sys
from pathlib import Path


def rows(path):
    out = {}
    for r in json.loads(path.read_text())["rows"]:
        out[(r["group"], r["op"], r["shape"], r["path"])] = r["time_us"]
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: ops_ab_summary.py DIR (holding base_N.json and new_N.json)")
    d = Path(sys.argv[1])
    runs = {v: [rows(p) for p in sorted(d.glob(f"{v}_*.json"))] for v in ("base", "new")}
    if not runs["base"] or not runs["new"]:
        sys.exit(f"{d}: base_N.json and new_N.json are both needed")
    keys = [k for k in runs["new"][0] if all(k in r for r in runs["base"] + runs["new"])]
    print(f"{'row':<58} {'base us':>18} {'new us':>18} {'change':>8}")
    for k in keys:
        b = [r[k] for r in runs["base"]]
        n = [r[k] for r in runs["new"]]
        change = statistics.median(n) / statistics.median(b) - 1 if statistics.median(b) else 0
        name = " ".join(k)
        print(f"{name[:58]:<58} {'/'.join(f'{x:.1f}' for x in b):>18} "
              f"{'/'.join(f'{x:.1f}' for x in n):>18} {change * 100:+7.1f}%")


if __name__ == "__main__":
    main()
