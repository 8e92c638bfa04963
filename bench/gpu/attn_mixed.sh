#!/usr/bin/env bash
# IB_ATTN_MIXED (a mixed batch's leading one-token sequences on the decode attention, the prefill
# chunks after them on the flash kernel) on binaries already in $B (IB_PREBUILT=1 unpacks
# bench/gpu/prebuilt.sh's bundle; IB_SKIP_BUILD=1 takes a warm machine's):
#   tests              CudaAttention* (MixedBatchRunsItsDecodePrefixApart: the split against the
#                      CPU) and the switch report; every engine CUDA test with IB_ATTN_MIXED=1
#   cont_{bf16,fp8}_mixed{0,16}_N  Llama-3-8B dummy weights, 1,024 prompts of 128 / 128,
#                      continuous (targets.sh's cont_*), IB_ATTN_MIXED 0 against 16, interleaved
#   rate_mixed{0,16}   400 prompts of 1,024 / 128 arriving at 30 requests/s (open loop): steps
#                      that mix a few prefill chunks with many decodes, as a server's
#   prof_cont_{none,fp8}_mixed16  the bf16 and fp8 continuous runs with the switch on, under the
#                      CUPTI tracer
# Usage (carry .deps/icu.tar.xz and .deps/prebuilt.tar.xz; ~5 minutes): IB_PREBUILT=1 OUT=dir
# bash bench/gpu/attn_mixed.sh. Writes tests.log, backend_cuda_test.json, engine_cuda_test.json,
# runs.log, runs.json, runs.tgz and prof.tgz.
set -u; T0=$(date +%s)
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && head_setup
head_tests '*CudaAttention*:*ReportsTheKernelSwitches*' IB_ATTN_MIXED=1 '*'
R=$O/runs; mkdir -p "$R"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$O/runs.log"
CONT=(--input-len 128 --output-len 128 --num-prompts 1024 --load-mode open --num-warmups 16 --runs 1)
RATE=(--input-len 1024 --output-len 128 --num-prompts 400 --request-rate 30 --num-warmups 8
  --runs 1 --seed 0)
{
  for pass in 1 2; do
    for m in 0 16; do run_llama "cont_bf16_mixed${m}_$pass" IB_ATTN_MIXED=$m "${CONT[@]}"; done
  done
  for m in 0 16; do
    run_llama "cont_fp8_mixed$m" IB_ATTN_MIXED=$m --quantization fp8 "${CONT[@]}"
  done
  for m in 0 16; do run_llama "rate_mixed$m" IB_ATTN_MIXED=$m "${RATE[@]}"; done
  lib=$B/bench/gpu/libib_kernel_profile.so
  if [ -f "$lib" ]; then
    mkdir -p "$O/prof"
    for q in none fp8; do
      run_llama "prof_cont_${q}_mixed16" IB_ATTN_MIXED=16 \
        IB_KERNEL_PROFILE="$O/prof/profile_$q.txt" IB_KERNEL_TIMELINE="$O/prof/timeline_$q.csv" \
        IB_KERNEL_TIMELINE_COUNT=3000 LD_PRELOAD="$(readlink -f "$lib")" --quantization $q \
        "${CONT[@]}"
      head -16 "$O/prof/profile_$q.txt"
    done
    tar czf "$O/prof.tgz" -C "$O" prof && rm -rf "$O/prof"
  fi
} 2>&1 | tee -a "$O/runs.log"
pack_runs
echo "done +$(( $(date +%s) - T0 )) s"
