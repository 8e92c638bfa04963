#!/usr/bin/env bash
# Nsight Compute on the tensor-core decode attention (attention_decode_mma.cu) alone, through the
# op benchmark (its decode_mma section, bench/gpu/ops_bench_decode.cpp) on binaries already in $B
# (IB_PREBUILT=1 unpacks bench/gpu/prebuilt.sh's bundle; IB_SKIP_BUILD=1 takes a warm machine's).
# First the whole sweep (256 and 1,024 sequences of 64 to 1,024 keys, bf16 and E4M3 caches, split-KV
# beside; ~1 minute) into decode_mma.log and decode_mma.json. Then, at 1,024 sequences of 256
# keys (IB_OPS_DECODE_SHAPES=1024x256: 4 tiles a block, near a continuous run's ~3), the third
# launch of
#   bf16      the bf16 cache (decode_mma_kernel)
#   e4m3      the E4M3 cache, MMAs in bf16 (decode_mma_e4m3_kernel<bf16, 128, bf16>)
#   e4m3_f16  the E4M3 cache, MMAs in fp16 (IB_ATTN_E4M3_F16: <bf16, 128, __half>)
# with the sections speed of light, memory, warp states, occupancy, launch, scheduler and the
# source counters (build_inferbench.sh's ncu_on), whose per-instruction table is written too.
# (Session 36's form profiled the 321st launch of an `inferbench run`, which fell in the prefill
# steps, where every block exits at once.)
# Usage (carry .deps/icu.tar.xz and .deps/prebuilt.tar.xz; ~3 minutes): IB_PREBUILT=1 OUT=dir
# bash bench/gpu/decode_ncu.sh. Writes decode_mma.log, decode_mma.json, ncu.log and, in ncu/,
# ncu_NAME.txt and sass_NAME.csv.gz for the three.
set -u; T0=$(date +%s)
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && head_setup
OPS=$B/bench/gpu/ib_ops_bench
IB_OPS_SECTIONS=decode_mma timeout 240 "$OPS" "$O/decode_mma.json" > "$O/decode_mma.log" 2>&1
echo "decode_mma sweep rc=$? +$(( $(date +%s) - T0 )) s"
TOP=$O; O=$TOP/ncu; mkdir -p "$O"
export IB_OPS_SECTIONS=decode_mma IB_OPS_DECODE_SHAPES=1024x256
{
  ncu_on bf16 'decode_mma_kernel<__nv_bfloat16, .int.128>' 2 "$OPS" /tmp/ncu-ops-bf16.json
  ncu_on e4m3 'decode_mma_e4m3_kernel<__nv_bfloat16, .int.128, __nv_bfloat16>' 2 "$OPS" \
    /tmp/ncu-ops-e4m3.json
  ncu_on e4m3_f16 'decode_mma_e4m3_kernel<__nv_bfloat16, .int.128, __half>' 2 "$OPS" \
    /tmp/ncu-ops-e4m3-f16.json
} 2>&1 | tee "$TOP/ncu.log"
echo "done +$(( $(date +%s) - T0 )) s"
