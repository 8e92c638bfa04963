#!/usr/bin/env bash
# One visit to the GPU machine: build the h200 preset, run the gpu-labelled tests, then the engine
# benchmarks with `inferbench run` (3 runs each, median), HF transformers eager on the seed's
# protocol (tools/hf_bench.py) and the HF comparison (tools/hf_compare.py); the summary table is
# printed last. A failing step is logged and the next one runs.
# Writes under $OUT (./gpu-out otherwise): env.txt, summary.md, summary.json, results.tgz (every
# result directory, logs, test JSON), ctest.log, build.log.
# Environment: IB_JOBS (16), IB_BUILD_DIR (/tmp/ib-build: outside the staged tree, so a warm
# machine keeps it), IB_SKIP_TESTS=1, IB_SKIP_BENCH=1, IB_SKIP_HF=1, IB_ONLY (space-separated
# benchmark names), IB_OPS_BENCH=1 (also the phase-1 op benchmark), IB_SKIP_AB=1 (no A/B of
# IB_FUSED / IB_MATMUL_TUNING, which the backend reads), IB_OPS_SECTIONS (the op benchmark's
# sections, e.g. attention), IB_SKIP_HF_BENCH=1 (only the HF
# comparison), IB_DEADLINE_S (540: every
# step's timeout is cut so that the summary and the tarball are written before then).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
RES="$OUT/results"
mkdir -p "$RES"
JOBS="${IB_JOBS:-16}"
BUILD="${IB_BUILD_DIR:-/tmp/ib-build}"
BIN="$BUILD/bin/inferbench"
started=$(date +%s)
elapsed() { echo $(( $(date +%s) - started )); }
DEADLINE="${IB_DEADLINE_S:-540}"
# limit CAP: the timeout for the next step, at most CAP, keeping 30 s for the summary.
limit() {
  local left=$(( DEADLINE - $(elapsed) - 30 ))
  [ "$left" -lt 1 ] && left=1
  [ "$left" -lt "$1" ] && echo "$left" || echo "$1"
}
declare -a STATUS=()
note() { STATUS+=("$1"); echo "[$(elapsed) s] $1"; }

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "git: $(cat GIT_COMMIT 2>/dev/null || git rev-parse HEAD 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,power.limit \
    --format=csv 2>&1
  nvcc --version | tail -2
  cmake --version | head -1
  g++ --version | head -1
  nproc
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

echo "== configure + build ($JOBS jobs, $BUILD)"
targets=(inferbench backend_cuda_test backend_cuda_fault_test engine_cuda_test
         engine_cuda_growth_test)
[ "${IB_OPS_BENCH:-0}" = 1 ] && targets+=(ib_ops_bench ib_kernel_profile)
if cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DINFERBENCH_CUDA=ON \
     -DCMAKE_CUDA_ARCHITECTURES=90a -DINFERBENCH_WERROR=OFF >"$OUT/build.log" 2>&1 &&
   cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}" >>"$OUT/build.log" 2>&1; then
  note "build: ok ($(elapsed) s)"
else
  tail -40 "$OUT/build.log"
  note "build: FAILED"
fi

if [ "${IB_SKIP_TESTS:-0}" != 1 ] && [ -x "$BUILD/src/engine/engine_cuda_test" ]; then
  echo "== gpu tests"
  t0=$(date +%s)
  mkdir -p "$RES/tests"
  export GTEST_OUTPUT="json:$RES/tests/"
  timeout "$(limit 420)" ctest --test-dir "$BUILD" -L gpu --output-on-failure >"$OUT/ctest.log" 2>&1
  rc=$?
  unset GTEST_OUTPUT
  grep -E "^\[  FAILED  \]|Failure|Expected|Which is|CUDA error|tests passed|Test +#" "$OUT/ctest.log" | head -60
  note "gpu tests: rc $rc ($(( $(date +%s) - t0 )) s)"
fi

