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
PAIRS=${PAIRS:-5}
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

echo "== 2. TTFT at low load: tiny-15m in process and through the server, alternating $PAIRS times"
# Unpinned (every process may use every core) and alternating, so that slow drifts of a shared
# machine fall on both sides alike; the median of the per-pair differences is reported.
ENGINE=(--model tiny-15m --num-threads 1 --kv-cache-memory 256MiB --seed 0)
WORKLOAD=(--max-concurrency 1 --num-prompts 32 --input-len 64 --output-len 8 --num-warmups 4
  --runs 1 --disable-tqdm)
"$BIN" serve --port 0 "${ENGINE[@]}" 2>"$OUT/serve-tiny.log" &
SERVER_PID=$!
PORT=""
for _ in $(seq 600); do
  PORT=$(grep -o 'on http://127.0.0.1:[0-9]*' "$OUT/serve-tiny.log" | grep -o '[0-9]*$' || true)
  [[ -n $PORT ]] && break
  sleep 0.1
done
for i in $(seq "$PAIRS"); do
  "$BIN" run --backend native "${ENGINE[@]}" "${WORKLOAD[@]}" \
    --result-dir "$OUT/server-ttft-native-$i" --overwrite >/dev/null
  "$BIN" run --backend openai --base-url "http://127.0.0.1:$PORT" --model tiny-15m "${WORKLOAD[@]}" \
    --result-dir "$OUT/server-ttft-openai-$i" --overwrite >/dev/null
done
curl -s "http://127.0.0.1:$PORT/metrics" >"$OUT/server-ttft-metrics.txt"
stop

echo "== 3. round trip alone: the null model answers at once (no compute), one request at a time"
serve --model null
taskset -c $client_core "$BIN" run --backend openai --base-url "http://127.0.0.1:$PORT" \
  --model null --max-concurrency 1 --num-prompts 500 --input-len 64 --output-len 8 \
  --num-warmups 20 --runs 3 --disable-tqdm --result-dir "$OUT/server-null-roundtrip" --overwrite \
  >/dev/null
stop

# The per-request lines of the large runs are not kept (tens of MB); result.json has everything else.
rm -f "$OUT"/server-null-client/requests.jsonl "$OUT"/server-null-roundtrip/requests.jsonl
rm -rf "$OUT"/server-ttft-native "$OUT"/server-ttft-openai
LOAD_AVERAGE=$(cut -d' ' -f1-3 /proc/loadavg) python3 - "$OUT" <<'EOF'
import json, os, sys
out = sys.argv[1]
load_average = os.environ.get("LOAD_AVERAGE", "?")
def load(name):
    return json.load(open(f"{out}/{name}/result.json"))
null = load("server-null-client")
client = null["engine"]["client"]
pairs = []
import glob, statistics
for n in range(1, 100):
    try:
        pairs.append((load(f"server-ttft-native-{n}"), load(f"server-ttft-openai-{n}")))
    except OSError:
        break
rt = load("server-null-roundtrip")
lines = [
    "# Server and HTTP client on the CPU (bench/server.sh)",
    "",
    f"Machine: {null['env']['cpu'].get('model', '?')}, {null['env']['cpu'].get('logical_cores', '?')} logical cores;"
    f" inferbench git {null['env']['inferbench'].get('git_sha', '?')}"
    f"{' (dirty)' if null['env']['inferbench'].get('git_dirty') else ''}; date {null['date']}.",
    f"Load average at the end: {load_average}. The machine may be shared: numbers move with other work on it.",
    "",
    "## Client capacity against the null model (client pinned to core 0, server to core 1)",
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
    "## TTFT at low load (tiny-15m, one request at a time, 64 prompt / 8 output tokens)",
    "",
    "Alternating runs of 32 requests: in process (`--backend native`), then through `serve` on loopback (`--backend openai`).",
    "",
    "| pair | native median TTFT ms | openai median TTFT ms | difference ms |",
    "| ---: | ---: | ---: | ---: |",
]
diffs = []
for i, (n, h) in enumerate(pairs, 1):
    d = h["median_ttft_ms"] - n["median_ttft_ms"]
    diffs.append(d)
    lines.append(f"| {i} | {n['median_ttft_ms']:.3f} | {h['median_ttft_ms']:.3f} | {d:+.3f} |")
metrics = open(f"{out}/server-ttft-metrics.txt").read()
def series(name):
    for line in metrics.splitlines():
        if line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return float("nan")
server_ttft = 1000 * series("inferbench_time_to_first_token_seconds_sum") / series("inferbench_time_to_first_token_seconds_count")
warm = 4 * len(pairs)  # the server also saw the warm-up requests
client_ttft = statistics.mean(h["mean_ttft_ms"] for _, h in pairs)
native_ttft = statistics.mean(n["mean_ttft_ms"] for n, _ in pairs)
lines += ["", f"Median of the per-pair differences: {statistics.median(diffs):+.3f} ms.", "",
          f"Means over the pairs: native {native_ttft:.3f} ms; through the server, as the client saw it {client_ttft:.3f} ms;"
          f" the server's own TTFT (request arrival to first token, /metrics, warm-ups included) {server_ttft:.3f} ms."
          " The HTTP path is the gap between the last two; the rest of the difference to native is the engine"
          " itself running slower in the serving process on this 2-core machine while the client process shares it.", "",
          "## The round trip alone (null model, no compute, one request at a time)", "",
          f"Client TTFT median {rt['median_ttft_ms']:.3f} ms, mean {rt['mean_ttft_ms']:.3f} ms, p99 {rt['p99_ttft_ms']:.3f} ms"
          f" (median of 3 runs of 500 requests): what HTTP, the server and the client add to a first token on loopback.", ""]
open(f"{out}/server.md", "w").write("\n".join(lines))
print("\n".join(lines))
EOF
