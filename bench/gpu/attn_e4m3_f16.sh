#!/usr/bin/env bash
# IB_ATTN_E4M3_F16: a bf16 model's tensor-core decode attention over an E4M3 cache converts the
# cache bytes to fp16 (one paired conversion for two values) instead of bf16 (that conversion,
# two f16 -> f32 and a pack: four instructions), and runs its MMAs in fp16 (bench/NOTES.md,
# "The E4M3 decode attention's conversion"). The attention's gpu tests (DecodeOnTensorCores runs
# the E4M3 cases with the switch on and off) and the switch report, the engine's fp8-cache tests
# with IB_ATTN_MMA=1 with the switch off and on; then the op benchmark's decode_mma sweep (the
# kernel alone at 256 and 1,024 sequences of 64-1,024 keys, _f16 rows beside the bf16 ones) into
# sweep/; then targets.sh's continuous run (Llama-3-8B, 1,024 prompts of 128 / 128) with the E4M3
# cache in fp8 (switch off and on, interleaved twice) and with bf16 weights (off and on).
# Usage (carry .deps/icu.tar.xz and .deps/prebuilt.tar.xz; ~5 minutes): IB_PREBUILT=1 OUT=dir
# bash bench/gpu/attn_e4m3_f16.sh. Writes tests.log, backend_cuda_test.json,
# engine_cuda_test.json, engine_f16.json, sweep/decode_mma.{log,json}, runs.log, runs.json and
# runs.tgz. IB_SKIP_TESTS=1 and IB_SKIP_SWEEP=1 skip those parts (a second call on a warm machine
# with IB_SKIP_BUILD=1); without IB_PREBUILT=1 it builds here (IB_EXTRA_TARGETS=ib_ops_bench).
set -u; T0=$(date +%s)
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O/sweep"
source bench/gpu/build_inferbench.sh && head_setup
head_tests '*CudaAttention*:*ReportsTheKernelSwitches*' IB_ATTN_MMA=1 '*KvFp8*'
if [ "${IB_SKIP_TESTS:-0}" != 1 ]; then
  IB_ATTN_MMA=1 IB_ATTN_E4M3_F16=1 timeout 200 "$B/src/engine/engine_cuda_test" \
    --gtest_filter='*KvFp8*' --gtest_output="json:$O/engine_f16.json" >> "$O/tests.log" 2>&1
  echo "engine_cuda_test (IB_ATTN_MMA=1 IB_ATTN_E4M3_F16=1) rc=$? +$(( $(date +%s) - T0 )) s"
  grep -E "^\[  FAILED  \]|PASSED|FAILED TEST" "$O/tests.log" | tail -4
fi
[ "${IB_SKIP_SWEEP:-0}" = 1 ] ||
  IB_OPS_SECTIONS=decode_mma timeout 120 "$B/bench/gpu/ib_ops_bench" "$O/sweep/decode_mma.json" \
  > "$O/sweep/decode_mma.log" 2>&1
echo "decode_mma sweep rc=$? +$(( $(date +%s) - T0 )) s"
R=$O/runs; mkdir -p "$R"
CONT=(--kv-cache-dtype fp8 --input-len 128 --output-len 128 --num-prompts 1024 --load-mode open
  --num-warmups 16 --runs 1)
{
  for i in 1 2; do
    run_llama "cont_fp8_kv8_f16off_$i" IB_ATTN_E4M3_F16=0 --quantization fp8 "${CONT[@]}"
    run_llama "cont_fp8_kv8_f16on_$i" IB_ATTN_E4M3_F16=1 --quantization fp8 "${CONT[@]}"
  done
  run_llama cont_bf16_kv8_f16off IB_ATTN_E4M3_F16=0 "${CONT[@]}"
  run_llama cont_bf16_kv8_f16on IB_ATTN_E4M3_F16=1 "${CONT[@]}"
} 2>&1 | tee "$O/runs.log"
pack_runs
echo "done +$(( $(date +%s) - T0 )) s"
