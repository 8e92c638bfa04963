#!/usr/bin/env bash
# GGUF K-quants on CUDA (issue 14): --quantization gguf keeps a GGUF file's matmul weights in
# their ggml blocks (backend/weight.h's kGguf; src/backend/cuda/gguf.cu: a dp4a GEMV on
# activations quantized per 32 to int8, as llama.cpp's CUDA kernels do, and the blocks dequantized
# for cuBLASLt past 8 tokens). Builds; runs backend_cuda_test's CudaGguf (each type, the Q4_K_M
# q/k/v mix, against the CPU backend on the same bytes) and CudaQuant4 (the 4-bit paths share the
# changed backend code); writes dummy Llama-3-8B and Phi-3-mini-4k files in llama.cpp's Q4_K_M mix
# (gguf_fixture --dummy, 16 threads); then `inferbench run` on each: batch 1 (issue 14's target:
# Llama-3-8B Q4_K_M >= 450 tok/s) and the seed protocol (static batch 8, in 32 / out 128, 200
# prompts; Phi-3-mini Q4_K_M is the seed table's fifth row), --quantization gguf and, for the
# same file dequantized to bf16 at load, --quantization none; and `inferbench eval` of the
# presets' dummy weights quantized at load in the Q4_K_M mix (--load-format dummy --quantization
# gguf) against the same weights in bf16 (IB_EVAL_FILES=1 adds gguf against none on the files).
# Usage (~8 minutes; carry .deps/icu.tar.xz): OUT=dir bash bench/gpu/gguf.sh
# Environment: B (build directory, build/h200-gguf), IB_SKIP_TESTS=1, IB_SKIP_RUNS=1,
# IB_SKIP_EVAL=1, IB_SKIP_PROFILE=1 (the CUPTI kernel profile of the first model at batch 1),
# IB_SKIP_NONE=1 (no seed runs of the dequantized file), IB_B1_NONE=1 (its batch-1 runs too),
# IB_MODELS (default "llama-3-8b phi-3-mini-4k"), IB_DEADLINE (580: a run or eval that could end
# later is skipped), IB_TEST_FILTER (backend_cuda_test's, *CudaGguf*:*CudaQuant4*), IB_SNAPSHOT
# (a .tgz path: all of OUT packed after each step, so that a call cut short keeps what ran). Writes profile_*.txt, build.log, tests.log,
# files.log, runs.log, eval_*.json and per run a directory with result.json and its log.
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && use_icu
B=${B:-$PWD/build/h200-gguf}
snap() { [ -n "${IB_SNAPSHOT:-}" ] && tar czf "$IB_SNAPSHOT" -C "$O" . 2>/dev/null; return 0; }
build_gpu_tests "$B" "$O/build.log" inferbench backend_cuda_test engine_cuda_test gguf_fixture \
  ib_kernel_profile || exit 1
echo "built $(el)"
if [ "${IB_SKIP_TESTS:-0}" != 1 ]; then
  timeout 240 "$B/src/backend/cuda/backend_cuda_test" --gtest_filter="${IB_TEST_FILTER:-*CudaGguf*:*CudaQuant4*}" \
    > "$O/tests.log" 2>&1
  echo "backend_cuda_test CudaGguf:CudaQuant4 rc=$? $(el)"
  grep -E "^\[  FAILED  \]|Failure|PASSED|FAILED TEST" "$O/tests.log" | head -20
  timeout 120 "$B/src/engine/engine_cuda_test" --gtest_filter='*CudaEngineGguf*' \
    --gtest_output=json:"$O/engine_gguf.json" > "$O/engine_tests.log" 2>&1
  echo "engine_cuda_test CudaEngineGguf rc=$? $(el)"
  grep -E "^\[  FAILED  \]|Failure|PASSED|FAILED TEST|rel_l2" "$O/engine_tests.log" | head -20
  snap
fi
MODELS=${IB_MODELS:-llama-3-8b phi-3-mini-4k}
F=/tmp/ib-gguf; mkdir -p "$F"
for m in $MODELS; do
  [ -f "$F/$m-Q4_K_M.gguf" ] && continue
  timeout 240 /usr/bin/time -f "%e s %M KB" "$B/src/model/gguf_fixture" --dummy "$m" Q4_K_M \
    "$F/$m-Q4_K_M.gguf" 16 >> "$O/files.log" 2>&1
  echo "$m Q4_K_M rc=$? $(ls -l "$F/$m-Q4_K_M.gguf" | awk '{print $5}') bytes $(el)" | tee -a "$O/files.log"
