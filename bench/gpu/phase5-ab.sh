#!/usr/bin/env bash
# Ran once at 507ba9d (bench/results/h200/phase5-ab/); on its numbers IB_L2_PREFETCH(_MB) and
# IB_SWIGLU_CUBLASLT_MIN_M were removed and IB_ATTN_PREFETCH became a sequence count, so today
# this script's configurations no longer select those kernels: it is kept as the record of how
# the committed numbers were made.
# Phase 5 A/B on the GPU machine (bench/NOTES.md, phase 5): the gpu tests, then the L2 prefetch
# beside the attention (IB_L2_PREFETCH 0-3, capped by IB_L2_PREFETCH_MB), the attention's own K/V
# prefetch (IB_ATTN_PREFETCH) and gate/up on cuBLASLt (IB_SWIGLU_CUBLASLT_MIN_M) at batch 1, on the
# seed's protocol and on 1,024 prompts of continuous batching, then CUPTI kernel profiles with all
# on. IB_DEADLINE_S (540): runs that would end past it are skipped; the tarball is always written.
# Usage (~9 minutes of the machine): OUT=dir bash bench/gpu/phase5-ab.sh. Writes build.log,
# ctest.log, runs.tgz (each configuration's result directory and log), kernel_profile_{b1,b8}.txt.
# Every configuration sets the three switches explicitly, so the backend's defaults do not matter.
# A copy of the tree whose .git is older (the device machine's) needs GIT_COMMIT (`git rev-parse
# HEAD > GIT_COMMIT` here, carried along): the results then name the commit that ran.
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p $O
B=/tmp/ib-l2
(cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DINFERBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DINFERBENCH_WERROR=OFF && cmake --build $B -j16 --target inferbench backend_cuda_test backend_cuda_fault_test engine_cuda_test engine_cuda_growth_test ib_kernel_profile) > $O/build.log 2>&1 || { tail -30 $O/build.log; exit 1; }
echo "built $(el)"
timeout 120 ctest --test-dir $B -L gpu --output-on-failure > $O/ctest.log 2>&1; echo "ctest rc=$? $(el)"
grep -E "Test +#|tests passed|Failure|FAILED" $O/ctest.log | head -20
R=$O/runs; mkdir -p $R
DEADLINE=${IB_DEADLINE_S:-540}
# run NAME [VAR=value ...] FLAGS...: one inferbench run, skipped when under 45 s remain.
run() { local name=$1; shift; local envs=(); while [[ $1 == *=* ]]; do envs+=("$1"); shift; done
  if (( $(date +%s) - T0 > DEADLINE - 45 )); then echo "$name skipped (deadline)"; return; fi
  env IB_L2_PREFETCH=0 IB_SWIGLU_CUBLASLT_MIN_M=0 IB_ATTN_PREFETCH=0 "${envs[@]}" timeout 100 $B/bin/inferbench run \
  --device cuda --dtype bf16 --load-format dummy --disable-tqdm \
  --model llama-3-8b --result-dir $R/$name --overwrite "$@" > $R/$name.log 2>&1
  echo "$name rc=$? $(el) $(grep -E "Output token throughput|TPOT median" $R/$name.log | tr -s ' ' | tr '\n' ' ')"; }
B1=(--batch-size 1 --input-len 32 --output-len 128 --num-prompts 4 --runs 3)
SEED=(--batch-size 8 --input-len 32 --output-len 128 --num-prompts 200 --runs 1)
CONT=(--input-len 128 --output-len 128 --num-prompts 1024 --load-mode open --num-warmups 16 --runs 1)
ALL=(IB_L2_PREFETCH=1 IB_ATTN_PREFETCH=1 IB_SWIGLU_CUBLASLT_MIN_M=2)
run b1_base "${B1[@]}"
run b1_p1 IB_L2_PREFETCH=1 "${B1[@]}"
run b1_p3 IB_L2_PREFETCH=3 "${B1[@]}"
run b1_p1_24mb IB_L2_PREFETCH=1 IB_L2_PREFETCH_MB=24 "${B1[@]}"
run b1_a1 IB_ATTN_PREFETCH=1 "${B1[@]}"
run b1_all "${ALL[@]}" "${B1[@]}"
run b1_all_sw1 "${ALL[@]}" IB_SWIGLU_CUBLASLT_MIN_M=1 "${B1[@]}"
run seed_base "${SEED[@]}"
run seed_sw2 IB_SWIGLU_CUBLASLT_MIN_M=2 "${SEED[@]}"
run seed_p1_sw2 IB_L2_PREFETCH=1 IB_SWIGLU_CUBLASLT_MIN_M=2 "${SEED[@]}"
run seed_all "${ALL[@]}" "${SEED[@]}"
run cont_base "${CONT[@]}"
run cont_a1 IB_ATTN_PREFETCH=1 "${CONT[@]}"
P=$(readlink -f $B/bench/gpu/libib_kernel_profile.so)
for cfg in "b1 1 1" "b8 8 1"; do set -- $cfg
  if (( $(date +%s) - T0 > DEADLINE - 30 )); then echo "profile $1 skipped (deadline)"; continue; fi
  IB_L2_PREFETCH=$3 IB_ATTN_PREFETCH=1 IB_SWIGLU_CUBLASLT_MIN_M=2 IB_KERNEL_PROFILE=$O/kernel_profile_$1.txt LD_PRELOAD=$P timeout 60 $B/bin/inferbench run --device cuda --dtype bf16 \
    --load-format dummy --disable-tqdm --model llama-3-8b --batch-size $2 --input-len 32 --output-len 128 --num-prompts $2 \
    --runs 1 --result-dir /tmp/prof-$1 --overwrite > $O/profile_$1.log 2>&1
  echo "profile $1 rc=$? $(el)"; sed -n 3,12p $O/kernel_profile_$1.txt | cut -c1-120
done
rm -f $R/*/requests.jsonl $R/*/allocations.csv
tar czf $O/runs.tgz -C $O runs && rm -rf $R
