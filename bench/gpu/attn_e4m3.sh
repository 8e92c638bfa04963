#!/usr/bin/env bash
# The tensor-core decode attention over an E4M3 cache (IB_ATTN_MMA now takes `--kv-cache-dtype
# fp8`, which kept the split-KV kernel before): the attention's gpu tests (DecodeOnTensorCores with
# E4M3 caches, the mixed batches) and the switch report, every engine test of the fp8 cache with
# IB_ATTN_MMA=1 (every decode step on the kernel, inside the graphs, against the CPU engine), then
# targets.sh's continuous run (Llama-3-8B, 1,024 prompts of 128 / 128) in fp8 with the E4M3 cache
# on the tensor-core kernel and in bf16 (bf16 cache), interleaved twice. (results/h100/attn-e4m3/
# run1 ran its first form at fa616d1: the bf16 cache and split-KV beside the E4M3 kernel; run2 at
# e4dbd7a, with a third stage of E4M3 bytes and the blocks' L2 prefetch, both since removed.)
# Usage (carry .deps/icu.tar.xz and .deps/prebuilt.tar.xz; ~5 minutes): IB_PREBUILT=1 OUT=dir
# bash bench/gpu/attn_e4m3.sh. Writes tests.log, backend_cuda_test.json, engine_cuda_test.json,
# runs.log, runs.json and runs.tgz.
set -u; T0=$(date +%s)
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && head_setup
head_tests '*CudaAttention*:*ReportsTheKernelSwitches*' IB_ATTN_MMA=1 '*KvFp8*'
R=$O/runs; mkdir -p "$R"
CONT=(--input-len 128 --output-len 128 --num-prompts 1024 --load-mode open --num-warmups 16 --runs 1)
{
  for i in 1 2; do
    run_llama "cont_fp8_kv8_$i" --quantization fp8 --kv-cache-dtype fp8 "${CONT[@]}"
    run_llama "cont_bf16_$i" "${CONT[@]}"
  done
} 2>&1 | tee "$O/runs.log"
pack_runs
echo "done +$(( $(date +%s) - T0 )) s"
