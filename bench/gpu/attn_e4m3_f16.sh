#!/usr/bin/env bash
# Two forms of the tensor-core decode attention (bench/NOTES.md, "The E4M3 decode attention's
# conversion" and "Blocks that take items in turn"): IB_ATTN_E4M3_F16=1 (a bf16 model's E4M3 cache
# converted to fp16, one paired conversion for two values instead of four instructions, and the
# MMAs in fp16) and IB_ATTN_MMA_PERSIST=3 (3 blocks an SM taking the (sequence, KV head) items in
# turn, the next item's first tile loading during the current one's last). The attention's gpu
# tests (DecodeOnTensorCores runs both: E4M3 with the switch on and off, 1-5 blocks taking every
# item) and the switch report, the engine's fp8-cache tests with IB_ATTN_MMA=1, then with both
# forms on; the op benchmark's decode_mma sweep (the kernel alone at 256 and 1,024 sequences of
# 64-1,024 keys, _f16 and _p3 rows) into sweep/; then targets.sh's continuous run (Llama-3-8B,
# 1,024 prompts of 128 / 128) in fp8 with the E4M3 cache (the defaults, f16, f16 + persist) and
# in bf16 (the defaults, persist), interleaved twice.
# Usage (carry .deps/icu.tar.xz and .deps/prebuilt.tar.xz; ~5 minutes): IB_PREBUILT=1 OUT=dir
# bash bench/gpu/attn_e4m3_f16.sh. Writes tests.log, backend_cuda_test.json,
# engine_cuda_test.json, engine_forms.json, sweep/decode_mma.{log,json}, runs.log, runs.json and
# runs.tgz. IB_SKIP_TESTS=1, IB_SKIP_SWEEP=1 and IB_SKIP_RUNS=1 skip those parts (a second call
# on a warm machine with IB_SKIP_BUILD=1); IB_OPS_DECODE_SHAPES (e.g. 1024x64,1024x256) limits the
# sweep; without IB_PREBUILT=1 it builds here (IB_EXTRA_TARGETS=ib_ops_bench).
set -u; T0=$(date +%s)
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O/sweep"
source bench/gpu/build_inferbench.sh && head_setup
head_tests '*CudaAttention*:*ReportsTheKernelSwitches*' IB_ATTN_MMA=1 '*KvFp8*'
if [ "${IB_SKIP_TESTS:-0}" != 1 ]; then
  IB_ATTN_MMA=1 IB_ATTN_E4M3_F16=1 IB_ATTN_MMA_PERSIST=3 timeout 200 \
    "$B/src/engine/engine_cuda_test" --gtest_filter='*KvFp8*' \
    --gtest_output="json:$O/engine_forms.json" >> "$O/tests.log" 2>&1
  echo "engine_cuda_test (IB_ATTN_MMA=1, F16=1, PERSIST=3) rc=$? +$(( $(date +%s) - T0 )) s"
  grep -E "^\[  FAILED  \]|PASSED|FAILED TEST" "$O/tests.log" | tail -4
fi
if [ "${IB_SKIP_SWEEP:-0}" != 1 ]; then
  IB_OPS_SECTIONS=decode_mma timeout 150 "$B/bench/gpu/ib_ops_bench" \
    "$O/sweep/decode_mma.json" > "$O/sweep/decode_mma.log" 2>&1
  echo "decode_mma sweep rc=$? +$(( $(date +%s) - T0 )) s"
fi
[ "${IB_SKIP_RUNS:-0}" = 1 ] && { echo "done +$(( $(date +%s) - T0 )) s"; exit 0; }
R=$O/runs; mkdir -p "$R"
CONT=(--input-len 128 --output-len 128 --num-prompts 1024 --load-mode open --num-warmups 16
  --runs 1)
KV8=(--quantization fp8 --kv-cache-dtype fp8)
{
  for i in 1 2; do
    run_llama "cont_fp8kv8_$i" "${KV8[@]}" "${CONT[@]}"
    run_llama "cont_fp8kv8_f16_$i" IB_ATTN_E4M3_F16=1 "${KV8[@]}" "${CONT[@]}"
    run_llama "cont_fp8kv8_f16_p3_$i" IB_ATTN_E4M3_F16=1 IB_ATTN_MMA_PERSIST=3 "${KV8[@]}" \
      "${CONT[@]}"
    run_llama "cont_bf16_$i" "${CONT[@]}"
    run_llama "cont_bf16_p3_$i" IB_ATTN_MMA_PERSIST=3 "${CONT[@]}"
  done
} 2>&1 | tee "$O/runs.log"
pack_runs
echo "done +$(( $(date +%s) - T0 )) s"
