#!/usr/bin/env bash
# One visit to the GPU machine for the CUDA mixture-of-experts ops (issue 15): build; the gpu
# tests of the MoE ops against the CPU ops (CudaMoe*) and of a small Mixtral engine against the
# CPU engine and the reference (CudaEngineTest's *_mixtral cases: graphs and eager, fp32 and bf16;
# CudaEngineMoe: routing counts with graphs); then
# tools/hf_compare.py on Mixtral (toy sizes and Mixtral-8x7B's sizes) against transformers on CUDA
# in fp32 and bf16; then `inferbench run` on Mixtral-8x7B dummy weights in bf16 at batch 1.
# With IB_GEMMA=1, also tools/hf_compare.py on Gemma-2 (CPU backend, fp32) against transformers;
# with IB_DEEPSEEK=1, on DeepSeek-V2 the same way.
# Usage (from the repository root, ~7 minutes; carry .deps/icu.tar.xz): OUT=dir bash bench/gpu/moe.sh
# Environment: IB_BUILD_DIR (/tmp/ib-moe), IB_SKIP_TESTS=1, IB_SKIP_PARITY=1.
# Writes tests.log, backend_cuda_test.json, engine_cuda_test.json, parity.log,
# hf_compare_mixtral_cuda.json, runs.log, runs.json; the rest (build.log, run directories) in
# extra.tgz.
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && use_icu
export PYTHONUNBUFFERED=1
B=${IB_BUILD_DIR:-/tmp/ib-moe}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/env.txt" 2>&1
build_gpu_tests "$B" "$O/build.log" inferbench backend_cuda_test engine_cuda_test || exit 1
echo "built $(el)"
[ "${IB_SKIP_TESTS:-0}" = 1 ] ||
  gpu_tests '*CudaMoe*:*GeluTanhMulAffineAndSoftcap*' '*_mixtral*:*CudaEngineMoe*'
[ "${IB_SKIP_PARITY:-0}" = 1 ] ||
  hf_parity 170 hf_compare_mixtral_cuda.json mixtral-tiny,mixtral cuda:fp32,cuda:bf16
R=$O/runs; mkdir -p "$R"
run() { local name=$1; shift
  timeout -s INT 170 "$B/bin/inferbench" run --device cuda --dtype bf16 --load-format dummy \
    --disable-tqdm --result-dir "$R/$name" --overwrite "$@" > "$R/$name.log" 2>&1
  echo "$name rc=$? $(el) $(grep -E "Output token throughput|TPOT median|rror" "$R/$name.log" | tr -s ' ' | tr '\n' ' ')" | tee -a "$O/runs.log"; }
run b1_mixtral-8x7b --model mixtral-8x7b --batch-size 1 --input-len 32 --output-len 128 \
  --num-prompts 4 --runs 3
python3 bench/gpu/runs_json.py "$R" > "$O/runs.json"
# Gemma-2 (engine/arch/gemma2.cpp) on the CPU backend against transformers, with IB_GEMMA=1: the
# toy sizes (a 64-token window) and Gemma-2-9B's sizes with a 5,000-token prompt past its window.
if [ "${IB_GEMMA:-0}" = 1 ]; then
  timeout "${IB_GEMMA_TIMEOUT_S:-150}" python3 tools/hf_compare.py --inferbench "$B/bin/inferbench" \
    --families gemma2-tiny,gemma2 --runs cpu:fp32 --cpu-max-len 5000 \
    --json-name hf_compare_gemma2.json --out "$O/parity" 2>&1 | grep -v Warning > "$O/parity_gemma2.log"
  echo "hf_compare gemma2 rc=${PIPESTATUS[0]} $(el)"; tail -14 "$O/parity_gemma2.log"
  [ -f "$O/parity/hf_compare_gemma2.json" ] && mv "$O/parity/hf_compare_gemma2.json" "$O/"
fi
# DeepSeek-V2 (engine/arch/deepseek2.cpp) on the CPU backend against transformers, with
# IB_DEEPSEEK=1: "deepseek-v2-tiny" (V2's q LoRA and group-limited routing at toy sizes) and
# DeepSeek-V2-Lite's sizes (2 layers: the dense first layer and one MoE layer); on CUDA too
# (bench/gpu/mla.sh is the DeepSeek-on-CUDA visit).
if [ "${IB_DEEPSEEK:-0}" = 1 ]; then
  timeout "${IB_DEEPSEEK_TIMEOUT_S:-240}" python3 tools/hf_compare.py --inferbench "$B/bin/inferbench" \
    --families deepseek-v2-tiny,deepseek-v2-lite --runs cpu:fp32,cuda:fp32 \
    --json-name hf_compare_deepseek_v2.json --out "$O/parity" 2>&1 | grep -v Warning > "$O/parity_deepseek_v2.log"
  echo "hf_compare deepseek_v2 rc=${PIPESTATUS[0]} $(el)"; tail -16 "$O/parity_deepseek_v2.log"
  # its JSON and log come back in extra.tgz (at most 8 files come back)
fi
rm -f "$R"/*/requests.jsonl "$R"/*/allocations.csv "$R"/*/memory.csv
# At most 8 files come back: the rest in extra.tgz.
( cd "$O" && ls | grep -vE '^(tests.log|backend_cuda_test.json|engine_cuda_test.json|parity.log|hf_compare_mixtral_cuda.json|hf_compare_gemma2.json|runs.log)$' |
  xargs -r tar czf extra.tgz --remove-files )
echo "done $(el)"
