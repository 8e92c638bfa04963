#!/usr/bin/env bash
# IB_PDL=3 against the default 2 (issue 12; bench/NOTES.md "IB_PDL=3"): the attention lets the o
# projection's GEMV launch as it starts, and that GEMV sends its whole weight toward L2 before
# its wait, while the attention leaves the memory bus nearly idle. The gpu tests (engine_cuda_test
# has IB_PDL=3 cases), then Llama-3-8B on dummy weights, modes interleaved: bf16 batch 1 (3 runs)
# and the seed's protocol (batch 8, 200 prompts), twice each; fp8 batch 1; then CUPTI kernel
# profiles with per-kernel advances and timelines (bench/gpu/kernel_profile.cpp) at batch 1 and
# batch 8 under both modes.
# Usage (~8 minutes of the machine), carrying .deps/icu.tar.xz: OUT=dir bash bench/gpu/pdl3.sh
# IB_DEADLINE_S (540): runs that would end past it are skipped. Writes build.log, ctest.log,
# runs.log, runs.json (each run's result.json keys that matter) and profiles.tgz.
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh
use_icu
B=/tmp/ib-pdl3
build_gpu_tests $B "$O/build.log" inferbench engine_cuda_test backend_cuda_test \
  ib_kernel_profile || exit 1
echo "built $(el)"
(cd $B && timeout 200 ctest -R "engine_cuda_test|backend_cuda_test" --output-on-failure) \
  > "$O/ctest.log" 2>&1
echo "ctest rc=$? $(el)"
grep -E "tests passed|Failed|FAILED|\*\*\*" "$O/ctest.log" | head -20
R=/tmp/pdl3-runs; rm -rf $R; mkdir -p $R
DEADLINE=${IB_DEADLINE_S:-540}
B1=(--batch-size 1 --input-len 32 --output-len 128 --num-prompts 4 --runs 3)
SEED=(--batch-size 8 --input-len 32 --output-len 128 --num-prompts 200 --runs 1)
{
  for i in 1 2; do
    for m in 2 3; do run_llama b1_pdl${m}_$i IB_PDL=$m "${B1[@]}"; done
    for m in 3 2; do run_llama seed_pdl${m}_$i IB_PDL=$m "${SEED[@]}"; done
  done
  for m in 2 3; do run_llama b1_fp8_pdl$m IB_PDL=$m --quantization fp8 "${B1[@]}"; done
} 2>&1 | tee "$O/runs.log"
python3 bench/gpu/runs_json.py "$R" > "$O/runs.json"
P=$(readlink -f $B/bench/gpu/libib_kernel_profile.so)
PR=/tmp/pdl3-prof; rm -rf $PR; mkdir -p $PR
for bs in 1 8; do
  for m in 2 3; do
    if (( $(date +%s) - T0 > DEADLINE - 25 )); then echo "profile b$bs $m skipped"; continue; fi
    IB_PDL=$m IB_KERNEL_PROFILE=$PR/profile_b${bs}_pdl$m.txt \
      IB_KERNEL_TIMELINE=$PR/timeline_b${bs}_pdl$m.csv IB_KERNEL_TIMELINE_COUNT=4000 \
      LD_PRELOAD=$P timeout 60 $B/bin/inferbench run --device cuda --dtype bf16 \
      --load-format dummy --disable-tqdm --model llama-3-8b --batch-size $bs --input-len 32 \
      --output-len 128 --num-prompts $bs --runs 1 --result-dir /tmp/prof --overwrite \
      > $PR/profile_b${bs}_pdl$m.log 2>&1
    echo "profile b$bs pdl$m rc=$? $(el)" | tee -a "$O/runs.log"
  done
done
tar czf "$O/profiles.tgz" -C $PR .
echo "done $(el)"
