#!/usr/bin/env bash
# Block-sparse attention on the GPU machine (issue 15): the CUDA attention tests (every
# CudaAttention case, the block-sparse ones included) and the CUDA engine against the CPU engine
# and the reference; transformers with the pattern as a 4-D mask (tools/hf_compare_block_sparse.py);
# then Mistral-7B (v0.2's shapes: Llama-3-8B's attention, no window, a 32k context) bf16 dummy
# weights at 4,096, 8,192 and 16,384-token prompts, dense against
# local_blocks=16,vert_stride=8 (blocks of 64: Phi-3-small's pattern), a static batch of 8, 128
# output tokens (throughput and TPOT), and `inferbench eval`'s KL divergence of the block-sparse
# model from the dense one at the same contexts; last the seed protocol, dense, to show the
# kernels' new branch costs the dense decode nothing (Llama-3-8B, as every earlier seed number).
# Usage (~12 minutes of the machine; carry .deps/icu.tar.xz): OUT=dir bash bench/gpu/block_sparse.sh
# Environment: B (the build directory, /tmp/ib-sparse), IB_SKIP_TESTS=1, IB_SKIP_PARITY=1,
# IB_SKIP_PERF=1, IB_SKIP_KL=1, IB_CONTEXTS (default "4096 8192 16384").
# Writes build.log, tests.log, parity.log (+ hf_compare_block_sparse.json), runs.log (the tables),
# kl_*.json and block_sparse.tgz (result.json files, logs).
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh
use_icu
B=${B:-/tmp/ib-sparse}
PATTERN=local_blocks=16,vert_stride=8,block_size=64
CONTEXTS=${IB_CONTEXTS:-4096 8192 16384}
build_gpu_tests $B "$O/build.log" inferbench backend_cuda_test engine_cuda_test || exit 1
echo "built $(el)"
if [ -z "${IB_SKIP_TESTS:-}" ]; then
  timeout 300 $B/src/backend/cuda/backend_cuda_test --gtest_filter='*CudaAttention*' \
    > "$O/tests.log" 2>&1
  echo "backend_cuda_test CudaAttention rc=$? $(el)"
  timeout 240 $B/src/engine/engine_cuda_test --gtest_filter='Dtypes/CudaEngineTest.*' \
    >> "$O/tests.log" 2>&1
  echo "engine_cuda_test CudaEngineTest rc=$? $(el)"
  grep -E "^\[  (PASSED|FAILED) |tests ran|Failure" "$O/tests.log" | head -20
fi
if [ -z "${IB_SKIP_PARITY:-}" ]; then
  (cd tools && timeout 400 python3 hf_compare_block_sparse.py --inferbench $B/bin/inferbench \
    --out "$O") > "$O/parity.log" 2>&1
  echo "hf_compare_block_sparse rc=$? $(el)"; sed -n '/^| family/,$p' "$O/parity.log"
fi
R=/tmp/sparse-runs; rm -rf $R; mkdir -p $R
if [ -z "${IB_SKIP_PERF:-}" ]; then
  for ctx in $CONTEXTS; do
    for mode in dense sparse; do
      flags=(); [ $mode = sparse ] && flags=(--block-sparse-attention $PATTERN)
      timeout 150 $B/bin/inferbench run --device cuda --dtype bf16 --load-format dummy \
        --disable-tqdm --model mistral-7b --batch-size 8 --load-mode static --input-len $ctx \
        --output-len 128 --num-prompts 8 --runs 1 --max-model-len $((ctx + 128)) \
        --max-graph-context $((ctx + 128)) --seed 0 --result-dir $R/${mode}_$ctx --overwrite \
        "${flags[@]}" > $R/${mode}_$ctx.log 2>&1
      echo "$mode $ctx rc=$? $(el)"
    done
  done | tee "$O/runs.log"
fi
if [ -z "${IB_SKIP_KL:-}" ]; then
  for ctx in $CONTEXTS; do
    timeout 200 $B/bin/inferbench eval --model mistral-7b --device cuda --dtype bf16 \
      --load-format dummy --quantization none --block-sparse-attention $PATTERN \
      --num-prompts 2 --input-len $ctx --output-len 8 --seed 0 --output-json "$O/kl_$ctx.json" \
      > $R/kl_$ctx.log 2>&1
    echo "kl $ctx rc=$? $(el)"; grep -A2 "^| model" $R/kl_$ctx.log | tail -1
  done | tee -a "$O/runs.log"
fi
if [ -z "${IB_SKIP_PERF:-}" ]; then
  for i in 1 2; do
    timeout 120 $B/bin/inferbench run --device cuda --dtype bf16 --load-format dummy \
      --disable-tqdm --model llama-3-8b --batch-size 8 --input-len 32 --output-len 128 \
      --num-prompts 200 --runs 1 --seed 0 --result-dir $R/seed_$i --overwrite > $R/seed_$i.log 2>&1
    echo "seed protocol dense $i rc=$? $(el) $(grep -E 'Output token throughput' $R/seed_$i.log)"
  done | tee -a "$O/runs.log"
fi
python3 - "$R" "$CONTEXTS" <<'PYEOF' | tee -a "$O/runs.log"
import json, sys
R, contexts = sys.argv[1], sys.argv[2].split()
print("| context | attention | output tok/s | TPOT median ms | decode bytes / step (GiB) | "
      "share of copy ceiling |")
print("| ---: | --- | ---: | ---: | ---: | ---: |")
for ctx in contexts:
    for mode in ("dense", "sparse"):
        try:
            d = json.load(open(f"{R}/{mode}_{ctx}/result.json"))
        except OSError:
            print(f"| {ctx} | {mode} | (no result) | | | |")
            continue
        dec = d.get("engine", {}).get("performance", {}).get("decode", {})
        per_step = dec.get("bytes", 0) / max(dec.get("steps", 0), 1) / 2**30
        share = dec.get("fraction_of_copy_ceiling") or 0
        print(f"| {ctx} | {mode} | {d.get('output_throughput', 0):.1f} | "
              f"{d.get('median_tpot_ms', 0):.2f} | {per_step:.2f} | {100 * share:.1f} % |")
PYEOF
find $R -name '*.jsonl' -delete
tar czf "$O/block_sparse.tgz" -C $R .
echo "done $(el)"
