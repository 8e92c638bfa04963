#!/usr/bin/env bash
# Session 2026-11-30, call 6: matmul_add through cuBLASLt (beta = 1) at 2-8 tokens: tests, then
# the seed's protocol (3 runs) and its A/B with IB_ADD_CUBLASLT=0 (1 run).
set -u; O=$OUT; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cp .gpu-stage/commit.txt GIT_COMMIT
B=/tmp/ib-add
(cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DINFERBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DINFERBENCH_WERROR=OFF && cmake --build $B -j16 --target inferbench backend_cuda_test engine_cuda_test) > $O/build.log 2>&1 || { tail -30 $O/build.log; exit 1; }
echo "built $(el)"
{ timeout 40 $B/src/backend/cuda/backend_cuda_test --gtest_filter='*CudaFused*:*CudaAttention*' 2>&1 | grep -E "^\[  (PASSED|FAILED) |Failure|Expected|Which is|tests ran" ; \
  timeout 40 $B/src/engine/engine_cuda_test 2>&1 | grep -E "^\[  (PASSED|FAILED) |Failure|tests ran"; } > $O/tests.log 2>&1
echo "tests $(el)"; cat $O/tests.log
R=$O/runs; mkdir -p $R
run() { local name=$1; shift; env "$@" timeout 90 $B/bin/inferbench run --device cuda --dtype bf16 --load-format dummy --disable-tqdm \
  --model llama-3-8b --batch-size 8 --input-len 32 --output-len 128 --num-prompts 200 --result-dir $R/$name --overwrite $RUNS > $R/$name.log 2>&1
  echo "$name rc=$? $(el)"; grep -E "Output token throughput|TPOT median|TTFT median|decode step" $R/$name.log | head -5; }
RUNS="--runs 3" run seed IB_ADD_CUBLASLT=1
RUNS="--runs 1" run seed_add_gemv IB_ADD_CUBLASLT=0
rm -f $R/*/requests.jsonl $R/*/allocations.csv
tar czf $O/runs.tgz -C $O runs && rm -rf $R
