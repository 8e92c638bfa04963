#!/usr/bin/env bash
# Tensor parallelism on several H200s (issue 19): one visit to a multi-GPU machine (kind
# nvidia-h200-x2, or larger) that builds, runs the NCCL and tensor-parallel gpu tests, and
# measures Llama-3-8B at TP 1 and 2 (batch 1, 3 runs; the seed protocol: batch 8, 200 prompts,
# 1 run; batch 1 at TP 2 again with the ranks unfused, IB_FUSED=0), a kernel timeline at TP 2 (the NCCL kernels beside the layers'), then the seed protocol
# on Llama-3-70B and Qwen2-72B bf16 at TP 2 (dummy weights, loaded 8 layers at a time over the
# ranks) and Llama-3-70B on one H200 beside them (--gpu-memory-utilization 0.98, --max-model-len
# 1024: a small KV pool).
# Usage (carry .deps/icu.tar.xz), three calls on one warm machine:
#   OUT=dir IB_SKIP_BIG=1 bash bench/gpu/tp.sh                       (~9 minutes)
#   OUT=dir IB_SKIP_BUILD=1 IB_ONLY_BIG=1 bash bench/gpu/tp.sh       (the 70B-class runs; those
#     the deadline skipped in a fourth, named: IB_BIG="seed_llama-3-70b_fp8_tp2 ...")
#   OUT=dir IB_SKIP_BUILD=1 IB_ONLY_PARITY=1 bash bench/gpu/tp.sh    (the other families' parity)
# Environment: IB_DEADLINE_S (560: runs that would end past it are skipped), IB_SKIP_BIG=1 (no 70B
# runs), IB_ONLY_BIG=1 (only the 70B runs: a second call), IB_BUILD_DIR (/tmp/ib-tp),
# IB_SKIP_BUILD=1 (an earlier call's build, the machine still warm), IB_PARITY_FAMILIES
# (llama-3,qwen2: tools/hf_compare.py at TP 2 against transformers in fp32 from the saved files,
# cuda:fp32 and cuda:bf16; empty: none), IB_ONLY_PARITY=1 (only the parity, by default of
# gemma2, mixtral and deepseek-v2-lite: a third call). Writes (a device call returns at most 8 files)
# nccl_bus.jsonl (the all-reduce's algbw and busbw by size, bench/gpu/nccl_bus.cpp),
# hf_compare_tp2.json, runs.log, runs.json (each run's result keys), runs.tgz, and tests.tgz
# (topo.txt: nvidia-smi topo -m; build.log, nccl.log, nccl_communicator_test.json, tests.log,
# engine_tp_test.json, parity.log).
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh && use_icu
B=${IB_BUILD_DIR:-/tmp/ib-tp}
T=$O/tests; mkdir -p "$T"  # the small logs and reports, one tests.tgz at the end
nvidia-smi topo -m > "$T/topo.txt" 2>&1
GPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
echo "$GPUS GPUs $(el)"
if [ "${IB_SKIP_BUILD:-0}" = 1 ] && [ -x "$B/bin/inferbench" ]; then
  echo "an earlier call's build in $B"
else
  build_gpu_tests "$B" "$T/build.log" inferbench engine_cuda_test nccl_communicator_test \
    ib_kernel_profile ib_nccl_bus || { tar czf "$O/tests.tgz" -C "$O" tests; exit 1; }
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
  if [ -n "${IB_BIG:-}" ] && [[ " $IB_BIG " != *" $name "* ]]; then return; fi
  if (( $(date +%s) - T0 > DEADLINE - limit )); then echo "$name skipped (deadline)"; return; fi
  timeout "$limit" "$B/bin/inferbench" run --device cuda --dtype bf16 --load-format dummy \
    --disable-tqdm --result-dir "$R/$name" --overwrite "${SEED[@]}" "$@" > "$R/$name.log" 2>&1
  echo "$name rc=$? $(el) $(grep -E "Output token throughput|TPOT median" "$R/$name.log" |
    tr -s ' ' | tr '\n' ' ')"
}
ONLY_BIG=${IB_ONLY_BIG:-0}; ONLY_PARITY=${IB_ONLY_PARITY:-0}
if [ "$ONLY_BIG" != 1 ] && [ "$ONLY_PARITY" != 1 ]; then
  timeout 120 "$B/src/backend/cuda/nccl_communicator_test" \
    --gtest_output="json:$T/nccl_communicator_test.json" > "$T/nccl.log" 2>&1
  echo "nccl_communicator_test rc=$? $(grep -E "PASSED|FAILED" "$T/nccl.log" | tr '\n' ' ')"
  # nccl-tests' all_reduce_perf figures through the engine's communicator, in the same visit.
  timeout 120 "$B/bench/gpu/ib_nccl_bus" 20 > "$O/nccl_bus.jsonl" 2>&1
  echo "ib_nccl_bus rc=$? $(grep -c busbw "$O/nccl_bus.jsonl") sizes"
  timeout 300 "$B/src/engine/engine_cuda_test" --gtest_filter='*CudaTensorParallel*' \
    --gtest_output="json:$T/engine_tp_test.json" > "$T/tests.log" 2>&1
  echo "engine tp tests rc=$? $(el) $(grep -cE "^\[  SKIPPED \] Ranks" "$T/tests.log")" \
    "skipped; $(grep -E "PASSED|FAILED" "$T/tests.log" | tr '\n' ' ')"
