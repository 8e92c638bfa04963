#!/usr/bin/env bash
# The dense gate/up GEMV at 3 blocks per SM (IB_GEMV_SWIGLU_BLOCKS=3, now the default: registers
# capped at 80) against the compiler's 2 (0), issue 12; bench/NOTES.md "Three blocks per SM".
# (At 5575868 this script measured every dense GEMV at 3 blocks, IB_GEMV_DENSE_BLOCKS, which
# lost; bench/results/h200/occupancy/all-dense.) The gpu tests (engine_cuda_test has a case
# under each setting; backend_cuda_test's fused GEMV cases run the default), then Llama-3-8B
# bf16 on dummy weights, interleaved: batch 1 (3 runs) and the seed's protocol (batch 8, 200
# prompts), twice each; kernel timelines at batch 1 and 8 with the default.
# Usage (~7 minutes of the machine), carrying .deps/icu.tar.xz: OUT=dir bash bench/gpu/occupancy.sh
# IB_DEADLINE_S (540): runs that would end past it are skipped. Writes build.log, ctest.log,
# runs.log, runs.json (with each run's decode host phases) and profiles.tgz.
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh
use_icu
B=/tmp/ib-occ
build_gpu_tests $B "$O/build.log" inferbench engine_cuda_test backend_cuda_test \
  ib_kernel_profile || exit 1
echo "built $(el)"
T=$(find $B -name engine_cuda_test -type f -perm -u+x | head -1)
BT=$(find $B -name backend_cuda_test -type f -perm -u+x | head -1)
{ timeout 150 $T; echo "engine_cuda_test rc=$?"; timeout 60 $BT --gtest_filter='*CudaFused*:*Gemv*'
  echo "backend_cuda_test (fused and GEMV cases) rc=$?"; } > "$O/ctest.log" 2>&1
echo "tests $(el)"
grep -E "rc=|PASSED|FAILED|tests ran" "$O/ctest.log" | head -20
R=/tmp/occ-runs; rm -rf $R; mkdir -p $R
DEADLINE=${IB_DEADLINE_S:-540}
B1=(--batch-size 1 --input-len 32 --output-len 128 --num-prompts 4 --runs 3)
SEED=(--batch-size 8 --input-len 32 --output-len 128 --num-prompts 200 --runs 1)
{
  for i in 1 2; do
    for d in 0 3; do run_llama b1_swiglu${d}_$i IB_GEMV_SWIGLU_BLOCKS=$d "${B1[@]}"; done
    for d in 3 0; do run_llama seed_swiglu${d}_$i IB_GEMV_SWIGLU_BLOCKS=$d "${SEED[@]}"; done
  done
} 2>&1 | tee "$O/runs.log"
python3 bench/gpu/runs_json.py "$R" > "$O/runs.json"
python3 - "$O/runs.json" <<'PYEOF' | tee -a "$O/runs.log"
import json, sys
for name, r in json.load(open(sys.argv[1])).items():
    print(name, "step ms", r.get("decode_median_step_ms"), "device ms",
          r.get("decode_median_device_ms"), "host us", r.get("decode_host_phases_us"))
PYEOF
P=$(readlink -f $B/bench/gpu/libib_kernel_profile.so)
PR=/tmp/occ-prof; rm -rf $PR; mkdir -p $PR
for bs in 1 8; do
  for d in 3; do
    if (( $(date +%s) - T0 > DEADLINE - 25 )); then echo "profile b$bs $d skipped"; continue; fi
    IB_GEMV_SWIGLU_BLOCKS=$d IB_KERNEL_PROFILE=$PR/profile_b${bs}_swiglu$d.txt \
      IB_KERNEL_TIMELINE=$PR/timeline_b${bs}_swiglu$d.csv IB_KERNEL_TIMELINE_COUNT=4000 \
      LD_PRELOAD=$P timeout 60 $B/bin/inferbench run --device cuda --dtype bf16 \
      --load-format dummy --disable-tqdm --model llama-3-8b --batch-size $bs --input-len 32 \
      --output-len 128 --num-prompts $bs --runs 1 --result-dir /tmp/prof --overwrite \
      > $PR/profile_b${bs}_swiglu$d.log 2>&1
    echo "profile b$bs swiglu$d rc=$? $(el)" | tee -a "$O/runs.log"
    python3 bench/gpu/timeline_summary.py $PR/timeline_b${bs}_swiglu$d.csv | tee -a "$O/runs.log"
  done
done
tar czf "$O/profiles.tgz" -C $PR .
echo "done $(el)"
