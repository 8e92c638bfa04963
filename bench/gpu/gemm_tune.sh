#!/usr/bin/env bash
# cuBLASLt's row buckets tuned at their own M (IB_GEMM_TUNE; issue 15's continuous bf16 target,
# bench/NOTES.md "The buckets' algorithms timed at their own M") and the experts' warp items as
# the default (IB_MOE_WARPS=8), on binaries already in $B (IB_PREBUILT=1 unpacks
# bench/gpu/prebuilt.sh's bundle; IB_SKIP_BUILD=1 takes a warm machine's), in sections
# (IB_TUNE_SECTIONS, default "tests ab mixtral"):
#   tests    backend_cuda_test's row-bucket tests (the tuned buckets against the CPU among them),
#            its MoE tests and the kernel switches' readback; engine_cuda_test's MoE engine tests
#            (the warp items now take every chunk of 2-8 tokens)
#   ab       Llama-3-8B bf16, 1,024 prompts of 128 / 128, continuous, at IB_GEMM_TUNE=0 and 1,
#            interleaved twice (the tuning's start-up cost: the runs' +s deltas)
#   ab8      (not in the default list) the same in fp8 with the E4M3 KV cache (issue 13's
#            continuous run), IB_GEMM_TUNE=0 and 1 interleaved twice
#   mixtral  Mixtral-8x7B bf16 at batch 8 (32 / 128, 32 prompts) at IB_MOE_WARPS=0 (the balanced
#            tiles) and 8 (the default: the warp items);
#            skipped on a card of less than 100,000 MiB
# Usage (carry .deps/icu.tar.xz and .deps/prebuilt.tar.xz; ~7 minutes): IB_PREBUILT=1 OUT=dir
# bash bench/gpu/gemm_tune.sh. Writes tests.log, the tests' JSON, runs.log, runs.json, runs.tgz.
set -u; T0=$(date +%s)
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && head_setup
has() { [[ " ${IB_TUNE_SECTIONS:-tests ab mixtral} " == *" $1 "* ]]; }
if has tests; then
  gpu_tests '*GemmBuckets*:*CudaMoe*:*KernelSwitches*' '*CudaEngineMoe*'
fi
R=$O/runs; mkdir -p "$R"
CONT=(--input-len 128 --output-len 128 --num-prompts 1024 --load-mode open --num-warmups 16
  --runs 1)
B8=(--batch-size 8 --input-len 32 --output-len 128 --num-prompts 32 --runs 1 --load-mode static
  --max-model-len 4096 --seed 0)
{
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
  if has ab; then
    for i in 1 2; do
      run_llama "cont_tune0_$i" IB_GEMM_TUNE=0 "${CONT[@]}"
      run_llama "cont_tune1_$i" IB_GEMM_TUNE=1 "${CONT[@]}"
    done
  fi
  if has ab8; then
    FP8=(--quantization fp8 --kv-cache-dtype fp8)
    for i in 1 2; do
      run_llama "cont_fp8kv8_tune0_$i" IB_GEMM_TUNE=0 "${FP8[@]}" "${CONT[@]}"
      run_llama "cont_fp8kv8_tune1_$i" IB_GEMM_TUNE=1 "${FP8[@]}" "${CONT[@]}"
    done
  fi
  mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
  if has mixtral && (( mib < 100000 )); then echo "mixtral skipped: ${mib} MiB (93 GB of weights)"; fi
  if has mixtral && (( mib >= 100000 )); then
    run_model mixtral-8x7b b8_mixtral_w0 IB_MOE_WARPS=0 "${B8[@]}"
    run_model mixtral-8x7b b8_mixtral_w8 IB_MOE_WARPS=8 "${B8[@]}"
  fi
} 2>&1 | tee -a "$O/runs.log"
pack_runs
echo "done +$(( $(date +%s) - T0 )) s"