fi
# HF parity at TP 2: the engine's logits against transformers' fp32 model loaded from the same
# saved files (2 layers, prompts of 24-4,096 tokens); the dense families in the first call, the
# others (IB_ONLY_PARITY=1) in a call of their own.
if [ "$ONLY_BIG" != 1 ]; then
  if [ "$ONLY_PARITY" = 1 ]; then PF=${IB_PARITY_FAMILIES-gemma2,mixtral,deepseek-v2-lite}
  else PF=${IB_PARITY_FAMILIES-llama-3,qwen2}; fi
  if [ -n "$PF" ]; then
    LEFT=$(( DEADLINE - ($(date +%s) - T0) - 20 ))
    PYTHONUNBUFFERED=1 timeout "$LEFT" python3 tools/hf_compare.py --inferbench "$B/bin/inferbench" \
      --out "$O" --models-dir /tmp/hf-models --runs cuda:fp32,cuda:bf16 --families "$PF" \
      --json-name hf_compare_tp2.json --inferbench-args "--tensor-parallel-size 2" \
      --deadline-s $(( ONLY_PARITY == 1 ? LEFT - 40 : 200 )) 2>&1 | grep -v Warning > "$T/parity.log"
    echo "hf_compare at TP 2 ($PF) rc=${PIPESTATUS[0]} $(el)"; tail -12 "$T/parity.log"
  fi
fi
if [ "$ONLY_BIG" != 1 ] && [ "$ONLY_PARITY" != 1 ]; then
  {
    for tp in 1 2; do run_llama "b1_tp$tp" --tensor-parallel-size "$tp" "${B1[@]}"; done
    for tp in 1 2; do run_llama "seed_tp$tp" --tensor-parallel-size "$tp" "${SEED[@]}"; done
    # The ranks' fused decode ops (session 28) against their unfused ops, every rank IB_FUSED=0.
    run_llama b1_tp2_unfused IB_FUSED=0 --tensor-parallel-size 2 "${B1[@]}"
  } 2>&1 | tee "$O/runs.log"
  llama_timeline b8_tp2 "$R" --tensor-parallel-size 2
fi
if [ "${IB_SKIP_BIG:-0}" != 1 ] && [ "$ONLY_PARITY" != 1 ]; then
  {
    big seed_llama-3-70b_tp2 240 --model llama-3-70b --tensor-parallel-size 2
    big seed_qwen2-72b_tp2 240 --model qwen2-72b --tensor-parallel-size 2
    big seed_llama-3-70b_tp1 300 --model llama-3-70b --gpu-memory-utilization 0.98 \
      --max-model-len 1024
    # More of what splits (session 27): 70B in fp8 over 2 GPUs, and the mixture of experts.
    big seed_llama-3-70b_fp8_tp2 200 --model llama-3-70b --quantization fp8 \
      --tensor-parallel-size 2
    big seed_mixtral-8x7b_tp2 150 --model mixtral-8x7b --tensor-parallel-size 2
  } 2>&1 | tee -a "$O/runs.log"
fi
python3 bench/gpu/runs_json.py "$R" > "$O/runs.json"
find "$R" \( -name requests.jsonl -o -name allocations.csv -o -name memory.csv \) -delete
tar czf "$O/runs.tgz" -C "$O" runs && rm -rf "$R"
tar czf "$O/tests.tgz" -C "$O" tests && rm -rf "$T"
echo "done $(el)"
