#!/usr/bin/env bash
# The experts' work items a warp each (IB_MOE_WARPS, IB_MOE_WARP_RING; issue 15, bench/NOTES.md
# "The expert work items a warp each"), on binaries already in $B (IB_PREBUILT=1 unpacks
# bench/gpu/prebuilt.sh's bundle; IB_SKIP_BUILD=1 takes a warm machine's), in sections
# (IB_MOE_SECTIONS, default "tests ab b1"):
#   tests  backend_cuda_test's MoE tests (every form, the warp items and their ring among them,
#          against the CPU op) and the engine's MoE tests and CudaEngineTest (Mixtral and DeepSeek
#          shapes among its families) with IB_MOE_WARPS=8 IB_MOE_WARP_RING=1, the engine against
#          the CPU engine
#   ab     DeepSeek-V2-Lite bf16 on the seed protocol (batch 8, 32 / 128, 200 prompts) at
#          IB_MOE_WARPS=0 (the balanced blocks), 8 with the ring (IB_MOE_WARP_RING=1), and that
#          with IB_MATMUL_TUNING=3 (every matmul of <= 8 rows that the static rule gives the GEMV
#          on it, untimed: the tuning, timing each alone, sends two of the layer's five to
#          cuBLASLt at 8 rows, 17.8 us a layer in session 38's profile), interleaved twice
#          (IB_MOE_AB_SETS picks among w0, w0g (w0 with IB_MATMUL_TUNING=3), w8 (the register
#          form), w8g, w8r and w8rg; default "w0 w8r w8rg")
#   b1     the same model at batch 1 once each: the wide tiles, the warp items (IB_MOE_WARPS=1
#          IB_MOE_WIDE=0)
#          and their ring
#   prof   the seed protocol at IB_MOE_WARPS=8 under the CUPTI tracer (per-kernel totals and the
#          last 3,000 kernels' timeline: prof_warps.tgz)
# Usage (carry .deps/icu.tar.xz and .deps/prebuilt.tar.xz; ~8 minutes): IB_PREBUILT=1 OUT=dir
# bash bench/gpu/moe_warps.sh. Writes tests.log, the tests' JSON, runs.log, runs.json, runs.tgz.
set -u; T0=$(date +%s)
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && head_setup
has() { [[ " ${IB_MOE_SECTIONS:-tests ab b1} " == *" $1 "* ]]; }
if has tests && [ "${IB_SKIP_TESTS:-0}" != 1 ]; then
  gpu_tests '*CudaMoe*'
  IB_MOE_WARPS=8 IB_MOE_WARP_RING=1 timeout 200 "$B/src/engine/engine_cuda_test" \
    --gtest_filter='*CudaEngineMoe*:*CudaEngineTest*' \
    --gtest_output="json:$O/engine_cuda_test.json" >> "$O/tests.log" 2>&1
  echo "engine_cuda_test (IB_MOE_WARPS=8 IB_MOE_WARP_RING=1) rc=$? +$(( $(date +%s) - T0 )) s"
  grep -E "^\[  FAILED  \]|PASSED|FAILED TEST" "$O/tests.log" | tail -8
fi
R=$O/runs; mkdir -p "$R"
SEED=(--batch-size 8 --input-len 32 --output-len 128 --num-prompts 200 --runs 1 --load-mode static
  --max-model-len 4096 --seed 0)
B1=(--batch-size 1 --input-len 32 --output-len 128 --num-prompts 4 --runs 3)
v2() { run_model deepseek-v2-lite "$@"; }  # (build_inferbench.sh)
{
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
  if has ab; then
    declare -A SETS=([w0]="IB_MOE_WARPS=0" [w0g]="IB_MOE_WARPS=0 IB_MATMUL_TUNING=3"
      [w8]="IB_MOE_WARPS=8" [w8g]="IB_MOE_WARPS=8 IB_MATMUL_TUNING=3"
      [w8r]="IB_MOE_WARPS=8 IB_MOE_WARP_RING=1"
      [w8rg]="IB_MOE_WARPS=8 IB_MOE_WARP_RING=1 IB_MATMUL_TUNING=3")
    for i in 1 2; do
      for set in ${IB_MOE_AB_SETS:-w0 w8r w8rg}; do
        # shellcheck disable=SC2086 # the set's variables are words
        v2 "seed_${set}_$i" ${SETS[$set]} "${SEED[@]}"
      done
    done
  fi
  if has b1; then
    v2 b1_w0 IB_MOE_WARPS=0 "${B1[@]}"
    v2 b1_w1 IB_MOE_WARPS=1 IB_MOE_WIDE=0 "${B1[@]}"
    v2 b1_w1r IB_MOE_WARPS=1 IB_MOE_WIDE=0 IB_MOE_WARP_RING=1 "${B1[@]}"
  fi
  if has prof; then
    lib=$(readlink -f "$B/bench/gpu/libib_kernel_profile.so")
    mkdir -p "$O/prof_warps"
    v2 prof_seed_w8 IB_MOE_WARPS=8 IB_KERNEL_PROFILE="$O/prof_warps/profile.txt" \
      IB_KERNEL_TIMELINE="$O/prof_warps/timeline.csv" IB_KERNEL_TIMELINE_COUNT=3000 \
      LD_PRELOAD="$lib" "${SEED[@]}"
    head -30 "$O/prof_warps/profile.txt"
    tar czf "$O/prof_warps.tgz" -C "$O" prof_warps && rm -rf "${O:?}/prof_warps"
  fi
} 2>&1 | tee -a "$O/runs.log"
pack_runs
echo "done +$(( $(date +%s) - T0 )) s"
