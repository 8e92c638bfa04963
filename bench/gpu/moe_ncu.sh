#!/usr/bin/env bash
# Nsight Compute on the expert kernels of DeepSeek-V2-Lite's seed-protocol decode step (bench/
# NOTES.md, "Where DeepSeek-V2-Lite's seed-protocol step goes": the two moe_balanced_kernel
# launches are 68 % of a batch-8 step, gate/up at the card's read rate, down at 1.8-2.4 TB/s):
# bf16 dummy weights, batch 8 of 32-token prompts, on binaries already in $B (IB_PREBUILT=1
# unpacks bench/gpu/prebuilt.sh's bundle; IB_SKIP_BUILD=1 takes a warm machine's), the 201st
# launch (a decode step's layer) of
#   down   moe_balanced_kernel<bf16, 8, false> (k = 1,408: 176 of a block's 256 threads load)
#   gate   moe_balanced_kernel<bf16, 8, true> (k = 2,048)
# Sections as ncu_on's (build_inferbench.sh), with each launch's SASS table.
# Usage (carry .deps/icu.tar.xz and .deps/prebuilt.tar.xz; ~2 minutes): IB_PREBUILT=1 OUT=dir
# bash bench/gpu/moe_ncu.sh. Writes ncu.log, ncu_{down,gate}.txt and sass_{down,gate}.csv.gz.
set -u; T0=$(date +%s)
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && head_setup
v2lite_ncu() {
  ncu_on "$1" "$2" 200 "$B/bin/inferbench" run --device cuda --dtype bf16 --load-format dummy \
    --disable-tqdm --model deepseek-v2-lite --runs 1 --num-warmups 0 --load-mode static \
    --batch-size 8 --input-len 32 --output-len 16 --num-prompts 8 --result-dir "/tmp/ncu-run-$1" \
    --overwrite
}
{
  v2lite_ncu down 'moe_balanced_kernel<__nv_bfloat16, [^,]*8, [^>]*(false|0)>'
  v2lite_ncu gate 'moe_balanced_kernel<__nv_bfloat16, [^,]*8, [^>]*(true|1)>'
} 2>&1 | tee "$O/ncu.log"
echo "done +$(( $(date +%s) - T0 )) s"
