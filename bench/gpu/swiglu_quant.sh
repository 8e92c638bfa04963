#!/usr/bin/env bash
# IB_SWIGLU_QUANT: the SwiGLU computed by the kernel that quantizes a W8A8 down projection's input
# (silu_mul_matmul's fused form): the quantized formats' gpu tests (CudaQuant*, with
# SwiGluIntoTheQuantizedDownProjection) and the switch report, the engine's quantized and
# calibration tests (their prefill steps take the fused form) against the CPU engine, then
# targets.sh's fp8 continuous run (Llama-3-8B, 1,024 prompts of 128 / 128) with IB_SWIGLU_QUANT 0
# and 1, interleaved twice, and once each with the E4M3 KV cache.
# Usage (carry .deps/icu.tar.xz and .deps/prebuilt.tar.xz; ~3 minutes): IB_PREBUILT=1 OUT=dir
# bash bench/gpu/swiglu_quant.sh. Writes tests.log, backend_cuda_test.json, engine_cuda_test.json,
# runs.log, runs.json and runs.tgz.
set -u; T0=$(date +%s)
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && head_setup
head_tests '*CudaQuant*:*ReportsTheKernelSwitches*' IB_SWIGLU_QUANT=1 \
  '*CudaEngineQuant*:*CudaEngineCalibration*'
R=$O/runs; mkdir -p "$R"
CONT=(--quantization fp8 --input-len 128 --output-len 128 --num-prompts 1024 --load-mode open
  --num-warmups 16 --runs 1)
{
  for i in 1 2; do
    run_llama "cont_fp8_sq0_$i" IB_SWIGLU_QUANT=0 "${CONT[@]}"
    run_llama "cont_fp8_sq1_$i" IB_SWIGLU_QUANT=1 "${CONT[@]}"
  done
  run_llama cont_fp8kv8_sq0 IB_SWIGLU_QUANT=0 --kv-cache-dtype fp8 "${CONT[@]}"
  run_llama cont_fp8kv8_sq1 IB_SWIGLU_QUANT=1 --kv-cache-dtype fp8 "${CONT[@]}"
} 2>&1 | tee "$O/runs.log"
pack_runs
echo "done +$(( $(date +%s) - T0 )) s"
