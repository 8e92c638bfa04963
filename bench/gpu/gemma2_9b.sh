#!/usr/bin/env bash
# Gemma-2-9B on CUDA (issue 15): the attention kernels at head_dim 256 (split-KV decode, and the
# flash prefill with Q read from shared memory per tile). Builds; runs every CudaAttention gpu test
# (Gemma-2-9B's 16 heads over 8 KV heads of 256 among the shapes, soft-capping and windows
# included); tools/hf_compare.py on "gemma2" (Gemma2ForCausalLM at Gemma-2-9B's sizes, 2 layers,
# prompts to 5,000 tokens, past the 4,096 window) against transformers, CUDA fp32 and bf16; then
# `inferbench run` on gemma-2-9b dummy weights in bf16 at batch 1 (issue 15's target: 85 % of the
# bandwidth ceiling).
# Usage (~6 minutes; carry .deps/icu.tar.xz): OUT=dir bash bench/gpu/gemma2_9b.sh
# Environment: B (the build directory, build/h200-gemma9b), IB_SKIP_TESTS=1, IB_SKIP_PARITY=1,
# IB_SKIP_RUNS=1, IB_PARITY_RUNS (hf_compare.py --runs; default cuda:fp32,cuda:bf16;
# cuda:bf16,hf:bf16 adds transformers' own bf16 model as a baseline). Writes build.log,
# tests.log, parity.log, hf_compare_gemma2_9b_cuda.json, runs.log and b1/ (result.json and log).
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && use_icu
B=${B:-$PWD/build/h200-gemma9b}
build_gpu_tests "$B" "$O/build.log" inferbench backend_cuda_test || exit 1
echo "built $(el)"
if [ "${IB_SKIP_TESTS:-0}" != 1 ]; then
  timeout 200 "$B/src/backend/cuda/backend_cuda_test" --gtest_filter='*CudaAttention*' \
    > "$O/tests.log" 2>&1
  echo "backend_cuda_test CudaAttention rc=$? $(el)"
  grep -E "^\[  FAILED  \]|Failure|PASSED|FAILED TEST" "$O/tests.log" | head -20
fi
if [ "${IB_SKIP_PARITY:-0}" != 1 ]; then
  PYTHONUNBUFFERED=1 timeout 240 python3 tools/hf_compare.py --inferbench "$B/bin/inferbench" \
    --families gemma2 --runs "${IB_PARITY_RUNS:-cuda:fp32,cuda:bf16}" --json-name hf_compare_gemma2_9b_cuda.json \
    --out "$O" 2>&1 | grep -v Warning > "$O/parity.log"
  echo "hf_compare rc=${PIPESTATUS[0]} $(el)"; sed -n '/^| family/,$p' "$O/parity.log"
fi
if [ "${IB_SKIP_RUNS:-0}" != 1 ]; then
  mkdir -p "$O/b1"
  timeout -s INT 150 "$B/bin/inferbench" run --device cuda --dtype bf16 --load-format dummy \
    --disable-tqdm --result-dir "$O/b1/gemma-2-9b" --overwrite --model gemma-2-9b \
    --batch-size 1 --input-len 32 --output-len 128 --num-prompts 4 --runs 3 > "$O/b1/b1.log" 2>&1
  echo "b1 gemma-2-9b rc=$? $(el) $(grep -E "Output token throughput|TPOT median|copy ceiling|rror" \
    "$O/b1/b1.log" | tr -s ' ' | tr '\n' ' ')" | tee -a "$O/runs.log"
  find "$O/b1" -name '*.jsonl' -delete
fi
echo "done $(el)"