done
snap
run() {  # NAME TIMEOUT FLAGS...: skipped when it could run past IB_DEADLINE (580) s
  local name=$1 t=$2; shift 2
  if (( $(date +%s) - T0 + t > ${IB_DEADLINE:-580} )); then echo "$name skipped (deadline)"; return; fi
  timeout -s INT "$t" "$B/bin/inferbench" run --device cuda --dtype bf16 --disable-tqdm \
    --result-dir "$O/$name" --overwrite "$@" > "$O/$name.log" 2>&1
  echo "$name rc=$? $(el) $(grep -E "Output token throughput|TPOT median|copy ceiling|rror" \
    "$O/$name.log" | tr -s ' ' | tr '\n' ' ')" | tee -a "$O/runs.log"
  find "$O/$name" -name '*.jsonl' -delete 2>/dev/null
  snap
}
profile() {  # NAME MODEL FLAGS...: a CUPTI kernel profile (bench/gpu/kernel_profile.cpp) of a run
  local name=$1 m=$2; shift 2
  if (( $(date +%s) - T0 + 60 > ${IB_DEADLINE:-580} )); then echo "$name skipped (deadline)"; return; fi
  IB_KERNEL_PROFILE="$O/profile_$name.txt" LD_PRELOAD=$(readlink -f "$B/bench/gpu/libib_kernel_profile.so") \
    timeout 60 "$B/bin/inferbench" run --device cuda --dtype bf16 --disable-tqdm --model "$F/$m-Q4_K_M.gguf" \
    --result-dir "$O/$name" --overwrite "$@" > "$O/$name.log" 2>&1
  echo "$name profile rc=$? $(el)" | tee -a "$O/runs.log"; head -25 "$O/profile_$name.txt"
  find "$O/$name" -name '*.jsonl' -delete 2>/dev/null
}
if [ "${IB_SKIP_RUNS:-0}" != 1 ]; then
  B1=(--batch-size 1 --input-len 32 --output-len 128 --num-prompts 4 --runs 3)
  SEED=(--batch-size 8 --input-len 32 --output-len 128 --num-prompts 200 --runs 1)
  first=${MODELS%% *}
  run "b1_${first}_gguf" 90 --model "$F/$first-Q4_K_M.gguf" --quantization gguf "${B1[@]}"
  [ "${IB_SKIP_PROFILE:-0}" != 1 ] && profile "prof_b1_${first}_gguf" "$first" --quantization gguf \
    --batch-size 1 --input-len 32 --output-len 64 --num-prompts 2 --runs 1
  for m in ${MODELS#"$first"}; do
    run "b1_${m}_gguf" 90 --model "$F/$m-Q4_K_M.gguf" --quantization gguf "${B1[@]}"
  done
  for q in gguf none; do
    for m in $MODELS; do
      [ "$q" = none ] && [ "${IB_SKIP_NONE:-0}" = 1 ] && continue
      run "seed_${m}_$q" 120 --model "$F/$m-Q4_K_M.gguf" --quantization $q "${SEED[@]}"
    done
  done
  if [ "${IB_B1_NONE:-0}" = 1 ]; then
    for m in $MODELS; do
      run "b1_${m}_none" 90 --model "$F/$m-Q4_K_M.gguf" --quantization none "${B1[@]}"
    done
  fi
fi
if [ "${IB_SKIP_EVAL:-0}" != 1 ]; then
  # The presets' dummy weights quantized at load in the Q4_K_M mix against the same weights in
  # bf16 (what Q4_K_M and the int8 activations cost together; the quant matrix's gguf row), then
  # the files against their own dequantized values (the int8 activations alone).
  for m in $MODELS; do
    for src in preset file; do
      [ "$src" = file ] && [ "${IB_EVAL_FILES:-0}" != 1 ] && continue
      (( $(date +%s) - T0 + 150 > ${IB_DEADLINE:-580} )) && { echo "eval $m $src skipped (deadline)"; continue; }
      if [ "$src" = preset ]; then model=(--model "$m" --load-format dummy); else model=(--model "$F/$m-Q4_K_M.gguf"); fi
      timeout 150 "$B/bin/inferbench" eval "${model[@]}" --device cuda --dtype bf16 \
        --quantization gguf --num-prompts 4 --input-len 64 --output-len 16 --seed 0 \
        --output-json "$O/eval_${m}_$src.json" > "$O/eval_${m}_$src.log" 2>&1
      echo "eval $m $src rc=$? $(el)"; grep -A2 "^| model" "$O/eval_${m}_$src.log" | tail -1
      snap
    done
  done | tee -a "$O/runs.log"
fi
echo "done $(el)"
