#!/usr/bin/env bash
# The defaults of session 33 (IB_ATTN_MMA=128, IB_MOE_GEMM=32, IB_QUANT_GEMM=64) on the tree's
# binaries (IB_PREBUILT=1: bench/gpu/prebuilt.sh's bundle): the gpu tests of the kernels they
# select (CudaQuant*, CudaMoe*, CudaAttention*, the switch report) and every engine CUDA test, all
# at the defaults; the bf16 Mixtral add-norm engine tests with IB_ATTN_MMA=1 (one near-tie routing
# flip, excused with the reference's router gap, which the log prints); then Mixtral-8x7B AWQ
# prefill-heavy with IB_MOE_GEMM=0 against 32 (moe_gemm.sh's mixtral_awq_pre, in moe/).
# Usage (carry .deps/icu.tar.xz and .deps/prebuilt.tar.xz; ~6 minutes): IB_PREBUILT=1 OUT=dir
# bash bench/gpu/defaults_check.sh. Writes tests.log, backend_cuda_test.json,
# engine_cuda_test.json, mixtral_mma1.log and moe/{runs.log,runs.json,runs.tgz}.
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && head_setup
IB_TEST_TIMEOUT_S=300 gpu_tests '*CudaQuant*:*CudaMoe*:*CudaAttention*:*ReportsTheKernelSwitches*' \
  '*'
IB_ATTN_MMA=1 timeout 100 "$B/src/engine/engine_cuda_test" --gtest_filter='*mixtral_addnorm*' \
  > "$O/mixtral_mma1.log" 2>&1
echo "mixtral add-norm tests, IB_ATTN_MMA=1: rc=$? $(el)"
grep -E "near tie|Failure|worst at|PASSED|FAILED TEST" "$O/mixtral_mma1.log" | head -12
OUT=$O/moe IB_SKIP_BUILD=1 IB_SKIP_TESTS=1 IB_SKIP_PARITY=1 IB_RUNS_LIST=mixtral_awq_pre \
  IB_DEADLINE_S=$(( ${IB_DEADLINE_S:-560} - $(date +%s) + T0 )) bash bench/gpu/moe_gemm.sh | tail -4
echo "done $(el)"
