#!/usr/bin/env python3
"""Prints, as JSON, the result.json keys that matter of every run directory under DIR (the
bench/gpu scripts' runs.json): output throughput, median TPOT and TTFT, quantization, kernel
switches, memory.

Usage: bench/gpu/runs_json.py DIR > runs.json
"""
import json
import os
import sys

KEYS = ("output_throughput", "median_tpot_ms", "median_ttft_ms", "quantization",
        "kernel_switches", "memory")


def main():
    out = {}
    for name in sorted(os.listdir(sys.argv[1])):
        path = os.path.join(sys.argv[1], name, "result.json")
        if os.path.exists(path):
            with open(path) as f:
                result = json.load(f)
            out[name] = {k: result.get(k) for k in KEYS if k in result}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
