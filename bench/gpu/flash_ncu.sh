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
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && head_setup
prof() {
  local name=$1
  shift
  timeout 200 ncu --clock-control none --kernel-name-base demangled -k "regex:flash_kernel" \
    --launch-skip 40 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats \
    --section SourceCounters --export "/tmp/ncu-$name" --force-overwrite \
    "$B/bin/inferbench" run --device cuda --dtype bf16 --load-format dummy --disable-tqdm \
    --model llama-3-8b --output-len 2 --runs 1 --num-warmups 0 --load-mode static \
    --result-dir "/tmp/ncu-run-$name" --overwrite "$@" > "$O/ncu_$name.txt" 2>&1
  echo "$name rc=$? $(el)"
  grep -E "flash_kernel|Duration|DRAM Throughput|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|Dynamic Shared|Issued Warp|No Eligible|Warp Cycles Per Issued|Grid Size" \
    "$O/ncu_$name.txt" | cut -c1-150
  timeout 60 ncu -i "/tmp/ncu-$name.ncu-rep" --page source --csv --print-source sass 2> \
    "$O/sass_$name.err" | gzip > "$O/sass_$name.csv.gz"
  echo "source page $name: $(zcat "$O/sass_$name.csv.gz" | wc -l) lines $(el)"
}
{
  prof p512 --batch-size 8 --input-len 512 --num-prompts 16
  prof p128 --batch-size 128 --input-len 128 --num-prompts 256
} 2>&1 | tee "$O/ncu.log"
rm -f "$O"/sass_*.err
echo "done $(el)"
