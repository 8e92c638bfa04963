#!/usr/bin/env bash
# The 4-bit ring GEMVs with their group parameters through the ring (IB_GEMV_INT4_RING_GROUPS;
# issue 14, bench/NOTES.md "The 4-bit group parameters through the ring"), on binaries already in
# $B (IB_PREBUILT=1 unpacks bench/gpu/prebuilt.sh's bundle; IB_SKIP_BUILD=1 takes a warm
# machine's), in sections (IB_RG_SECTIONS, default "tests b1 seed ncu"), each run skipped past
# the deadline (IB_DEADLINE_S, 560 s):
#   tests  backend_cuda_test CudaGemvRingGroups* (bit for bit against the registers' form),
#          CudaQuant4.* and the switch report; engine_cuda_test CudaEngineQuant* with
#          IB_GEMV_INT4_RING_GROUPS=2 (the engine against the CPU engine)
#   b1     Llama-3-8B dummy weights at batch 1 (32 / 128, 4 prompts, 3 runs): awq at 0, 1 and 1
#          with x staged (IB_GEMV_STAGE_X=2), nf4 at 0 and 1, interleaved, twice
#   seed   the seed protocol (batch 8, 200 prompts of 32 / 128) in awq at 0 and 2, twice
#   ncu    Nsight Compute on the awq gate/up GEMV at batch 1 with the parameters through the
#          ring (the 4-warp ring variant), to compare with results/h200/warps/run3's ncu files
# Usage (carry .deps/icu.tar.xz and .deps/prebuilt.tar.xz; ~8 minutes): IB_PREBUILT=1 OUT=dir
# bash bench/gpu/ring_groups.sh. Writes tests.log, the tests' JSON, runs.log, runs.json,
# runs.tgz, ncu_awq_gateup_rg.txt and sass_awq_gateup_rg.csv.gz.
set -u; T0=$(date +%s)
cd "$(dirname "$0")/../.." || exit 1; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && head_setup
has() { [[ " ${IB_RG_SECTIONS:-tests b1 seed ncu} " == *" $1 "* ]]; }
R=$O/runs; mkdir -p "$R"
B1=(--batch-size 1 --input-len 32 --output-len 128 --num-prompts 4 --runs 3)
SEED=(--batch-size 8 --input-len 32 --output-len 128 --num-prompts 200 --runs 1 --load-mode static
  --max-model-len 4096 --seed 0)
{
  if has tests; then
    gpu_tests '*CudaGemvRingGroups*:*CudaQuant4.*:*ReportsTheKernelSwitches*'
    IB_GEMV_INT4_RING_GROUPS=2 timeout 200 "$B/src/engine/engine_cuda_test" \
      --gtest_filter='*CudaEngineQuant*' --gtest_output="json:$O/engine_cuda_test_rg2.json" \
      >> "$O/tests.log" 2>&1
    echo "engine_cuda_test (IB_GEMV_INT4_RING_GROUPS=2) rc=$? +$(( $(date +%s) - T0 )) s"
    grep -E "^\[  FAILED  \]|PASSED|FAILED TEST" "$O/tests.log" | tail -8
  fi
  if has b1; then
    for pass in 1 2; do
      run_llama "b1_awq_rg0_$pass" IB_GEMV_INT4_RING_GROUPS=0 --quantization awq "${B1[@]}"
      run_llama "b1_awq_rg1_$pass" IB_GEMV_INT4_RING_GROUPS=1 --quantization awq "${B1[@]}"
      run_llama "b1_awq_rg1x_$pass" IB_GEMV_INT4_RING_GROUPS=1 IB_GEMV_STAGE_X=2 \
        --quantization awq "${B1[@]}"
      run_llama "b1_nf4_rg0_$pass" IB_GEMV_INT4_RING_GROUPS=0 --quantization nf4 "${B1[@]}"
      run_llama "b1_nf4_rg1_$pass" IB_GEMV_INT4_RING_GROUPS=1 --quantization nf4 "${B1[@]}"
    done
  fi
  if has seed; then
    for pass in 1 2; do
      for v in 0 2; do
        run_llama "seed_awq_rg${v}_$pass" IB_GEMV_INT4_RING_GROUPS=$v --quantization awq "${SEED[@]}"
      done
    done
  fi
} 2>&1 | tee -a "$O/runs.log"
if has ncu && (( $(date +%s) - T0 < DEADLINE - 150 )); then
  # The 4-warp W4A16 SwiGLU ring variant with kRingGroups (its last template argument true).
  IB_GEMV_INT4_RING_GROUPS=1 ncu_prof awq_gateup_rg \
    'gemv_kernel<__nv_bfloat16, __nv_bfloat16, 1, 4, 2, false, 2, false, 4, 6, false, false, 4, false, true>' \
    64 --quantization awq --batch-size 1 --input-len 32 --output-len 16 --num-prompts 1 \
    2>&1 | tee -a "$O/runs.log"
fi
pack_runs
echo "done +$(( $(date +%s) - T0 )) s"
