#!/usr/bin/env bash
# Nsight Compute on the fused decode gate/up GEMV (issue 16): the base kernel and its LoRA variant
# (one rank-16 adapter on every linear layer; the LoRA switches as the environment sets them),
# Llama-3-8B bf16 dummy weights, static batch of 8 (the seed protocol's), one launch each after
# two decode steps. Sections: speed of light, memory, warp states, occupancy, launch, scheduler.
# Usage (~2 minutes with the build; carry .deps/icu.tar.xz): OUT=dir bash bench/gpu/lora_ncu.sh
# Other kernels: IB_NCU_BASE_REGEX and IB_NCU_LORA_REGEX (regexes over demangled names, the base
# run's and the adapter's), IB_NCU_LORA_ENV (VAR=value words for the adapter's run), e.g. the
# attention with o's lookahead: IB_NCU_BASE_REGEX='split_kv_lean_kernel<.*\(bool\)0>'
# IB_NCU_LORA_REGEX='split_kv_lean_kernel<.*\(bool\)1>' IB_NCU_LORA_ENV=IB_LORA_ATTN=1 (name
# the lean kernel: a bare split_kv also matches the prefill's non-lean one first);
# IB_NCU_BASE_LORA=1 gives the base run the adapter too (its regex may then name a LoRA kernel,
# e.g. the lookahead's).
# Environment: B (the build directory, /tmp/ib-lora-ab); IB_PREBUILT=1 takes bench/gpu/prebuilt.sh's
# carried binaries instead of a build (no SASS dump then); IB_NCU_SOURCE=1 also collects the source
# counters and writes each kernel's per-instruction SASS table (sass_NAME.csv.gz: executed
# instructions and warp stalls per instruction), and IB_SASS_REGEX (a regex over demangled names)
# dumps those kernels' SASS from the GEMV object (bench/gpu/sass_dump.py, sass.txt.gz).
# Writes build.log, ncu_base.txt, ncu_lora.txt and their summary in ncu.log.
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh
use_icu
B=${B:-/tmp/ib-lora-ab}
if [ "${IB_PREBUILT:-0}" = 1 ]; then
  use_prebuilt
  prebuilt_libs "$B"
else
  build_gpu_tests $B "$O/build.log" inferbench || exit 1
  echo "built $(el)"
fi
A=bench/adapters/l3-r16-0
[ -f $A/adapter_model.safetensors ] ||
  python3 tools/make_lora.py --hidden-size 4096 --intermediate-size 14336 --num-heads 32 \
    --num-kv-heads 8 --layers 32 --rank 16 --seed 0 --numpy --out $A > /dev/null
prof() {
  local name=$1 regex=$2 env_words=$3
  shift 3
  local src=()
  [ "${IB_NCU_SOURCE:-0}" = 1 ] && src=(--section SourceCounters --export "/tmp/ncu-$name" --force-overwrite)
  timeout 200 ncu --clock-control none --kernel-name-base demangled -k "regex:$regex" \
    --launch-skip 64 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats \
    "${src[@]}" env $env_words "$B/bin/inferbench" run --device cuda --dtype bf16 \
    --load-format dummy --disable-tqdm \
    --model llama-3-8b --batch-size 8 --input-len 32 --output-len 16 --num-prompts 8 --runs 1 \
    --result-dir "/tmp/ncu-$name" --overwrite "$@" > "$O/ncu_$name.txt" 2>&1
  echo "$name rc=$? $(el)"
  # With --export ncu prints no sections: they come from the report.
  [ "${IB_NCU_SOURCE:-0}" = 1 ] &&
    timeout 60 ncu -i "/tmp/ncu-$name.ncu-rep" --page details >> "$O/ncu_$name.txt" 2>&1
  grep -E "gemv_kernel|split_kv|Duration|DRAM Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|Shared Memory Configuration|Dynamic Shared|Issued Warp|No Eligible|Warp Cycles Per Issued" \
    "$O/ncu_$name.txt" | cut -c1-150
  if [ "${IB_NCU_SOURCE:-0}" = 1 ]; then
    timeout 60 ncu -i "/tmp/ncu-$name.ncu-rep" --page source --csv --print-source sass \
      2>> "$O/ncu_$name.txt" | gzip > "$O/sass_$name.csv.gz"
    echo "source page $name: $(zcat "$O/sass_$name.csv.gz" | wc -l) lines $(el)"
  fi
}
{
  base_args=()
  [ "${IB_NCU_BASE_LORA:-0}" = 1 ] &&
    base_args=(--enable-lora --max-lora-rank 16 --lora-modules "a0=$A")
  prof base \
    "${IB_NCU_BASE_REGEX:-\(int\)2, \(bool\)1, \(int\)0, \(int\)3, \(bool\)0, \(bool\)0>}" "" \
    "${base_args[@]}"
  prof lora "${IB_NCU_LORA_REGEX:-\(int\)2, \(bool\)1, \(int\)0, \(int\)[23], \(bool\)1}" \
    "${IB_NCU_LORA_ENV:-}" --enable-lora \
    --max-lora-rank 16 --lora-modules "a0=$A"
} 2>&1 | tee "$O/ncu.log"
if [ -n "${IB_SASS_REGEX:-}" ] && [ "${IB_PREBUILT:-0}" != 1 ]; then
  python3 bench/gpu/sass_dump.py "$B/src/backend/cuda/CMakeFiles/ib_backend_cuda.dir/gemv.cu.o" \
    "$IB_SASS_REGEX" | gzip > "$O/sass.txt.gz"
  echo "sass: $(zcat "$O/sass.txt.gz" | grep -c '^// kernel') kernels $(el)"
fi
echo "done $(el)"
