#!/usr/bin/env bash
# Nsight Compute on the tensor-core decode attention (attention_decode_mma.cu; bench/NOTES.md,
# session 35: 302 us a layer with the bf16 cache and 270 with the E4M3 cache at a continuous
# run's ~1,000 sequences, for half the bytes: latency-bound, not bandwidth-bound), before any
# change to it: Llama-3-8B bf16 dummy weights on binaries already in $B (IB_PREBUILT=1 unpacks
# bench/gpu/prebuilt.sh's bundle; IB_SKIP_BUILD=1 takes a warm machine's), one static batch of 512
# prompts of 192 tokens and 16 out (~200 keys, 3-4 key tiles a block), the 321st launch of the
# kernel (past the prefill's mixed steps: a decode step of all 512 sequences) with
#   bf16   the bf16 cache (decode_mma_kernel)
#   e4m3   --kv-cache-dtype fp8 (decode_mma_e4m3_kernel)
# First the op benchmark's decode_mma section (bench/gpu/ops_bench_decode.cpp: the kernel alone at
# 256 and 1,024 sequences of 64 to 1,024 keys, bf16 and E4M3 caches, split-KV beside it; ~1
# minute), into decode_mma.log and decode_mma.json. Nsight Compute's sections: speed of light,
# memory, warp states, occupancy, launch, scheduler, and the source counters, whose
# per-instruction table (SASS, executed instructions and stalls) is written too.
# Usage (carry .deps/icu.tar.xz and .deps/prebuilt.tar.xz; ~3 minutes): IB_PREBUILT=1 OUT=dir
# bash bench/gpu/decode_ncu.sh. Writes decode_mma.log, decode_mma.json, ncu.log, ncu_bf16.txt,
# ncu_e4m3.txt, sass_bf16.csv.gz and sass_e4m3.csv.gz.
set -u; T0=$(date +%s)
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && head_setup
IB_OPS_SECTIONS=decode_mma timeout 240 "$B/bench/gpu/ib_ops_bench" "$O/decode_mma.json" \
  > "$O/decode_mma.log" 2>&1
echo "decode_mma sweep rc=$? +$(( $(date +%s) - T0 )) s"
RUN=(--batch-size 512 --num-prompts 512 --input-len 192 --output-len 16)
{
  ncu_prof bf16 decode_mma 320 "${RUN[@]}"
  ncu_prof e4m3 decode_mma 320 "${RUN[@]}" --kv-cache-dtype fp8
} 2>&1 | tee "$O/ncu.log"
echo "done +$(( $(date +%s) - T0 )) s"
