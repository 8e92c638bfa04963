#!/usr/bin/env bash
# GPU telemetry on the H200 machine: one example result (report.html, heatmap.svg, memory.csv,
# allocations.csv, result.json) that shows load, warm-up and run phases and the KV cache filling,
# and the telemetry-off vs telemetry-on decode throughput comparison (target: < 1 % apart).
# Chromium is not on the GPU machine, so no screenshot here: open report.html elsewhere.
#
# report.html inlines plotly.js from tools/npm/node_modules (git-ignored): carry that folder to
# the device, or set INFERBENCH_PLOTLY_JS; without it the run says so and skips report.html.
# Writes under $OUT (./gpu-out otherwise): example/, ab/, telemetry.log, overhead.json.
# Options (environment): IB_JOBS (default 16), IB_MODEL (default llama-3-8b), IB_AB_PAIRS (3),
# IB_SKIP_BUILD=1 (reuse build/h200), IB_SKIP_EXAMPLE=1 (only the A/B), IB_AB_INTERVAL (sampling period of the "on" runs, ms;
# default 100, the default of inferbench run). A dry run elsewhere: IB_BUILD=build/release
# IB_SKIP_BUILD=1 IB_DEVICE=cpu IB_MODEL=tiny-15m IB_EXAMPLE_IN=64 IB_EXAMPLE_OUT=64
# IB_EXAMPLE_PROMPTS=32 IB_AB_PROMPTS=16 bench/gpu/telemetry.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source bench/gpu/build_inferbench.sh
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
JOBS="${IB_JOBS:-16}"
MODEL="${IB_MODEL:-llama-3-8b}"
PAIRS="${IB_AB_PAIRS:-3}"
AB_INTERVAL="${IB_AB_INTERVAL:-100}"
BUILD="${IB_BUILD:-build/h200}"
DEVICE="${IB_DEVICE:-cuda}"
EX_IN="${IB_EXAMPLE_IN:-1024}"
EX_OUT="${IB_EXAMPLE_OUT:-512}"
EX_PROMPTS="${IB_EXAMPLE_PROMPTS:-256}"
AB_PROMPTS="${IB_AB_PROMPTS:-96}"
IB="$BUILD/bin/inferbench"
exec > >(tee "$OUT/telemetry.log") 2>&1

echo "== build inferbench (h200 preset)"
if [ "${IB_SKIP_BUILD:-0}" != 1 ]; then build_inferbench "$OUT/build.log" || exit 1; fi
"$IB" env

if [ "${IB_SKIP_EXAMPLE:-0}" != 1 ]; then
echo "== example: continuous batching, long enough outputs that the KV cache visibly fills"
"$IB" run --model "$MODEL" --device "$DEVICE" --max-concurrency 64 --num-prompts "$EX_PROMPTS" \
  --input-len "$EX_IN" --output-len "$EX_OUT" --runs 3 --memory-sample-interval 10 --disable-tqdm \
  --result-dir "$OUT/example" --overwrite
ls -la "$OUT/example"
fi

echo "== telemetry off vs on ($AB_INTERVAL ms): the seed's protocol (batch 8, in 32 / out 128), alternating"
for i in $(seq 1 "$PAIRS"); do
  for mode in off on; do
    extra=(--memory-sample-interval "$AB_INTERVAL")
    [ "$mode" = off ] && extra=(--disable-telemetry)
    "$IB" run --model "$MODEL" --device "$DEVICE" --batch-size 8 --input-len 32 --output-len 128 \
      --num-prompts "$AB_PROMPTS" --runs 3 --disable-tqdm "${extra[@]}" \
      --result-dir "$OUT/ab/$mode-$i" --overwrite >/dev/null
  done
done
python3 - "$OUT" "$PAIRS" <<'PY'
import json, os, statistics, sys
out, pairs = sys.argv[1], int(sys.argv[2])
def tps(mode, i):
    r = json.load(open(os.path.join(out, "ab", f"{mode}-{i}", "result.json")))
    return r["output_throughput"], r["median_tpot_ms"]
rows = {m: [tps(m, i) for i in range(1, pairs + 1)] for m in ("off", "on")}
off = statistics.median(t for t, _ in rows["off"])
on = statistics.median(t for t, _ in rows["on"])
result = {"sample_interval_ms": int(os.environ.get("IB_AB_INTERVAL", "100")),
          "off_output_tok_s": [t for t, _ in rows["off"]], "on_output_tok_s": [t for t, _ in rows["on"]],
          "off_median": off, "on_median": on, "on_vs_off_pct": 100 * (on - off) / off,
          "off_tpot_ms": [p for _, p in rows["off"]], "on_tpot_ms": [p for _, p in rows["on"]]}
json.dump(result, open(os.path.join(out, "overhead.json"), "w"), indent=2)
print(f"output tok/s, telemetry off: {off:.1f}, on: {on:.1f} ({result['on_vs_off_pct']:+.2f} %)")
if not os.path.exists(os.path.join(out, "example", "result.json")):
    sys.exit(0)
e = json.load(open(os.path.join(out, "example", "result.json")))
m = e["memory"]
print("sampler:", json.dumps(m.get("sampler")))
print("nvml call latency (us):", m.get("nvml", {}).get("mean_call_latency_us"))
print("peaks (GiB):", {k: round(v / 2**30, 3) for k, v in m.get("peaks", {}).items() if v})
print("energy:", e["energy"].get("method"), "tokens/J", e["energy"].get("output_tokens_per_joule"))
PY
