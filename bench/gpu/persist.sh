#!/usr/bin/env bash
# One visit to the GPU machine for the quantized GEMVs' persistent grid (IB_GEMV_PERSIST, issues
# 13 and 14): build; the gpu tests of the persistent grid against one block per tile
# (CudaGemvPersist), of the 4-bit and 8-bit ops against the CPU oracle and of the switch report;
# the op benchmark's W4A16 section at 1-16 tokens for each setting in IB_PERSISTS; Nsight Compute
# on the W4A16 gate/up GEMV (M = 1) at the first and the best setting; then `inferbench run` on
# Llama-3-8B dummy weights at batch 1 for each format in IB_QUANTS at setting 0 and the best one,
# and on the seed protocol at the best one.
# Usage (from the repository root, ~9 minutes): OUT=dir bash bench/gpu/persist.sh
# Environment: IB_BUILD_DIR (/tmp/ib-persist), IB_PERSISTS ("0,1,2,3,4"), IB_QUANTS ("awq fp8"),
# IB_TEST_FILTER, IB_ENGINE_FILTER, IB_QWEN72=1 (Qwen2-72B AWQ on the seed protocol), IB_SKIP_NCU=1, IB_SKIP_TESTS=1, IB_BEST (skip the op benchmark's choice).
# Writes tests.log, backend_cuda_test.json, engine_cuda_test.json, ops.log, sass_int4.txt (the
# W4A16 GEMV's instructions by opcode), ncu.txt, runs.log, runs.json; the rest in extra.tgz.
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
B=${IB_BUILD_DIR:-/tmp/ib-persist}; PERSISTS=${IB_PERSISTS:-0,1,2,3,4}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/env.txt" 2>&1
if ! { cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DINFERBENCH_CUDA=ON \
         -DCMAKE_CUDA_ARCHITECTURES=90a -DINFERBENCH_WERROR=OFF &&
       cmake --build "$B" -j 16 --target inferbench backend_cuda_test engine_cuda_test ib_ops_bench; } \
     > "$O/build.log" 2>&1; then
  tail -30 "$O/build.log"; echo "BUILD FAILED"; exit 1
fi
echo "built $(el)"
if [ "${IB_SKIP_TESTS:-0}" != 1 ]; then
  timeout 200 "$B/src/backend/cuda/backend_cuda_test" \
    --gtest_filter="${IB_TEST_FILTER:-*CudaGemvPersist*:*CudaQuant4.*:*CudaQuant.*:*ReportsTheKernelSwitches*}" \
    --gtest_output="json:$O/backend_cuda_test.json" > "$O/tests.log" 2>&1
  echo "backend_cuda_test rc=$? $(el)"
  timeout 150 "$B/src/engine/engine_cuda_test" --gtest_filter="${IB_ENGINE_FILTER:-*CudaEngineQuant*}" \
    --gtest_output="json:$O/engine_cuda_test.json" >> "$O/tests.log" 2>&1
  echo "engine_cuda_test rc=$? $(el)"
  grep -E "^\[  FAILED  \]|Failure|Expected|Which is|PASSED|FAILED TEST" "$O/tests.log" | head -30
fi
OPS=$B/bench/gpu/ib_ops_bench
IB_OPS_SECTIONS=gemm_int4 IB_OPS_INT4_M=1,2,4,8,16 IB_OPS_PERSIST=$PERSISTS timeout 150 "$OPS" \
  "$O/ops.json" > "$O/ops.log" 2>&1
echo "ops rc=$? $(el)"; grep -E "per layer|ceiling" "$O/ops.log"
# The setting with the least W4A16 time per layer at M = 1.
BEST=${IB_BEST:-$(grep -oE "m1_persist[0-9]+: [0-9.]+" "$O/ops.log" | sort -t: -k2 -g | head -1 |
  sed -E 's/m1_persist([0-9]+):.*/\1/')}
