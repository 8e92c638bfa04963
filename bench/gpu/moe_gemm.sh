#!/usr/bin/env bash
# The experts' grouped tensor-core GEMM (IB_MOE_GEMM, src/backend/cuda/moe_gemm.cu) on the H200:
# build; the gpu tests of the expert kernels against the CPU op (CudaMoe*: every form, the GEMM's
# tiles, a graph replay) and the Mixtral / DeepSeek engine tests with IB_MOE_GEMM=2 (every expert
# call of 2+ tokens on the GEMM, against the CPU engine); transformers parity of
# mixtral-tiny and mixtral (Mixtral-8x7B's sizes, 2 layers) and deepseek-v2-lite on CUDA bf16
# (prompts of 512+ tokens prefill through the GEMM; fp32 keeps the warp-per-row kernels); then
# `inferbench run` with IB_MOE_GEMM=0 (a warp per weight row) and 32, interleaved:
#   v2lite_seed   DeepSeek-V2-Lite, the seed protocol (batch 8, 32 / 128, 200 prompts)
#   mixtral_pre   Mixtral-8x7B, prefill-heavy (batch 8, 512 in / 8 out, 16 prompts): TTFT
#   v2lite_cont   DeepSeek-V2-Lite, continuous, 512 prompts of 128 / 128 (decode batches of up
#                 to 256 tokens: the GEMM inside the decode graphs)
#   mixtral_seed  Mixtral-8x7B, the seed protocol on 48 prompts
#   mixtral_awq_pre (not in the default list) Mixtral-8x7B AWQ (24 GiB: fits an 80 GB card),
#                 prefill-heavy as mixtral_pre: the 4-bit experts through the GEMM
#   mixtral22_pre (not in the default list: ~2 minutes a load) Mixtral-8x22B AWQ, prefill-heavy
#                 as mixtral_pre: the 4-bit experts through the GEMM
# Usage (carry .deps/icu.tar.xz; ~9 minutes with the build): OUT=dir bash bench/gpu/moe_gemm.sh
# then, on the warm machine, OUT=dir IB_SKIP_BUILD=1 IB_SKIP_TESTS=1 IB_SKIP_PARITY=1
# IB_RUNS_LIST=... bash bench/gpu/moe_gemm.sh for what the deadline skipped.
# Environment: IB_BUILD_DIR (/tmp/ib-head, shared with bench/gpu/attn_mma.sh), IB_SETS
# ("IB_MOE_GEMM=0 IB_MOE_GEMM=32"),
# IB_RUNS_LIST ("v2lite_seed mixtral_pre v2lite_cont mixtral_seed"), IB_DEADLINE_S (560: runs
# that would end past it are skipped). Writes tests.log, backend_cuda_test.json,
# engine_cuda_test.json, parity.log, hf_compare_moe_gemm.json, runs.log, runs.json and runs.tgz (the build log and every run's directory).
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && head_setup
# The MoE engines against the CPU engine with every expert call of 2+ tokens on the GEMM.
head_tests '*CudaMoe*:*ReportsTheKernelSwitches*' IB_MOE_GEMM=2 \
  '*_mixtral*:*CudaEngineMoe*:*_deepseek*'
# Parity takes ~2-3 minutes: skipped when less is left (a later call with IB_SKIP_BUILD=1
# IB_SKIP_TESTS=1 runs it and the A/B).
if [ "${IB_SKIP_PARITY:-0}" != 1 ] && (( $(date +%s) - T0 > DEADLINE - 200 )); then
  echo "parity skipped (deadline) $(el)"; IB_SKIP_PARITY=1
fi
[ "${IB_SKIP_PARITY:-0}" = 1 ] || {
  (export IB_MOE_GEMM=32  # the GEMM for every prefill of 32+ tokens
   hf_parity 200 hf_compare_moe_gemm.json mixtral-tiny,mixtral,deepseek-v2-lite cuda:bf16)
  rm -rf "$O/parity"
}
R=$O/runs; mkdir -p "$R"
# run NAME SET MODEL LIMIT_S FLAGS...: one `inferbench run` in bf16 on dummy weights with the
# switches of SET, skipped when it could end past the deadline.
run() {
  local name=$1 set=$2 model=$3 limit=$4; shift 4
  if (( $(date +%s) - T0 + limit > DEADLINE )); then echo "$name skipped (deadline)" | tee -a "$O/runs.log"; return; fi
  env $set timeout -s INT "$limit" "$B/bin/inferbench" run --device cuda --dtype bf16 \
    --load-format dummy --disable-tqdm --model "$model" --result-dir "$R/$name" --overwrite \
    "$@" > "$R/$name.log" 2>&1
  echo "$name rc=$? $(el) $(grep -E "Output token throughput|TTFT median|TPOT median|rror" \
    "$R/$name.log" | tr -s ' ' | tr '\n' ' ')" | tee -a "$O/runs.log"
}
SEED=(--batch-size 8 --input-len 32 --output-len 128 --load-mode static --runs 1 --seed 0)
for what in ${IB_RUNS_LIST:-v2lite_seed mixtral_pre v2lite_cont mixtral_seed}; do
  for set in ${IB_SETS:-IB_MOE_GEMM=0 IB_MOE_GEMM=32}; do
    tag=${set//IB_MOE_GEMM=/gemm}
    case $what in
      v2lite_seed) run "${what}_$tag" "$set" deepseek-v2-lite 60 "${SEED[@]}" --num-prompts 200 ;;
      mixtral_pre) run "${what}_$tag" "$set" mixtral-8x7b 90 --batch-size 8 --input-len 512 \
        --output-len 8 --num-prompts 16 --load-mode static --runs 1 --seed 0 ;;
      v2lite_cont) run "${what}_$tag" "$set" deepseek-v2-lite 90 --input-len 128 \
        --output-len 128 --num-prompts 512 --load-mode open --num-warmups 16 --runs 1 --seed 0 ;;
      mixtral_seed) run "${what}_$tag" "$set" mixtral-8x7b 90 "${SEED[@]}" --num-prompts 48 ;;
      mixtral_awq_pre) run "${what}_$tag" "$set" mixtral-8x7b 150 --quantization awq \
        --batch-size 8 --input-len 512 --output-len 8 --num-prompts 16 --load-mode static \
        --runs 1 --seed 0 ;;
      mixtral22_pre) run "${what}_$tag" "$set" mixtral-8x22b 240 --quantization awq \
        --batch-size 8 --input-len 512 --output-len 8 --num-prompts 16 --load-mode static \
        --runs 1 --seed 0 ;;
    esac
  done
done
pack_runs
echo "done $(el)"
