#!/usr/bin/env bash
# Session 2026-11-30, call 5: CUPTI kernel profile of batch-1 decode + the decode-GEMM op bench.
set -u; O=$OUT; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
B=/tmp/ib-prof
(cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DINFERBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DINFERBENCH_WERROR=OFF -DINFERBENCH_TESTS=OFF && cmake --build $B -j16 --target inferbench ib_ops_bench ib_kernel_profile) > $O/build.log 2>&1 || { tail -30 $O/build.log; exit 1; }
echo "built $(el)"
P=$(readlink -f $B/bench/gpu/libib_kernel_profile.so)
IB_KERNEL_PROFILE=$O/kernel_profile_b1.txt LD_PRELOAD=$P timeout 60 $B/bin/inferbench run --device cuda --dtype bf16 \
  --load-format dummy --disable-tqdm --model llama-3-8b --batch-size 1 --input-len 32 --output-len 128 --num-prompts 4 \
  --runs 1 --result-dir /tmp/prof-b1 --overwrite > $O/profile_b1.log 2>&1
echo "profile rc=$? $(el)"; head -14 $O/kernel_profile_b1.txt
IB_OPS_SECTIONS=gemm_decode timeout 150 $B/bench/gpu/ib_ops_bench $O/ops_gemm_decode.json > $O/ops_gemm_decode.log 2>&1
echo "ops rc=$? $(el)"; grep -E "^decode|^variant|per layer" $O/ops_gemm_decode.log | grep -E "x1 |x8 |1x|8x|per layer" | head -70