BEST=${BEST:-0}; echo "best IB_GEMV_PERSIST=$BEST" | tee -a "$O/runs.log"
if [ "${IB_SKIP_NCU:-0}" != 1 ]; then
  for p in "${PERSISTS%%,*}" "$BEST"; do
    IB_OPS_SECTIONS=gemm_int4 IB_OPS_INT4_M=1 IB_OPS_PERSIST=$p IB_OPS_LINEARS=gate_up timeout 100 \
      ncu --clock-control none -k regex:gemv_kernel --launch-skip 4 --launch-count 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
      --section Occupancy --section LaunchStats --section SchedulerStats \
      "$OPS" /tmp/ncu-ops.json >> "$O/ncu.txt" 2>&1
    echo "ncu persist=$p rc=$? $(el)"
  done
fi
R=$O/runs; mkdir -p "$R"
run() { local name=$1 persist=$2; shift 2
  IB_GEMV_PERSIST=$persist timeout -s INT 100 "$B/bin/inferbench" run --device cuda --dtype bf16 \
    --load-format dummy --disable-tqdm --model llama-3-8b --result-dir "$R/$name" --overwrite "$@" \
    > "$R/$name.log" 2>&1
  echo "$name rc=$? $(el) $(grep -E "Output token throughput|TPOT median" "$R/$name.log" | tr -s ' ' | tr '\n' ' ')" | tee -a "$O/runs.log"; }
B1=(--batch-size 1 --input-len 32 --output-len 128 --num-prompts 4 --runs 3)
SEED=(--batch-size 8 --input-len 32 --output-len 128 --num-prompts 200 --runs 1)
for q in ${IB_QUANTS:-awq fp8}; do
  run "b1_${q}_p0" 0 --quantization "$q" "${B1[@]}"
  [ "$BEST" = 0 ] || run "b1_${q}_p$BEST" "$BEST" --quantization "$q" "${B1[@]}"
done
run "seed_awq_p$BEST" "$BEST" --quantization awq "${SEED[@]}"
# The seed's first row: Qwen2-72B-Instruct in AWQ 4-bit on the seed protocol (dummy weights,
# quantized at load), with IB_QWEN72=1.
if [ "${IB_QWEN72:-0}" = 1 ]; then
  IB_GEMV_PERSIST=$BEST timeout -s INT 260 "$B/bin/inferbench" run --device cuda --dtype bf16 \
    --load-format dummy --disable-tqdm --model qwen2-72b --quantization awq \
    --max-model-len 4096 --result-dir "$R/seed_qwen2-72b_awq" --overwrite "${SEED[@]}" \
    > "$R/seed_qwen2-72b_awq.log" 2>&1
  echo "seed_qwen2-72b_awq rc=$? $(el) $(grep -E "Output token throughput|TPOT median|rror" "$R/seed_qwen2-72b_awq.log" | tr -s ' ' | tr '\n' ' ')" | tee -a "$O/runs.log"
fi
# The 4-bit GEMV's instructions by opcode (bf16, one n-tile, plain store), for bench/NOTES.md.
O4=$(find "$B" -name 'gemv.cu.o' | head -1)
P4=nv_bfloat16S2_Li1ELi8ELi2ELb0ELi0ELb0ELi4E
cuobjdump -sass "$O4" 2>/dev/null | awk -v p="$P4" '/Function : /{f = index($0, p) > 0} f' |
  grep -oE '/\*[0-9a-f]{4}\*/ +(@!?U?P[0-9T]+ +)?[A-Z0-9_.]+' | awk '{print $NF}' | sed -E 's/\..*//' |
  sort | uniq -c | sort -rn > "$O/sass_int4.txt"
python3 bench/gpu/runs_json.py "$R" > "$O/runs.json"
rm -f "$R"/*/requests.jsonl "$R"/*/allocations.csv "$R"/*/memory.csv
# At most 8 files come back: the rest in extra.tgz.
( cd "$O" && ls | grep -vE '^(tests.log|backend_cuda_test.json|engine_cuda_test.json|ops.log|sass_int4.txt|ncu.txt|runs.log|runs.json)$' |
  xargs -r tar czf extra.tgz --remove-files )
echo "done $(el)"
