#!/usr/bin/env python3
"""The summary of a bench/gpu/lora.sh output directory, as markdown: LoRA's throughput overhead
against the base model per configuration (issue 16's targets: one rank-16 adapter <= 15 %, 16
adapters <= 30 %, merged equal to the base within noise), the seed's table 4.4 (engine peak GiB,
P99 latency, TTFT, TPOT, throughput), the adapter load latency, the gpu tests' and the parity
results.

Usage: bench/gpu/lora_summary.py OUT_DIR > summary.md
Overhead = 1 - (output tok/s) / (the base's output tok/s at the same batch size).
"""
import glob
import json
import os
import sys

GIB = 1024 ** 3
# (run, its base, the limit on the overhead or None, what it is)
TARGETS = [
    ("seed_lora1_r16", "seed_base", 0.15, "1 adapter, rank 16, all linear layers"),
    ("seed_lora16_r16_random", "seed_base", 0.30, "16 adapters, rank 16, random assignment"),
    ("b32_lora16_r16_rr", "b32_base", 0.30, "16 adapters in every batch of 32 (round-robin)"),
    ("seed_lora1_r16_fused", "seed_base", 0.15, "as seed_lora1_r16, IB_LORA_FUSED=1"),
    ("seed_lora16_r16_random_fused", "seed_base", 0.30,
     "as seed_lora16_r16_random, IB_LORA_FUSED=1"),
    ("seed_merged_r16", "seed_base", None, "1 adapter merged (--merge-lora)"),
    ("seed_lora1_r8", "seed_base", None, "sweep: 1 adapter, rank 8"),
    ("seed_lora1_r64", "seed_base", None, "sweep: 1 adapter, rank 64"),
    ("seed_lora1_r128", "seed_base", None, "sweep: 1 adapter, rank 128"),
]


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def num(r, key):
    v = r.get(key) if r else None
    return v if isinstance(v, (int, float)) else None


def cv(r, key):
    """The run-to-run coefficient of variation of a metric (0 with one run)."""
    s = (r or {}).get("spread", {}).get(key, {})
    return s.get("cv") or 0.0


def fmt(v, digits=2):
    return "-" if v is None else f"{v:,.{digits}f}"


