#!/usr/bin/env bash
# Nsight Compute on the flash prefill kernel (attention_flash.cu; bench/NOTES.md: 105-148 TFLOP/s,
# 0.665 ms a layer for a continuous step's ~12,500 prompt tokens), before any change to it:
# Llama-3-8B bf16 dummy weights on binaries already in $B (IB_PREBUILT=1 unpacks
# bench/gpu/prebuilt.sh's bundle; IB_SKIP_BUILD=1 takes a warm machine's), the 41st flash launch
# (a layer of the second static batch's prefill step) of
#   p512   batches of 8 prompts of 512 tokens (the ops table's 8 x 512)
#   p128   batches of 128 prompts of 128 tokens (a continuous run's prefill chunks)
# Sections: speed of light, memory, warp states, occupancy, launch, scheduler, and the source
# counters, whose per-instruction table (SASS, executed instructions and stalls) is written too.
# Usage (carry .deps/icu.tar.xz and .deps/prebuilt.tar.xz; ~3 minutes): IB_PREBUILT=1 OUT=dir
# bash bench/gpu/flash_ncu.sh. Writes ncu.log, ncu_p512.txt, ncu_p128.txt, sass_p512.csv.gz and
# sass_p128.csv.gz.
set -u; T0=$(date +%s)
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && head_setup
{
  ncu_prof p512 flash_kernel 40 --output-len 2 --batch-size 8 --input-len 512 --num-prompts 16
  ncu_prof p128 flash_kernel 40 --output-len 2 --batch-size 128 --input-len 128 --num-prompts 256
} 2>&1 | tee "$O/ncu.log"
echo "done +$(( $(date +%s) - T0 )) s"
