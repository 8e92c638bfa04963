#!/usr/bin/env bash
# IB_ATTN_MIXED at its default (16) on the tree's binaries (IB_PREBUILT=1: bench/gpu/prebuilt.sh's
# bundle): the attention's gpu tests and the switch report, every engine CUDA test, all at the
# defaults (attn_mixed.sh ran them with IB_ATTN_MIXED=1), the continuous runs of targets.sh
# (cont/), and the rate-limited run of attn_mixed.sh (1,024-token prompts at 30 requests/s) at
# IB_ATTN_MIXED 0, 1 and the default, interleaved.
# Usage (carry .deps/icu.tar.xz and .deps/prebuilt.tar.xz; ~6 minutes): IB_PREBUILT=1 OUT=dir
# bash bench/gpu/attn_mixed_check.sh. Writes tests.log, backend_cuda_test.json,
# engine_cuda_test.json, runs.log, runs.json, runs.tgz and cont/{runs.log,runs.json,runs.tgz}.
set -u; T0=$(date +%s)
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && head_setup
gpu_tests '*CudaAttention*:*ReportsTheKernelSwitches*' '*'
R=$O/runs; mkdir -p "$R"
RATE=(--input-len 1024 --output-len 128 --num-prompts 400 --request-rate 30 --num-warmups 8
  --runs 1 --seed 0)
{
  run_llama rate_default "${RATE[@]}"
  run_llama rate_mixed1 IB_ATTN_MIXED=1 "${RATE[@]}"
  run_llama rate_mixed0 IB_ATTN_MIXED=0 "${RATE[@]}"
} 2>&1 | tee "$O/runs.log"
pack_runs
OUT=$O/cont IB_SKIP_BUILD=1 IB_TARGETS=cont \
  IB_DEADLINE_S=$(( ${IB_DEADLINE_S:-560} - $(date +%s) + T0 )) bash bench/gpu/targets.sh | tail -6
echo "done +$(( $(date +%s) - T0 )) s"