def overheads(out):
    runs = {os.path.basename(os.path.dirname(p)): load(p)
            for p in glob.glob(os.path.join(out, "runs", "*", "result.json"))}
    print("## LoRA overhead on Llama-3-8B (bf16, dummy weights, H200)\n")
    print("Seed protocol (static batches of 8, input 32 / output 128, 200 prompts) unless the run "
          "starts with b32 (batches of 32, 320 prompts).\n")
    print("| run | what | output tok/s | TPOT median ms | TTFT median ms | overhead | limit | "
          "result |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for base in ("seed_base", "b32_base"):
        r = runs.get(base)
        if r:
            print(f"| {base} | the base model | {fmt(num(r, 'output_throughput'))} "
                  f"| {fmt(num(r, 'median_tpot_ms'), 3)} | {fmt(num(r, 'median_ttft_ms'))} "
                  f"| - | - | - |")
    for name, base, limit, what in TARGETS:
        r, b = runs.get(name), runs.get(base)
        if r is None:
            continue
        t, bt = num(r, "output_throughput"), num(b, "output_throughput")
        over = None if t is None or not bt else 1.0 - t / bt
        if over is None:
            verdict = "no base" if t is not None else "failed"
        elif limit is not None:
            verdict = "pass" if over <= limit else "FAIL"
        else:  # merged: within the runs' noise (two CVs), or 1 % with a single run
            noise = max(2 * (cv(r, "output_throughput") + cv(b, "output_throughput")), 0.01)
            verdict = ("within noise" if abs(over) <= noise else "outside noise") \
                if name == "seed_merged_r16" else "-"
        print(f"| {name} | {what} | {fmt(t)} | {fmt(num(r, 'median_tpot_ms'), 3)} "
              f"| {fmt(num(r, 'median_ttft_ms'))} | {fmt(None if over is None else 100 * over)} % "
              f"| {'-' if limit is None else f'{100 * limit:.0f} %'} | {verdict} |")
    print()


def table_4_4(out):
    rows = []
    for p in sorted(glob.glob(os.path.join(out, "seed-4.4", "*", "result.json"))):
        r = load(p)
        peak = (((r or {}).get("memory") or {}).get("peaks") or {}).get("engine_demand_bytes")
        rows.append((os.path.basename(os.path.dirname(p)), peak, r))
    if not rows:
        return
    print("## The seed's table 4.4 on the H200 (Llama-2-7B, seed protocol)\n")
    print("| entry | engine peak GiB | P99 latency ms | TTFT median ms | TPOT median ms | "
          "output tok/s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    order = {"bf16": 0, "bf16-lora-r8": 1, "nf4-lora-r8": 2, "bf16-merged-r8": 3}
    for name, peak, r in sorted(rows, key=lambda x: order.get(x[0], 9)):
        print(f"| {name} | {fmt(None if peak is None else peak / GIB)} "
              f"| {fmt(num(r, 'p99_e2el_ms'))} | {fmt(num(r, 'median_ttft_ms'))} "
              f"| {fmt(num(r, 'median_tpot_ms'), 3)} | {fmt(num(r, 'output_throughput'))} |")
    print()


def load_latency(out):
    for path in (os.path.join(out, "load_latency.txt"),
                 os.path.join(out, "extra", "load_latency.txt")):
        if os.path.exists(path):
            print("## Loading an adapter at run time (serve, POST /v1/load_lora_adapter)\n")
            print("Llama-3-8B rank-16 adapters on every linear layer (fp32 safetensors).\n")
            with open(path) as f:
                lines = [line.rstrip() for line in f if "|" in line]
            if lines:
                print("| " + lines[0] + " |")
                print("| --- | --- | ---: |")
                for line in lines[1:]:
                    print("| " + line + " |")
            print()
            return


def tests(out):
    found = False
    for name in ("backend_cuda_test", "engine_cuda_test"):
        j = load(os.path.join(out, "extra", name + ".json"))
        if not j:
            continue
        if not found:
            print("## gpu tests\n")
            found = True
        total = j.get("tests", 0)
        failed = j.get("failures", 0)
        skipped = sum(1 for s in j.get("testsuites", []) for t in s.get("testsuite", [])
                      if t.get("result") == "SKIPPED")
        print(f"- {name}: {total} tests, {failed} failed, {skipped} skipped")
    if found:
        print()


def parity(out):
    """The worst relative L2 per backend and dtype (every row: parity.log)."""
    j = load(os.path.join(out, "extra", "parity", "hf_compare_lora.json"))
    if not j:
        return
    worst, counts = {}, {}
    for r in j.get("rows", []):
        key = (r.get("backend", "-"), r.get("dtype", "-"))
        n = counts.setdefault(key, [0, 0, 0])  # passed, failed, not run
        if "max_rel_l2" in r:
            n[0 if r.get("passed") else 1] += 1
            worst[key] = max(worst.get(key, 0.0), r["max_rel_l2"])
        else:
            n[2] += 1
    print("## Parity against HF transformers + peft (every row: parity.log)\n")
    print("| backend | dtype | passed | failed | not run or error | worst rel L2 | tolerance |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    tol = j.get("tolerance", {})
    for key, (ok, bad, skipped) in sorted(counts.items()):
        w = worst.get(key)
        print(f"| {key[0]} | {key[1]} | {ok} | {bad} | {skipped} "
              f"| {'-' if w is None else f'{w:.2e}'} | {tol.get(key[1], '-')} |")
    print()


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    print("# LoRA on CUDA (issue 16): bench/gpu/lora.sh\n")
    tests(out)
    overheads(out)
    table_4_4(out)
    load_latency(out)
    parity(out)


if __name__ == "__main__":
    main()
