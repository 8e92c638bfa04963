#!/usr/bin/env bash
# The A/B behind two default switches, on binaries already in $B (IB_PREBUILT=1 unpacks the
# bundle of bench/gpu/prebuilt.sh; IB_SKIP_BUILD=1 takes a warm machine's): Llama-3-8B on dummy
# weights, interleaved, two passes:
#   cont_mma{0,128}     bf16, 1,024 prompts of 128 / 128, continuous: IB_ATTN_MMA=0 (split-KV)
#                       against 128 (decode steps of 128+ sequences on the tensor-core kernel)
#   fp8_mma{0,128}      the same in fp8 (one pass)
#   awq_cont_gemm{0,64} awq, 512 prompts of 128 / 128, continuous: IB_QUANT_GEMM=0 (dequantize
#                       for cuBLASLt past the GEMV's 16 rows) against 64 (17-64 rows on the GEMM)
#   int8_cont_gemm{0,64} the same in int8 (W8A16)
# Usage (carry .deps/icu.tar.xz and .deps/prebuilt.tar.xz; ~4 minutes): IB_PREBUILT=1 OUT=dir
# bash bench/gpu/defaults_ab.sh. Writes runs.log, runs.json and runs.tgz.
set -u; T0=$(date +%s)
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && head_setup
R=$O/runs; mkdir -p "$R"
CONT=(--input-len 128 --output-len 128 --num-prompts 1024 --load-mode open --num-warmups 16 --runs 1)
QCONT=(--input-len 128 --output-len 128 --num-prompts 512 --load-mode open --num-warmups 16
  --runs 1)
{
  for pass in 1 2; do
    run_llama "cont_mma0_$pass" IB_ATTN_MMA=0 "${CONT[@]}"
    run_llama "cont_mma128_$pass" IB_ATTN_MMA=128 "${CONT[@]}"
    run_llama "awq_cont_gemm0_$pass" IB_QUANT_GEMM=0 --quantization awq "${QCONT[@]}"
    run_llama "awq_cont_gemm64_$pass" IB_QUANT_GEMM=64 --quantization awq "${QCONT[@]}"
  done
  run_llama fp8_mma0 IB_ATTN_MMA=0 --quantization fp8 "${CONT[@]}"
  run_llama fp8_mma128 IB_ATTN_MMA=128 --quantization fp8 "${CONT[@]}"
  run_llama int8_cont_gemm0 IB_QUANT_GEMM=0 --quantization int8 "${QCONT[@]}"
  run_llama int8_cont_gemm64 IB_QUANT_GEMM=64 --quantization int8 "${QCONT[@]}"
} 2>&1 | tee "$O/runs.log"
pack_runs
echo "done +$(( $(date +%s) - T0 )) s"
