#!/usr/bin/env bash
# Benchmarks of `inferbench serve` and the HTTP client on this machine (CPU), on loopback:
#  1. client capacity: the null model (no compute) on core 1, the client pinned to core 0, with
#     STREAMS concurrent streams (default 2000) at TOKEN_RATE tokens/s each (default 60);
#     the client reports its own per-event overhead, event-loop lag and whether it was the
#     bottleneck (result.json -> engine.client);
#  2. server overhead on TTFT at low load: tiny-15m on the CPU, one request at a time, in process
#     (--backend native) and through `serve` + `--backend openai` with the same engine settings.
# Results: bench/results/cpu/server-*/ (full result directories) and bench/results/cpu/server.md.
# Usage: bench/server.sh [BUILD_DIR]   (default build/release; build it first)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/release}
BIN=$BUILD/bin/inferbench
OUT=bench/results/cpu
STREAMS=${STREAMS:-2000}
TOKEN_RATE=${TOKEN_RATE:-60}
OUTPUT_LEN=${OUTPUT_LEN:-120}
mkdir -p "$OUT"
[[ -x $BIN ]] || { echo "bench/server.sh: build first ($BIN missing)" >&2; exit 2; }
cores=$(nproc)
client_core=0
server_cores=$((cores > 1 ? 1 : 0))-$((cores - 1))

serve() {  # serve ARGS... -> sets SERVER_PID and PORT
  local log
  log=$(mktemp)
  taskset -c "$server_cores" "$BIN" serve --port 0 "$@" 2>"$log" &
  SERVER_PID=$!
  for _ in $(seq 600); do
    PORT=$(grep -o 'on http://127.0.0.1:[0-9]*' "$log" | grep -o '[0-9]*$' || true)
    [[ -n $PORT ]] && break
    sleep 0.1
  done
  [[ -n $PORT ]] || { cat "$log" >&2; exit 1; }
}
stop() { kill -TERM "$SERVER_PID"; wait "$SERVER_PID" || true; }

echo "== 1. client capacity: $STREAMS streams x $TOKEN_RATE tok/s against the null model"
serve --model null --token-rate "$TOKEN_RATE"
taskset -c $client_core "$BIN" run --backend openai --base-url "http://127.0.0.1:$PORT" \
  --model null --max-concurrency "$STREAMS" --num-prompts $((STREAMS * 2)) --input-len 16 \
  --output-len "$OUTPUT_LEN" --num-warmups "$STREAMS" --runs 3 --disable-tqdm \
  --result-dir "$OUT/server-null-client" --overwrite
stop

echo "== 2. TTFT at low load: tiny-15m in process, then through the server"
ENGINE=(--model tiny-15m --num-threads 1 --kv-cache-memory 256MiB --seed 0)
WORKLOAD=(--max-concurrency 1 --num-prompts 64 --input-len 64 --output-len 16 --num-warmups 8
  --runs 3 --disable-tqdm)
taskset -c "$server_cores" "$BIN" run --backend native "${ENGINE[@]}" "${WORKLOAD[@]}" \
  --result-dir "$OUT/server-ttft-native" --overwrite
serve "${ENGINE[@]}"
taskset -c $client_core "$BIN" run --backend openai --base-url "http://127.0.0.1:$PORT" \
  --model tiny-15m "${WORKLOAD[@]}" --result-dir "$OUT/server-ttft-openai" --overwrite
stop

python3 - "$OUT" <<'EOF'
import json, sys
out = sys.argv[1]
def load(name):
    return json.load(open(f"{out}/{name}/result.json"))
null = load("server-null-client")
client = null["engine"]["client"]
native, http = load("server-ttft-native"), load("server-ttft-openai")
lines = [
    "# Server and HTTP client on the CPU (bench/server.sh)",
    "",
    f"Machine: {null['env'].get('cpu', {}).get('model', '?')}, {null['env'].get('cpu', {}).get('logical_cores', '?')} logical cores;"
    f" git {null['env'].get('git_sha', '?')}; client pinned to core 0, server to the others.",
    "",
    "## Client capacity against the null model",
    "",
    "| concurrent streams | output tok/s (median of 3) | SSE events | requests ok/failed | loop CPU per event | handler per event | loop CPU share | event-loop lag p50 / p99 | client bound |",
    "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    f"| {null['max_concurrency']} | {null['output_throughput']:.0f} | {client['sse_events']} | {null['completed']}/{null['failed']} |"
    f" {client['loop_cpu_us_per_event']:.2f} us | {client['handler_us_per_event']:.2f} us |"
    f" {client['loop_cpu_fraction']:.2f} | {client['event_loop_lag_ms']['p50']:.2f} / {client['event_loop_lag_ms']['p99']:.2f} ms |"
    f" {client['client_bound']} |",
    "",
    "Runs: " + ", ".join(f"{v:.0f}" for v in null['spread']['output_throughput']['per_run']) + " tok/s."
    if 'spread' in null and 'output_throughput' in null.get('spread', {}) else "",
    "" if 'timing_warning' not in client else f"Client note: {client['timing_warning']}.",
    "",
    "## TTFT at low load (tiny-15m, one request at a time, 64 prompt / 16 output tokens)",
    "",
    "| target | median TTFT ms | mean TTFT ms | p99 TTFT ms | mean ITL ms |",
    "| --- | ---: | ---: | ---: | ---: |",
]
for name, r in (("native (in process)", native), ("openai -> serve (loopback)", http)):
    lines.append(f"| {name} | {r['median_ttft_ms']:.3f} | {r['mean_ttft_ms']:.3f} | {r['p99_ttft_ms']:.3f} | {r['mean_itl_ms']:.3f} |")
lines += ["", f"Server overhead on median TTFT: {http['median_ttft_ms'] - native['median_ttft_ms']:.3f} ms"
          f" (mean: {http['mean_ttft_ms'] - native['mean_ttft_ms']:.3f} ms).", ""]
open(f"{out}/server.md", "w").write("\n".join(lines))
print("\n".join(lines))
EOF
