#!/usr/bin/env python3
"""Prints, as JSON, the result.json keys that matter of every run directory under DIR (the
bench/gpu scripts' runs.json): output throughput, median TPOT and TTFT, quantization, kernel
switches, memory, the engine's copy ceiling and decode fraction of it, and the decode steps'
median wall and device times and host phases.

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
            perf = (result.get("engine") or {}).get("performance") or {}
            if perf:  # the machine's copy ceiling, so runs on different machines compare
                out[name]["copy_ceiling_bytes_per_s"] = perf.get("copy_ceiling_bytes_per_s")
                decode = perf.get("decode") or {}
                out[name]["decode_fraction_of_copy_ceiling"] = decode.get(
                    "fraction_of_copy_ceiling")
                out[name]["decode_median_step_ms"] = decode.get("median_step_ms")
                out[name]["decode_median_device_ms"] = decode.get("median_device_ms")
                out[name]["decode_host_phases_us"] = decode.get("median_host_phases_us")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
