#!/usr/bin/env bash
# Programmatic dependent launch, third A/B (issue 12; bench/NOTES.md "PDL, third try"): the gpu
# tests (engine_cuda_test has cases under each IB_PDL mode, and the LoRA cases with their bf16
# bound), then Llama-3-8B bf16 on dummy weights at batch 1 (3 runs) and on the seed's protocol
# (batch 8, 200 prompts) with IB_PDL=0, 1 and 2, interleaved so that drift hits every mode, then
# fp8 and awq at batch 1 with modes 0 and 2, then CUPTI kernel profiles at batch 1 with modes 0
# and 2.
# Usage (~8 minutes of the machine), carrying .deps/icu.tar.xz: OUT=dir bash bench/gpu/pdl.sh
# IB_DEADLINE_S (540): runs that would end past it are skipped; the tarball is always written.
# Writes build.log, ctest.log, pdl.json (each run's result.json keys that matter), runs.tgz,
# kernel_profile_b1_pdl{0,2}.txt.
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh
use_icu
B=/tmp/ib-pdl
build_gpu_tests $B "$O/build.log" inferbench engine_cuda_test backend_cuda_test \
  backend_test ib_kernel_profile || exit 1
echo "built $(el)"
(cd $B && timeout 240 ctest -R "engine_cuda_test|backend_cuda_test|^backend_test" \
  --output-on-failure) > "$O/ctest.log" 2>&1
echo "ctest rc=$? $(el)"
grep -E "tests passed|Failed|FAILED|\*\*\*" "$O/ctest.log" | head -20
R=$O/runs; mkdir -p $R
DEADLINE=${IB_DEADLINE_S:-540}
B1=(--batch-size 1 --input-len 32 --output-len 128 --num-prompts 4 --runs 3)
SEED=(--batch-size 8 --input-len 32 --output-len 128 --num-prompts 200 --runs 1)
for m in 0 1 2; do run_llama b1_pdl$m IB_PDL=$m "${B1[@]}"; done
for m in 0 2 1; do run_llama seed_pdl$m IB_PDL=$m "${SEED[@]}"; done
run_llama b1_pdl2_again IB_PDL=2 "${B1[@]}"; run_llama b1_pdl0_again IB_PDL=0 "${B1[@]}"
run_llama seed_pdl2_again IB_PDL=2 "${SEED[@]}"; run_llama seed_pdl0_again IB_PDL=0 "${SEED[@]}"
for q in fp8 awq; do  # the quantized GEMVs load their first weights before the wait too
  for m in 0 2; do run_llama b1_${q}_pdl$m IB_PDL=$m --quantization $q "${B1[@]}"; done
done
P=$(readlink -f $B/bench/gpu/libib_kernel_profile.so)
for m in 0 2; do
  if (( $(date +%s) - T0 > DEADLINE - 30 )); then echo "profile $m skipped (deadline)"; continue; fi
  IB_PDL=$m IB_KERNEL_PROFILE=$O/kernel_profile_b1_pdl$m.txt LD_PRELOAD=$P timeout 60 \
    $B/bin/inferbench run --device cuda --dtype bf16 --load-format dummy --disable-tqdm \
    --model llama-3-8b --batch-size 1 --input-len 32 --output-len 128 --num-prompts 1 --runs 1 \
    --result-dir /tmp/prof-$m --overwrite > $O/profile_$m.log 2>&1
  echo "profile $m rc=$? $(el)"; sed -n 3,10p $O/kernel_profile_b1_pdl$m.txt | cut -c1-120
done
python3 bench/gpu/runs_json.py "$R" > "$O/pdl.json" 2>/dev/null || true
rm -f $R/*/requests.jsonl $R/*/allocations.csv $R/*/memory.csv
tar czf $O/runs.tgz -C $O runs && rm -rf $R
echo "done $(el)"
