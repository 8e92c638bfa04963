#!/usr/bin/env bash
# The tensor-core decode attention (IB_ATTN_MMA, src/backend/cuda/attention_decode_mma.cu) on the
# H200: build (the tree's HEAD, shared with bench/gpu/moe_gemm.sh's build directory, so a second
# script on the warm machine builds nothing); the attention gpu tests against the CPU
# (CudaAttention*, DecodeOnTensorCores among them; CudaVision*: the flash kernels now share their
# warp pieces with it, detail/mma_attention.cuh) and the engine's CUDA tests with IB_ATTN_MMA=1
# (every decode step on the kernel, in graphs, against the CPU engine); then Llama-3-8B
# with IB_ATTN_MMA=0 (the split-KV kernel) and 64 (decode steps of 64+ sequences on tensor cores),
# interleaved, two passes:
#   cont  bf16, 1,024 prompts of 128 / 128, continuous (issue 15's 18,000 output tok/s)
#   seed  bf16, the seed protocol (batch 8: below 64 sequences, the control)
# and once each in fp8 (issue 13's 25,000 on the same continuous protocol).
# Usage (carry .deps/icu.tar.xz; ~7 minutes with a build): OUT=dir bash bench/gpu/attn_mma.sh
# Environment: IB_BUILD_DIR (/tmp/ib-head), IB_SKIP_TESTS=1, IB_DEADLINE_S (560). Writes
# tests.log, backend_cuda_test.json, engine_cuda_test.json, runs.log, runs.json and runs.tgz (the
# build log and every run's directory).
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && head_setup
# The engine against the CPU engine and the reference with every decode step of the kernel.
head_tests '*CudaAttention*:*CudaVision*:*ReportsTheKernelSwitches*' IB_ATTN_MMA=1 \
  '*CudaEngineTest*'
R=$O/runs; mkdir -p "$R"
SEED=(--batch-size 8 --input-len 32 --output-len 128 --num-prompts 200 --runs 1)
CONT=(--input-len 128 --output-len 128 --num-prompts 1024 --load-mode open --num-warmups 16 --runs 1)
{
  for pass in 1 2; do
    run_llama "cont_mma0_$pass" IB_ATTN_MMA=0 "${CONT[@]}"
    run_llama "cont_mma64_$pass" IB_ATTN_MMA=64 "${CONT[@]}"
    run_llama "seed_mma0_$pass" IB_ATTN_MMA=0 "${SEED[@]}"
    run_llama "seed_mma64_$pass" IB_ATTN_MMA=64 "${SEED[@]}"
  done
  run_llama cont_fp8_mma0 IB_ATTN_MMA=0 --quantization fp8 "${CONT[@]}"
  run_llama cont_fp8_mma64 IB_ATTN_MMA=64 --quantization fp8 "${CONT[@]}"
} 2>&1 | tee "$O/runs.log"
pack_runs
echo "done $(el)"