# A/B of the decode-path switches on a short batch-8 decode run (16 prompts, 1 run each): the
# fused decode GEMVs (IB_FUSED) and the matmul choice (tuned or the static rule); the fastest
# median TPOT sets IB_FUSED / IB_MATMUL_TUNING for every benchmark after it. (Programmatic
# dependent launch, IB_PDL=1, measured 2.5 % slower in run 2 and stays off.)
if [ "${IB_SKIP_AB:-0}" != 1 ] && [ "${IB_SKIP_BENCH:-0}" != 1 ] && [ -x "$BIN" ]; then
  echo "== A/B: fused decode x matmul tuning"
  best="" best_tpot=""
  for combo in "1 1" "0 1" "1 0"; do
    set -- $combo
    dir="$RES/ab_fused$1_tune$2"
    IB_FUSED=$1 IB_MATMUL_TUNING=$2 timeout "$(limit 60)" "$BIN" run --device cuda --dtype bf16 \
      --load-format dummy --disable-tqdm --model llama-3-8b --batch-size 8 --input-len 32 \
      --output-len 128 --num-prompts 16 --runs 1 --num-warmups 8 --result-dir "$dir" \
      --overwrite >"$dir.log" 2>&1
    tpot=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['median_tpot_ms'])" \
      "$dir/result.json" 2>/dev/null)
    note "A/B fused=$1 tuning=$2: median TPOT ${tpot:-failed} ms"
    if [ -n "$tpot" ] && { [ -z "$best_tpot" ] ||
         python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < float(sys.argv[2]) else 1)" \
           "$tpot" "$best_tpot"; }; then
      best="$combo" best_tpot=$tpot
    fi
  done
  if [ -n "$best" ]; then
    set -- $best
    export IB_FUSED=$1 IB_MATMUL_TUNING=$2
    note "chosen: IB_FUSED=$1 IB_MATMUL_TUNING=$2 (TPOT $best_tpot ms)"
  fi
  set --
fi

# bench NAME ARGS...: one `inferbench run` into $RES/NAME (3 runs unless ARGS say otherwise).
bench() {
  local name=$1
  shift
  if [ -n "${IB_ONLY:-}" ] && [[ " $IB_ONLY " != *" $name "* ]]; then return; fi
  local t0=$(date +%s) cap
  cap=$(limit 300)
  if [ "$cap" -lt 20 ]; then note "bench $name: skipped (deadline)"; return; fi
  timeout "$cap" "$BIN" run --device cuda --dtype bf16 --load-format dummy --disable-tqdm \
    --result-dir "$RES/$name" --overwrite "$@" >"$RES/$name.log" 2>&1
  local rc=$?
  note "bench $name: rc $rc ($(( $(date +%s) - t0 )) s)"
  [ $rc -ne 0 ] && tail -5 "$RES/$name.log"
}

