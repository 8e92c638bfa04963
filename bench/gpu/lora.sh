#!/usr/bin/env bash
# One visit to the GPU machine for LoRA on CUDA (issue 16), in this order, each phase skipped
# when the time left (IB_BUDGET_S, 530 s from the start) is too short for it:
#  1. build inferbench and the gpu test binaries;
#  2. the gpu tests: the CUDA LoRA op against the CPU op (CudaLora*) and the CUDA engine with a
#     mixed batch of three adapters and the base against the CPU engine and each request alone
#     (CudaEngineLora*, graphs and eager, fp32 and bf16);
#  3. the targets on Llama-3-8B dummy weights, bf16, seed protocol (static batches of 8, input
#     32 / output 128, 200 prompts): the base, one rank-16 adapter on every linear layer, 16
#     such adapters assigned at random, the adapter merged; and at batch 32 (320 prompts) the
#     base against the 16 adapters round-robin, so every batch holds all 16; the 1- and
#     16-adapter runs again with IB_LORA_FUSED=1 (one launch per group);
#  4. tools/hf_compare_lora.py against HF transformers + peft (Llama-3 and Qwen2 shapes, r = 8
#     and 64, prompts of 24 and 512, served unmerged, cpu:fp32, cuda:fp32, cuda:bf16; at most
#     IB_PARITY_S, 150 s: the JSON keeps the rows that finished);
#  5. the seed's table 4.4 (bench/seed-4.4.yaml: Llama-2-7B bf16, + LoRA r8, NF4 + LoRA, merged);
#  6. the latency of loading an adapter at run time (`serve`, POST /v1/load_lora_adapter);
#  7. a rank sweep (8, 64, 128; one adapter, seed protocol).
# Usage (repository root, < 9 minutes; carry .deps/icu.tar.xz): OUT=dir bash bench/gpu/lora.sh
# What the budget skipped runs in a second call on the still-warm machine (the build in
# IB_BUILD_DIR is kept): OUT=dir2 IB_SKIP_TESTS=1 IB_SKIP_PERF=1 bash bench/gpu/lora.sh
# Environment: IB_BUILD_DIR (build/h200-lora), IB_RUNS (runs per configuration, 1), IB_BUDGET_S,
# IB_SKIP_TESTS=1, IB_SKIP_PARITY=1, IB_SKIP_PERF=1, IB_SKIP_SUITE=1, IB_SKIP_LOAD=1,
# IB_SKIP_SWEEP=1, IB_PARITY_S (150), IB_PARITY_MODES (unmerged; "unmerged,merged" for both).
# Writes summary.md (bench/gpu/lora_summary.py: overheads, table 4.4, load latency), tests.log,
# parity.log, runs.log and lora.tgz (test JSON, parity JSON, result.json files, logs, build.log).
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
# The machine has no libicu: Debian's packages, unpacked (bench/gpu/icu-deps.sh).
source bench/gpu/build_inferbench.sh && use_icu
DEADLINE=$(( T0 + ${IB_BUDGET_S:-530} ))
left() { echo $(( DEADLINE - $(date +%s) )); }
# phase NAME SECONDS: true when the phase is wanted and SECONDS are left (else says why not).
phase() {
  local skip="IB_SKIP_$1"
  if [ "${!skip:-0}" = 1 ]; then echo "phase $1: skipped (IB_SKIP_$1=1)" | tee -a "$O/runs.log"; return 1; fi
  if [ "$(left)" -lt "$2" ]; then echo "phase $1: skipped ($(left) s left, needs $2)" | tee -a "$O/runs.log"; return 1; fi
  echo "phase $1 $(el)"
}
B=${IB_BUILD_DIR:-build/h200-lora}; RUNS=${IB_RUNS:-1}; X=$O/extra; mkdir -p "$X"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$X/env.txt" 2>&1
build_gpu_tests "$B" "$X/build.log" inferbench backend_cuda_test engine_cuda_test || exit 1
echo "built $(el)"; BIN=$B/bin/inferbench

