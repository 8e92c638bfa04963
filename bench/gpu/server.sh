#!/usr/bin/env bash
# One visit to the GPU machine for the server: build, serve Llama-3-8B shapes (dummy bf16
# weights) on the GPU, answer curl, benchmark it with `inferbench run --backend openai` against
# the same workload in process (--backend native), and calibrate the client against the null
# model. Writes under $OUT (./gpu-out otherwise): env.txt, build.log, curl.txt, serve.log and
# result directories server-*/, then a summary table (server.md) printed last.
# Options (environment): IB_JOBS (default 16), IB_MODEL (default llama-3-8b), IB_ONLY_CLIENT=1
# (only the null-model client calibration).
set -uo pipefail
cd "$(dirname "$0")/../.."
source bench/gpu/build_inferbench.sh
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
JOBS="${IB_JOBS:-16}"
MODEL="${IB_MODEL:-llama-3-8b}"
BUILD=build/h200
BIN=$BUILD/bin/inferbench
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "git: $(cat GIT_COMMIT 2>/dev/null || git rev-parse HEAD 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1
  nproc
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

echo "== build"
build_inferbench "$OUT/build.log" || exit 1

SERVES=0
serve() {  # serve ARGS... -> SERVER_PID, PORT; each server its own log (a port read from an
  # earlier server's lines would point the client at a closed socket)
  SERVES=$((SERVES + 1))
  SERVE_LOG="$OUT/serve-$SERVES.log"
  "$BIN" serve --port 0 "$@" 2>"$SERVE_LOG" &
  SERVER_PID=$!
  PORT=""
  for _ in $(seq 1200); do
    PORT=$(grep -o 'on http://127.0.0.1:[0-9]*' "$SERVE_LOG" | tail -1 | grep -o '[0-9]*$' || true)
    [[ -n $PORT ]] && kill -0 "$SERVER_PID" 2>/dev/null && break
    sleep 0.1
  done
  [[ -n $PORT ]] || { tail -20 "$SERVE_LOG"; exit 1; }
}
stop() { kill -TERM "$SERVER_PID"; wait "$SERVER_PID"; echo "server exit: $?" >>"$SERVE_LOG"; }

ENGINE=(--model "$MODEL" --device cuda --load-format dummy --max-num-seqs 128)
LOW=(--max-concurrency 1 --num-prompts 32 --input-len 512 --output-len 64 --num-warmups 4 --runs 3
  --disable-tqdm)
HIGH=(--max-concurrency 64 --num-prompts 256 --input-len 512 --output-len 128 --num-warmups 64
  --runs 3 --disable-tqdm)

if [ "${IB_ONLY_CLIENT:-0}" != 1 ]; then  # IB_ONLY_CLIENT=1: only the client calibration
echo "== in process (native): low load, then concurrency 64"
"$BIN" run --backend native "${ENGINE[@]}" "${LOW[@]}" --result-dir "$OUT/server-native-low"
"$BIN" run --backend native "${ENGINE[@]}" "${HIGH[@]}" --result-dir "$OUT/server-native-high"

echo "== serve + curl"
serve "${ENGINE[@]}"
URL="http://127.0.0.1:$PORT"
{
  curl -s "$URL/health" -w 'health %{http_code}\n'
  curl -s "$URL/v1/models"; echo
  curl -s "$URL/v1/completions" -d '{"prompt": "The capital of France is", "max_tokens": 8}'; echo
  curl -sN "$URL/v1/chat/completions" -d '{"messages": [{"role": "user", "content": "Hi"}],
    "max_tokens": 4, "stream": true, "stream_options": {"include_usage": true}}'
  curl -s "$URL/v1/completions" -d '{"prompt": "x", "max_tokens": -1}' -w '\nbad input %{http_code}\n'
} >"$OUT/curl.txt" 2>&1
cat "$OUT/curl.txt"

echo "== run --backend openai against serve: low load, then concurrency 64"
"$BIN" run --backend openai --base-url "$URL" --model "$MODEL" "${LOW[@]}" \
  --result-dir "$OUT/server-openai-low"
"$BIN" run --backend openai --base-url "$URL" --model "$MODEL" "${HIGH[@]}" \
  --result-dir "$OUT/server-openai-high"
curl -s "$URL/metrics" >"$OUT/metrics.txt"
stop
fi

echo "== client calibration: null model, 2000 streams x 60 tok/s, client on one core"
serve --model null --token-rate 60
taskset -c 0 "$BIN" run --backend openai --model null --max-concurrency 2000 \
  --num-prompts 4000 --input-len 16 --output-len 120 --num-warmups 2000 --runs 3 --disable-tqdm \
  --base-url "http://127.0.0.1:$PORT" --result-dir "$OUT/server-null-client"
stop

python3 - "$OUT" <<'EOF' | tee "$OUT/server.md"
import json, sys
out = sys.argv[1]
def load(n):
    try:
        return json.load(open(f"{out}/{n}/result.json"))
    except OSError:
        return None
print("| run | completed | output tok/s | median TTFT ms | mean TTFT ms | mean ITL ms | client bound |")
print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
for n in ("server-native-low", "server-openai-low", "server-native-high", "server-openai-high",
          "server-null-client"):
    r = load(n)
    if r is None:
        print(f"| {n} | missing | | | | | |")
        continue
    client = r.get("engine", {}).get("client", {})
    print(f"| {n} | {r['completed']} | {r['output_throughput']:.0f} | {r['median_ttft_ms']:.3f} |"
          f" {r['mean_ttft_ms']:.3f} | {r['mean_itl_ms']:.3f} | {client.get('client_bound', '-')} |")
lo_n, lo_h = load("server-native-low"), load("server-openai-low")
if lo_n and lo_h:
    print(f"\nServer overhead on median TTFT at low load: "
          f"{lo_h['median_ttft_ms'] - lo_n['median_ttft_ms']:.3f} ms")
EOF
