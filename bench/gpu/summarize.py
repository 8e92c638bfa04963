#!/usr/bin/env python3
"""Summary of one bench/gpu/run.sh visit: every `inferbench run` result directory under RESULTS
(medians over runs, the engine's decode bandwidth and host overhead), the targets of issue 3
checked, HF transformers' throughput on the seed's protocol and the ratio, and the HF comparison.

Usage: summarize.py RESULTS_DIR SUMMARY_JSON  (prints Markdown)
"""
import glob
import json
import os
import statistics
import sys

# name: (label, key, comparison, threshold)
TARGETS = {
    "llama3-8b_b1": [("decode tok/s (1000 / median TPOT)", "decode_tok_s", ">=", 235),
                     ("host overhead per decode step", "host_overhead_pct", "<", 5.0)],
    "llama3-8b_seed": [("output tok/s", "output_tok_s", ">=", 1800),
                       ("median TTFT ms", "median_ttft_ms", "<=", 15)],
    "llama3-8b_prefill_8x512": [("prompt tok/s", "input_tok_s", ">=", 35000)],
    "llama3-8b_ttft_2048": [("median TTFT ms", "median_ttft_ms", "<=", 60)],
    "llama3-8b_cont_1024": [("output tok/s", "output_tok_s", ">=", 18000)],
}


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except Exception:
        return None


def row_of(name, r):
    runs = [x["metrics"] for x in r.get("runs", [])]
    input_tok_s = statistics.median(
        [m["total_input_tokens"] / m["duration"] for m in runs if m.get("duration")]) if runs else 0
    perf = r.get("engine", {}).get("performance", {})
    dec = perf.get("decode", {})
    pre = perf.get("prefill", {})
    tpot = r.get("median_tpot_ms") or 0
    cfg = r.get("config", {})
    return dict(
        name=name, model=r.get("model_id"), load=cfg.get("load_description"),
        graphs=cfg.get("cuda_graphs"), runs=r.get("num_runs"),
        completed=r.get("completed"), failed=r.get("failed"),
        output_tok_s=r.get("output_throughput", 0), input_tok_s=input_tok_s,
        median_ttft_ms=r.get("median_ttft_ms", 0), median_tpot_ms=tpot,
        decode_tok_s=1000.0 / tpot if tpot else 0,
        decode_step_ms=dec.get("median_step_ms", 0), decode_device_ms=dec.get("median_device_ms", 0),
        host_overhead_pct=100 * dec.get("median_host_overhead_fraction", 0),
        decode_tb_s=dec.get("achieved_bytes_per_s", 0) / 1e12,
        decode_device_tb_s=dec.get("achieved_device_bytes_per_s", 0) / 1e12,
        decode_pct_ceiling=100 * dec.get("fraction_of_copy_ceiling", 0),
        decode_pct_reference=100 * dec.get("fraction_of_reference_copy", 0),
        graph_steps=dec.get("graph_steps", 0), decode_steps=dec.get("steps", 0),
        prefill_tb_s=pre.get("achieved_bytes_per_s", 0) / 1e12,
        ceiling_tb_s=perf.get("copy_ceiling_bytes_per_s", 0) / 1e12,
        graph_bytes=perf.get("graphs", {}).get("bytes", 0),
        num_graphs=perf.get("graphs", {}).get("count", 0))


def check(row, targets):
    out = []
    for label, key, op, thr in targets:
        v = row[key]
        ok = {">=": v >= thr, "<=": v <= thr, "<": v < thr}[op]
        out.append(dict(name=row["name"], target=f"{label} {op} {thr}", value=round(v, 2),
                        met=bool(ok)))
    return out


def main():
    res, out_json = sys.argv[1], sys.argv[2]
    rows, checks = [], []
    for path in sorted(glob.glob(os.path.join(res, "*", "result.json"))):
        name = os.path.basename(os.path.dirname(path))
        r = load(path)
        if not r:
            continue
        row = row_of(name, r)
        rows.append(row)
        checks += check(row, TARGETS.get(name, []))
    hf = load(os.path.join(res, "hf_bench.json"))
    cmp_ = load(os.path.join(res, "hf_compare.json"))
    seed = next((r for r in rows if r["name"] == "llama3-8b_seed"), None)
    ratio = seed["output_tok_s"] / hf["output_throughput_tok_s"] if hf and seed else None

    print("| run | load | out tok/s | prompt tok/s | TTFT ms | TPOT ms | decode step ms (device) "
          "| host % | decode TB/s | % copy ceiling | % 4.16 TB/s | graph steps |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['name']} | {r['load']} | {r['output_tok_s']:.1f} | {r['input_tok_s']:.0f} | "
              f"{r['median_ttft_ms']:.2f} | {r['median_tpot_ms']:.3f} | {r['decode_step_ms']:.3f} "
              f"({r['decode_device_ms']:.3f}) | {r['host_overhead_pct']:.1f} | "
              f"{r['decode_tb_s']:.2f} | {r['decode_pct_ceiling']:.1f} | "
              f"{r['decode_pct_reference']:.1f} | {r['graph_steps']}/{r['decode_steps']} |")
    if rows:
        print(f"\nmeasured copy ceiling: {rows[0]['ceiling_tb_s']:.2f} TB/s; graphs: "
              f"{rows[0]['num_graphs']} ({rows[0]['graph_bytes'] / 2**20:.1f} MiB)")
    if hf:
        print(f"\nHF transformers eager (seed's protocol, {hf['timed_batches']} timed batches of "
              f"{hf['batch_size']}): {hf['output_throughput_tok_s']:.1f} output tok/s, median TTFT "
              f"{hf['median_ttft_ms']:.1f} ms" + (f"; inferbench / HF = {ratio:.1f}x" if ratio else ""))
    if cmp_:
        print("\n| HF compare | dtype | max rel L2 | greedy = HF | result |")
        print("| --- | --- | ---: | ---: | --- |")
        for c in cmp_["rows"]:
            if "error" in c:
                print(f"| {c['shape']} | - | - | - | ERROR {c['error'][:160]} |")
            else:
                print(f"| {c['shape']} | {c['dtype']} | {c['max_rel_l2']:.2e} | "
                      f"{c['greedy_equal_steps']}/{c['steps']} | {'pass' if c['passed'] else 'FAIL'} |")
    print("\n| target | value | met |")
    print("| --- | ---: | --- |")
    for c in checks:
        print(f"| {c['name']}: {c['target']} | {c['value']} | {'yes' if c['met'] else 'NO'} |")
    with open(out_json, "w") as f:
        json.dump(dict(rows=rows, checks=checks, hf_bench=hf, hf_ratio=ratio, hf_compare=cmp_), f,
                  indent=2)


if __name__ == "__main__":
    main()
