#!/usr/bin/env bash
# Tensor parallelism on several H200s (issue 19): one visit to a multi-GPU machine (kind
# nvidia-h200-x2, or larger) that builds, runs the NCCL and tensor-parallel gpu tests, and
# measures Llama-3-8B at TP 1 and 2 (batch 1, 3 runs; the seed protocol: batch 8, 200 prompts,
# 1 run), a kernel timeline at TP 2 (the NCCL kernels beside the layers'), then the seed protocol
# on Llama-3-70B and Qwen2-72B bf16 at TP 2 (dummy weights, loaded 8 layers at a time over the
# ranks) and Llama-3-70B on one H200 beside them (--gpu-memory-utilization 0.98, --max-model-len
# 1024: a small KV pool).
# Usage (carry .deps/icu.tar.xz): OUT=dir bash bench/gpu/tp.sh
# Environment: IB_DEADLINE_S (560: runs that would end past it are skipped), IB_SKIP_BIG=1 (no 70B
# runs), IB_ONLY_BIG=1 (only the 70B runs: a second call), IB_BUILD_DIR (/tmp/ib-tp),
# IB_SKIP_BUILD=1 (an earlier call's build, the machine still warm). Writes topo.txt
# (nvidia-smi topo -m), build.log, nccl.log, nccl_communicator_test.json, nccl_bus.jsonl (the
# all-reduce's algbw and busbw by size, bench/gpu/nccl_bus.cpp), tests.log,
# engine_tp_test.json, runs.log, runs.json (each run's result keys) and runs.tgz.
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && use_icu
B=${IB_BUILD_DIR:-/tmp/ib-tp}
nvidia-smi topo -m > "$O/topo.txt" 2>&1
GPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
echo "$GPUS GPUs $(el)"
if [ "${IB_SKIP_BUILD:-0}" = 1 ] && [ -x "$B/bin/inferbench" ]; then
  echo "an earlier call's build in $B"
else
  build_gpu_tests "$B" "$O/build.log" inferbench engine_cuda_test nccl_communicator_test \
    ib_kernel_profile ib_nccl_bus || exit 1
  echo "built $(el)"
fi
R=$O/runs; mkdir -p "$R"
DEADLINE=${IB_DEADLINE_S:-560}
B1=(--batch-size 1 --input-len 32 --output-len 128 --num-prompts 4 --runs 3)
SEED=(--batch-size 8 --input-len 32 --output-len 128 --num-prompts 200 --runs 1)
# big NAME TIMEOUT FLAGS...: one seed-protocol run of a 70B-class model.
big() {
  local name=$1 limit=$2
  shift 2
  if (( $(date +%s) - T0 > DEADLINE - limit )); then echo "$name skipped (deadline)"; return; fi
  timeout "$limit" "$B/bin/inferbench" run --device cuda --dtype bf16 --load-format dummy \
    --disable-tqdm --result-dir "$R/$name" --overwrite "${SEED[@]}" "$@" > "$R/$name.log" 2>&1
  echo "$name rc=$? $(el) $(grep -E "Output token throughput|TPOT median" "$R/$name.log" |
    tr -s ' ' | tr '\n' ' ')"
}
if [ "${IB_ONLY_BIG:-0}" != 1 ]; then
  timeout 120 "$B/src/backend/cuda/nccl_communicator_test" \
    --gtest_output="json:$O/nccl_communicator_test.json" > "$O/nccl.log" 2>&1
  echo "nccl_communicator_test rc=$? $(grep -E "PASSED|FAILED" "$O/nccl.log" | tr '\n' ' ')"
  # nccl-tests' all_reduce_perf figures through the engine's communicator, in the same visit.
  timeout 120 "$B/bench/gpu/ib_nccl_bus" 20 > "$O/nccl_bus.jsonl" 2>&1
  echo "ib_nccl_bus rc=$? $(grep -c busbw "$O/nccl_bus.jsonl") sizes"
  timeout 300 "$B/src/engine/engine_cuda_test" --gtest_filter='*CudaTensorParallel*' \
    --gtest_output="json:$O/engine_tp_test.json" > "$O/tests.log" 2>&1
  echo "engine tp tests rc=$? $(el) $(grep -cE "^\[  SKIPPED \] Ranks" "$O/tests.log")" \
    "skipped; $(grep -E "PASSED|FAILED" "$O/tests.log" | tr '\n' ' ')"
  {
    for tp in 1 2; do run_llama "b1_tp$tp" --tensor-parallel-size "$tp" "${B1[@]}"; done
    for tp in 1 2; do run_llama "seed_tp$tp" --tensor-parallel-size "$tp" "${SEED[@]}"; done
  } 2>&1 | tee "$O/runs.log"
  llama_timeline b8_tp2 "$R" --tensor-parallel-size 2
fi
if [ "${IB_SKIP_BIG:-0}" != 1 ]; then
  {
    big seed_llama-3-70b_tp2 240 --model llama-3-70b --tensor-parallel-size 2
    big seed_qwen2-72b_tp2 240 --model qwen2-72b --tensor-parallel-size 2
    big seed_llama-3-70b_tp1 300 --model llama-3-70b --gpu-memory-utilization 0.98 \
      --max-model-len 1024
  } 2>&1 | tee -a "$O/runs.log"
fi
python3 bench/gpu/runs_json.py "$R" > "$O/runs.json"
find "$R" \( -name requests.jsonl -o -name allocations.csv -o -name memory.csv \) -delete
tar czf "$O/runs.tgz" -C "$O" runs && rm -rf "$R"
echo "done $(el)"
