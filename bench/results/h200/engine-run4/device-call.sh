#!/usr/bin/env bash
# Session 2026-11-30, call 4: engine run 4 (graph-aware split-KV partitions) + attention op bench
# + one CUPTI kernel profile of the seed protocol's batch-8 decode.
cp .gpu-stage/commit.txt GIT_COMMIT
IB_DEADLINE_S=540 IB_OPS_BENCH=1 IB_OPS_SECTIONS=attention bash bench/gpu/run.sh
P=$(readlink -f /tmp/ib-build/bench/gpu/libib_kernel_profile.so)
[ -f "$P" ] && IB_KERNEL_PROFILE=$OUT/kernel_profile_b8.txt LD_PRELOAD=$P timeout 60 /tmp/ib-build/bin/inferbench run \
  --device cuda --dtype bf16 --load-format dummy --disable-tqdm --model llama-3-8b --batch-size 8 \
  --input-len 32 --output-len 128 --num-prompts 16 --runs 1 --result-dir /tmp/prof-b8 --overwrite > /tmp/prof-b8.log 2>&1
echo "profile rc=$?"; head -30 $OUT/kernel_profile_b8.txt 2>/dev/null; ls -la $OUT