if phase TESTS 60; then
  timeout 100 "$B/src/backend/cuda/backend_cuda_test" --gtest_filter='*CudaLora*' \
    --gtest_output="json:$X/backend_cuda_test.json" > "$O/tests.log" 2>&1
  echo "backend_cuda_test rc=$? $(el)" | tee -a "$O/runs.log"
  timeout 150 "$B/src/engine/engine_cuda_test" --gtest_filter='*CudaEngineLora*' \
    --gtest_output="json:$X/engine_cuda_test.json" >> "$O/tests.log" 2>&1
  echo "engine_cuda_test rc=$? $(el)" | tee -a "$O/runs.log"
  grep -E "^\[  FAILED  \]|Failure|Expected|Which is|PASSED|FAILED TEST" "$O/tests.log" | head -30
fi

# Random adapters: Llama-3-8B's shapes, every linear layer (numpy: seconds each).
A=bench/adapters; mkdir -p "$A"
make_l3() {  # rank seed
  [ -f "$A/l3-r$1-$2/adapter_model.safetensors" ] ||
    python3 tools/make_lora.py --hidden-size 4096 --intermediate-size 14336 --num-heads 32 \
      --num-kv-heads 8 --layers 32 --rank "$1" --seed "$2" --numpy --out "$A/l3-r$1-$2" > /dev/null
}
R=$O/runs; mkdir -p "$R"
# run NAME FLAGS...: one `inferbench run` into $R/NAME, within the time left (skipped under 40 s).
run() { local name=$1 lim=$(( $(left) - 10 )); shift
  [ "$lim" -gt "${RUN_TIMEOUT:-150}" ] && lim=${RUN_TIMEOUT:-150}
  [ "$lim" -lt 30 ] && { echo "$name: skipped ($(left) s left)" | tee -a "$O/runs.log"; return; }
  timeout -s INT "$lim" "$BIN" run --device cuda --dtype bf16 --load-format dummy \
    --disable-tqdm --result-dir "$R/$name" --overwrite "$@" > "$R/$name.log" 2>&1
  echo "$name rc=$? $(el) $(grep -E "Output token throughput|TPOT median|rror" "$R/$name.log" | tr -s ' ' | tr '\n' ' ')" | tee -a "$O/runs.log"; }
L3=(--model llama-3-8b --load-mode static --input-len 32 --output-len 128 --runs "$RUNS" --seed 0
    --max-model-len 4096)
SEED=("${L3[@]}" --batch-size 8 --num-prompts 200)
B32=("${L3[@]}" --batch-size 32 --num-prompts 320)
mods() {  # rank count: name=path items
  for i in $(seq 0 $(( $2 - 1 ))); do printf 'a%d=%s ' "$i" "$A/l3-r$1-$i"; done; }

if phase PERF 150; then
  export -f make_l3; export A
  seq 0 15 | xargs -P 16 -I{} bash -c 'make_l3 16 {}'
  echo "adapters made $(el)"
  run seed_base "${SEED[@]}"
  run seed_lora1_r16 "${SEED[@]}" --enable-lora --max-loras 1 --max-lora-rank 16 \
    --lora-modules $(mods 16 1)
  run seed_lora16_r16_random "${SEED[@]}" --enable-lora --max-loras 16 --max-lora-rank 16 \
    --lora-modules $(mods 16 16) --lora-assignment random
  run seed_merged_r16 "${SEED[@]}" --merge-lora --lora-modules $(mods 16 1)
  # The A/B: each group's shrink and expand in one launch (IB_LORA_FUSED=1).
  IB_LORA_FUSED=1 run seed_lora1_r16_fused "${SEED[@]}" --enable-lora --max-loras 1 \
    --max-lora-rank 16 --lora-modules $(mods 16 1)
  IB_LORA_FUSED=1 run seed_lora16_r16_random_fused "${SEED[@]}" --enable-lora --max-loras 16 \
    --max-lora-rank 16 --lora-modules $(mods 16 16) --lora-assignment random
  run b32_base "${B32[@]}"
  run b32_lora16_r16_rr "${B32[@]}" --enable-lora --max-loras 16 --max-lora-rank 16 \
    --lora-modules $(mods 16 16) --lora-assignment round-robin
fi

if phase PARITY 90; then
  export PYTHONUNBUFFERED=1
  PS=${IB_PARITY_S:-150}
  timeout $(( $(left) - 150 > PS ? PS : ( $(left) - 150 > 80 ? $(left) - 150 : 80 ) )) \
    python3 tools/hf_compare_lora.py --inferbench "$BIN" --families llama-3,qwen2 --ranks 8,64 \
    --runs cpu:fp32,cuda:fp32,cuda:bf16 --modes "${IB_PARITY_MODES:-unmerged}" \
    --prompt-lens 24,512 --steps 8 --out "$X/parity" 2>&1 | grep -v Warning > "$O/parity.log"
  echo "hf_compare_lora rc=${PIPESTATUS[0]} $(el)" | tee -a "$O/runs.log"; tail -60 "$O/parity.log"
