#!/usr/bin/env bash
# After IB_PDL=2 became the default (bench/NOTES.md, "PDL, third try"): the gpu tests of the
# backend and the engine (IB_PDL 0, 1 and 2 cases), Llama-3-8B bf16 on dummy weights with the
# defaults at batch 1 (3 runs) and on the seed's protocol, the seed protocol with the down
# projection on the GEMV (IB_ADD_CUBLASLT=0, whose boundaries PDL overlaps, against cuBLASLt's,
# which take no part), and 1,024 prompts of continuous batching with IB_PDL 0 and 2 and with the
# K/V prefetch in every step (IB_ATTN_PREFETCH=256, which lost 3 % without PDL).
# Usage (~6 minutes of the machine), carrying .deps/icu.tar.xz: OUT=dir bash bench/gpu/pdl_default.sh
# IB_DEADLINE_S (540): runs that would end past it are skipped. Writes build.log, ctest.log,
# runs.json (each run's result.json keys that matter) and runs.log.
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh
use_icu
B=/tmp/ib-pdl
build_gpu_tests $B "$O/build.log" inferbench engine_cuda_test backend_cuda_test || exit 1
echo "built $(el)"
(cd $B && timeout 240 ctest -R "engine_cuda_test|backend_cuda_test" --output-on-failure) \
  > "$O/ctest.log" 2>&1
echo "ctest rc=$? $(el)"
grep -E "tests passed|Failed|FAILED|\*\*\*" "$O/ctest.log" | head -20
R=/tmp/pdl-runs; rm -rf $R; mkdir -p $R
DEADLINE=${IB_DEADLINE_S:-540}
B1=(--batch-size 1 --input-len 32 --output-len 128 --num-prompts 4 --runs 3)
SEED=(--batch-size 8 --input-len 32 --output-len 128 --num-prompts 200 --runs 1)
CONT=(--input-len 128 --output-len 128 --num-prompts 1024 --load-mode open --num-warmups 16 --runs 1)
{
  run_llama b1_default "${B1[@]}"; run_llama seed_default "${SEED[@]}"
  run_llama seed_add_gemv IB_ADD_CUBLASLT=0 "${SEED[@]}"
  run_llama cont_pdl0 IB_PDL=0 "${CONT[@]}"; run_llama cont_default "${CONT[@]}"
  run_llama cont_prefetch256 IB_ATTN_PREFETCH=256 "${CONT[@]}"
  run_llama seed_default_again "${SEED[@]}"; run_llama seed_add_gemv_again IB_ADD_CUBLASLT=0 "${SEED[@]}"
} 2>&1 | tee "$O/runs.log"
python3 bench/gpu/runs_json.py "$R" > "$O/runs.json"
echo "done $(el)"