if [ "${IB_SKIP_BENCH:-0}" != 1 ] && [ -x "$BIN" ]; then
  echo "== engine benchmarks"
  L3=(--model llama-3-8b)
  bench llama3-8b_b1 "${L3[@]}" --batch-size 1 --input-len 32 --output-len 128 --num-prompts 4
  IB_FUSED=0 bench llama3-8b_b1_unfused "${L3[@]}" --batch-size 1 --input-len 32 \
    --output-len 128 --num-prompts 4
  bench llama3-8b_b1_eager "${L3[@]}" --batch-size 1 --input-len 32 --output-len 128 \
    --num-prompts 2 --enforce-eager
  bench llama3-8b_seed "${L3[@]}" --batch-size 8 --input-len 32 --output-len 128 --num-prompts 200
  bench llama3-8b_prefill_8x512 "${L3[@]}" --batch-size 8 --input-len 512 --output-len 1 \
    --num-prompts 8 --num-warmups 8
  bench llama3-8b_ttft_2048 "${L3[@]}" --batch-size 1 --input-len 2048 --output-len 1 \
    --num-prompts 3 --num-warmups 1
  bench llama3-8b_cont_1024 "${L3[@]}" --input-len 128 --output-len 128 --num-prompts 1024 \
    --load-mode open --num-warmups 16
  bench llama3-8b_cont_1024_seqs512 "${L3[@]}" --input-len 128 --output-len 128 \
    --num-prompts 1024 --load-mode open --num-warmups 16 --max-num-seqs 512
  bench llama3-8b_b1_kv25 "${L3[@]}" --batch-size 1 --input-len 32 --output-len 128 \
    --num-prompts 2 --gpu-memory-utilization 0.25
  bench phi3-mini_b1 --model phi-3-mini-4k --batch-size 1 --input-len 32 --output-len 128 \
    --num-prompts 4
  bench phi3-mini_b8 --model phi-3-mini-4k --batch-size 8 --input-len 32 --output-len 128 \
    --num-prompts 16
  bench qwen2-7b_b1 --model qwen2-7b --max-model-len 4096 --batch-size 1 --input-len 32 \
    --output-len 128 --num-prompts 4
  bench qwen2-7b_b8 --model qwen2-7b --max-model-len 4096 --batch-size 8 --input-len 32 \
    --output-len 128 --num-prompts 16
fi

if [ "${IB_SKIP_HF:-0}" != 1 ]; then
  if [ "${IB_SKIP_HF_BENCH:-0}" != 1 ]; then
    echo "== HF transformers eager, the seed's protocol"
    t0=$(date +%s)
    PYTHONUNBUFFERED=1 timeout "$(limit 240)" python3 tools/hf_bench.py --out "$RES" --batches 3 \
      >"$RES/hf_bench.log" 2>&1
    note "hf_bench: rc $? ($(( $(date +%s) - t0 )) s)"
    tail -2 "$RES/hf_bench.log"
  fi
  if [ -x "$BIN" ]; then
    echo "== HF comparison"
    t0=$(date +%s)
    PYTHONUNBUFFERED=1 timeout "$(limit 300)" python3 tools/hf_compare.py --inferbench "$BIN" --out "$RES" \
      >"$RES/hf_compare.log" 2>&1
    note "hf_compare: rc $? ($(( $(date +%s) - t0 )) s)"
  fi
fi

if [ "${IB_OPS_BENCH:-0}" = 1 ] && [ -x "$BUILD/bench/gpu/ib_ops_bench" ]; then
  timeout "$(limit 300)" "$BUILD/bench/gpu/ib_ops_bench" "$RES/ops_bench.json" >"$RES/ops_bench.log" 2>&1
  note "ops bench: rc $?"
fi

cp "$OUT/env.txt" "$RES/" 2>/dev/null
printf '%s\n' "${STATUS[@]}" >"$RES/steps.txt"
python3 bench/gpu/summarize.py "$RES" "$OUT/summary.json" >"$OUT/summary.md" 2>&1
# The continuous-batching run's per-request JSONL is large; its result.json keeps the metrics.
tar -czf "$OUT/results.tgz" --exclude='llama3-8b_cont_*/requests.jsonl' -C "$OUT" results
# A device call returns files of at most 16 MiB: past 15 MiB, name the largest files and keep
# only what the summary is made of (result.json, logs, test JSON).
if [ "$(stat -c %s "$OUT/results.tgz")" -gt $((15 << 20)) ]; then
  echo "results.tgz is $(du -h "$OUT/results.tgz" | cut -f1); largest files:"
  du -ak "$RES" | sort -n | tail -8
  tar -czf "$OUT/results.tgz" --exclude='*.jsonl' --exclude='*.csv' --exclude='*.svg' \
    --exclude='*.html' -C "$OUT" results
fi
rm -rf "$RES"
echo "== steps"
printf '%s\n' "${STATUS[@]}"
echo "== summary (total $(elapsed) s)"
cat "$OUT/summary.md"