fi

if phase SUITE 150; then
  [ -f "$A/llama-2-7b-r8/adapter_model.safetensors" ] ||
    python3 tools/make_lora.py --hidden-size 4096 --intermediate-size 11008 --num-heads 32 \
      --num-kv-heads 32 --layers 32 --rank 8 --alpha 16 --numpy --out "$A/llama-2-7b-r8" > /dev/null
  timeout -s INT $(( $(left) - 60 > 60 ? $(left) - 60 : 60 )) "$BIN" suite bench/seed-4.4.yaml \
    --result-dir "$O/seed-4.4" --override "runs=$RUNS" > "$X/suite.log" 2>&1
  echo "suite seed-4.4 rc=$? $(el)" | tee -a "$O/runs.log"
  grep -E "^\| [0-9-]" "$O/seed-4.4/leaderboard.md" 2>/dev/null
fi

if phase LOAD 60; then
  make_l3 16 0; make_l3 16 1; make_l3 16 2
  PORT=18777
  "$BIN" serve --model llama-3-8b --device cuda --dtype bf16 --load-format dummy \
    --max-model-len 4096 --enable-lora --max-loras 4 --max-lora-rank 16 --port $PORT \
    > "$X/serve.log" 2>&1 &
  SPID=$!
  timeout 100 python3 - "$PORT" "$A" > "$O/load_latency.txt" 2>&1 <<'EOF'
import json, sys, time, urllib.request
port, adapters = sys.argv[1], sys.argv[2]
url = f"http://127.0.0.1:{port}/v1/"
def post(path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t = time.perf_counter()
    with urllib.request.urlopen(req) as r:
        text = r.read().decode()
    return text, (time.perf_counter() - t) * 1e3
for _ in range(180):  # the server loads the model and captures its graphs first
    try:
        urllib.request.urlopen(url + "models").read()
        break
    except Exception:
        time.sleep(0.5)
print("adapter | server reply | client ms")
for i in range(3):  # Llama-3-8B rank-16 adapters on every linear layer (fp32 files, 168 MB)
    text, ms = post("load_lora_adapter", {"lora_name": f"a{i}", "lora_path": f"{adapters}/l3-r16-{i}"})
    print(f"a{i} | {text.strip()} | {ms:.1f}")
for i in range(3):
    post("unload_lora_adapter", {"lora_name": f"a{i}"})
text, ms = post("load_lora_adapter", {"lora_name": "again", "lora_path": f"{adapters}/l3-r16-0"})
print(f"again (after unload) | {text.strip()} | {ms:.1f}")
EOF
  echo "load latency rc=$? $(el)" | tee -a "$O/runs.log"; cat "$O/load_latency.txt"
  kill -INT "$SPID" 2>/dev/null; sleep 2; kill -KILL "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null
fi

if phase SWEEP 90; then
  for r in 8 64 128; do
    [ "$(left)" -lt 45 ] && { echo "sweep r$r: skipped ($(left) s left)" | tee -a "$O/runs.log"; continue; }
    make_l3 "$r" 0
    run "seed_lora1_r$r" "${SEED[@]}" --enable-lora --max-loras 1 --max-lora-rank "$r" \
      --lora-modules "a0=$A/l3-r$r-0"
  done
fi

python3 bench/gpu/lora_summary.py "$O" > "$O/summary.md" 2>&1; cat "$O/summary.md"
[ -d "$X/parity" ] && cp "$X/parity/"*.json "$X/" 2>/dev/null
find "$R" "$O/seed-4.4" \( -name requests.jsonl -o -name allocations.csv -o -name memory.csv \) \
  -delete 2>/dev/null
mv "$O/load_latency.txt" "$X/" 2>/dev/null
# At most 6 files come back: the rest in lora.tgz.
( cd "$O" && tar czf lora.tgz extra runs seed-4.4 2>/dev/null; rm -rf extra runs seed-4.4 )
echo "done $(el)"
