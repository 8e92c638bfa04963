#!/usr/bin/env bash
# The quantized GEMVs' ring running on from tile to tile on a persistent grid (IB_GEMV_PERSIST > 0;
# issues 13 and 14, bench/NOTES.md "A persistent block's ring runs on from tile to tile"), and
# session 46's defaults (IB_GEMM_TUNE=1), on binaries already in $B (IB_PREBUILT=1 unpacks
# bench/gpu/prebuilt.sh's bundle; IB_SKIP_BUILD=1 takes a warm machine's), in sections
# (IB_CHAIN_SECTIONS, default "tests b1 cont"), each run skipped past the deadline
# (IB_DEADLINE_S, 560 s):
#   tests  backend_cuda_test CudaGemvPersist* (every quantized format on a persistent grid, ring
#          on and off, against one block per tile bit for bit), *GemmBuckets* (the tuned buckets
#          against the CPU), *QuantizeSync* and the switch report; engine_cuda_test
#          CudaEngineQuant* at IB_GEMV_PERSIST=3 (the engine against the CPU engine)
#   b1     Llama-3-8B dummy weights at batch 1 (32 / 128, 4 prompts, 3 runs): awq and fp8 at
#          IB_GEMV_PERSIST 0, 2 and 3, nf4 at 0 and 3, interleaved, twice
#   cont   bf16 continuous (1,024 prompts of 128 / 128) at the defaults, twice (issue 15: 18,000
#          on the H200)
# Usage (carry .deps/icu.tar.xz and .deps/prebuilt.tar.xz; ~6 minutes): IB_PREBUILT=1 OUT=dir
# bash bench/gpu/ring_chain.sh. Writes tests.log, the tests' JSON, runs.log, runs.json, runs.tgz.
set -u; T0=$(date +%s)
cd "$(dirname "$0")/../.." || exit 1; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && head_setup
has() { [[ " ${IB_CHAIN_SECTIONS:-tests b1 cont} " == *" $1 "* ]]; }
R=$O/runs; mkdir -p "$R"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$O/runs.log"
B1=(--batch-size 1 --input-len 32 --output-len 128 --num-prompts 4 --runs 3)
CONT=(--input-len 128 --output-len 128 --num-prompts 1024 --load-mode open --num-warmups 16
  --runs 1)
{
  if has tests; then
    gpu_tests '*CudaGemvPersist*:*GemmBuckets*:*QuantizeSync*:*ReportsTheKernelSwitches*'
    IB_GEMV_PERSIST=3 timeout 150 "$B/src/engine/engine_cuda_test" \
      --gtest_filter='*CudaEngineQuant*' --gtest_output="json:$O/engine_cuda_test_p3.json" \
      >> "$O/tests.log" 2>&1
    echo "engine_cuda_test (IB_GEMV_PERSIST=3) rc=$? +$(( $(date +%s) - T0 )) s"
    grep -E "^\[  FAILED  \]|PASSED|FAILED TEST" "$O/tests.log" | tail -8
  fi
  # Each pass: batch 1, then the continuous run (a short call keeps pass 1 whole).
  for pass in 1 2; do
    if has b1; then
      for q in awq fp8 nf4; do
        for p in 0 2 3; do
          [ $q = nf4 ] && [ $p = 2 ] && continue
          run_llama "b1_${q}_p${p}_$pass" IB_GEMV_PERSIST=$p --quantization $q "${B1[@]}"
        done
      done
    fi
    has cont && run_llama "cont_bf16_$pass" "${CONT[@]}"
  done
} 2>&1 | tee -a "$O/runs.log"
pack_runs
echo "done +$(( $(date +%s) - T0 )) s"
