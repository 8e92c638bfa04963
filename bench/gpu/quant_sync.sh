#!/usr/bin/env bash
# The quantized GEMVs waiting for their quantize (W8A8) or norm (W8A16, 4-bit) kernel by a flag
# (IB_QUANT_SYNC; issues 13 and 14, bench/NOTES.md "The quantized GEMVs wait for their quantize or
# norm kernel by a flag"), on binaries already
# in $B (IB_PREBUILT=1 unpacks bench/gpu/prebuilt.sh's bundle; IB_SKIP_BUILD=1 takes a warm
# machine's), in sections (IB_SYNC_SECTIONS, default "tests b1 seed"):
#   tests  backend_cuda_test CudaQuant.* and CudaQuant4.* (QuantizeSyncChangesNoResult among
#          them) and the switch report; engine_cuda_test CudaEngineQuant* and CudaEngineKvFp8*
#          with IB_QUANT_SYNC=1 and =2 (the engine against the CPU engine)
#   b1     Llama-3-8B dummy weights at batch 1 (32 / 128, 4 prompts, 3 runs), fp8, awq and
#          int8-w8a8 at IB_QUANT_SYNC 0, 1 and 2, interleaved, fp8 and awq twice
#   seed   the seed protocol (batch 8, 200 prompts of 32 / 128) in fp8 and awq at 0, 1 and 2
# Usage (carry .deps/icu.tar.xz and .deps/prebuilt.tar.xz; ~8 minutes): IB_PREBUILT=1 OUT=dir
# bash bench/gpu/quant_sync.sh. Writes tests.log, the tests' JSON, runs.log, runs.json, runs.tgz,
# sass_acquire.txt (the acquire loads in SASS and the two instructions after each).
set -u; T0=$(date +%s)
cd "$(dirname "$0")/../.." || exit 1; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && head_setup
has() { [[ " ${IB_SYNC_SECTIONS:-tests b1 seed} " == *" $1 "* ]]; }
R=$O/runs; mkdir -p "$R"
B1=(--batch-size 1 --input-len 32 --output-len 128 --num-prompts 4 --runs 3)
SEED=(--batch-size 8 --input-len 32 --output-len 128 --num-prompts 200 --runs 1 --load-mode static
  --max-model-len 4096 --seed 0)
{
  if has tests; then
    gpu_tests '*CudaQuant.*:*CudaQuant4.*:*ReportsTheKernelSwitches*'
    for v in 1 2; do
      IB_QUANT_SYNC=$v timeout 200 "$B/src/engine/engine_cuda_test" \
        --gtest_filter='*CudaEngineQuant*:*CudaEngineKvFp8*' \
        --gtest_output="json:$O/engine_cuda_test_sync$v.json" >> "$O/tests.log" 2>&1
      echo "engine_cuda_test (IB_QUANT_SYNC=$v) rc=$? +$(( $(date +%s) - T0 )) s"
    done
    grep -E "^\[  FAILED  \]|PASSED|FAILED TEST" "$O/tests.log" | tail -8
  fi
  if has b1; then
    for pass in 1 2; do
      for q in fp8 awq int8-w8a8; do
        [ $pass = 2 ] && [ $q = int8-w8a8 ] && continue
        for v in 0 1 2; do
          run_llama "b1_${q}_s${v}_$pass" IB_QUANT_SYNC=$v --quantization $q "${B1[@]}"
        done
      done
    done
  fi
  if has seed; then
    for q in fp8 awq; do
      for v in 0 1 2; do
        run_llama "seed_${q}_s$v" IB_QUANT_SYNC=$v --quantization $q "${SEED[@]}"
      done
    done
  fi
} 2>&1 | tee -a "$O/runs.log"
# Whether the flags' acquire loads (detail/flag_sync.cuh) come with an L1 invalidation in SASS
# (CCTL.IVALL after LDG.E.STRONG.GPU): the flagged GEMVs read x with non-coherent loads after it.
timeout 90 cuobjdump -sass "$B/bin/inferbench" 2>/dev/null |
  grep -A2 -E 'LDG\.E\.STRONG\.GPU' | head -60 > "$O/sass_acquire.txt"
echo "acquire loads followed by CCTL.IVALL: $(grep -c 'CCTL' "$O/sass_acquire.txt") of" \
  "$(grep -c 'STRONG.GPU' "$O/sass_acquire.txt") shown"
pack_runs
echo "done +$(( $(date +%s) - T0 )) s"
