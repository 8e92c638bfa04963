#!/usr/bin/env bash
# The stress sweep and OOM search on the H200 machine (issue 6): a grid of batch x input length
# for llama-3-8b bf16 with short outputs, then --find-oom with the tracked allocator capped at
# 24 GiB and 40 GiB (emulated smaller cards), on-demand KV growth and preallocated pool both.
# Bounded to about 5 minutes: --max-duration refuses a grid estimated longer.
#
# report.html inlines plotly.js from tools/npm/node_modules (git-ignored): carry that folder to
# the device, or set INFERBENCH_PLOTLY_JS; without it the sweep says so and skips report.html.
# Writes under $OUT (./gpu-out otherwise): grid/ (grid.csv, grid.json, grid_*.svg, report.html,
# cells/), oom-24g/ and oom-40g/ (oom.json, oom.md, oom_headroom.svg), sweep.log.
# Options (environment): IB_JOBS (16), IB_MODEL (llama-3-8b), IB_BATCHES (16,32,64,128),
# IB_LENS (64,256,512,1024), IB_OUT_LEN (16), IB_OOM_LENS (1024), IB_OOM_STEPS (8),
# IB_OOM_MAX_BATCH (1024), IB_OOM_CTX_BATCH (16: the context search's batch), IB_LIMITS
# ("24GiB 40GiB"), IB_MAX_DURATION (6m: the grid's own bound),
# IB_SKIP_BUILD=1 (reuse build/h200). A dry run elsewhere: IB_BUILD=build/release IB_SKIP_BUILD=1
# IB_DEVICE=cpu IB_MODEL=tiny-15m IB_BATCHES=1,4 IB_LENS=16,64 IB_OUT_LEN=4 IB_OOM_LENS=32
# IB_OOM_MAX_BATCH=64 IB_LIMITS="300MiB 320MiB" bench/gpu/sweep.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source bench/gpu/build_inferbench.sh
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
JOBS="${IB_JOBS:-16}"
MODEL="${IB_MODEL:-llama-3-8b}"
BUILD="${IB_BUILD:-build/h200}"
DEVICE="${IB_DEVICE:-cuda}"
BATCHES="${IB_BATCHES:-16,32,64,128}"
LENS="${IB_LENS:-64,256,512,1024}"
OUT_LEN="${IB_OUT_LEN:-16}"
OOM_LENS="${IB_OOM_LENS:-1024}"
OOM_STEPS="${IB_OOM_STEPS:-8}"
OOM_MAX_BATCH="${IB_OOM_MAX_BATCH:-1024}"
LIMITS="${IB_LIMITS:-24GiB 40GiB}"
MAX_DURATION="${IB_MAX_DURATION:-6m}"
CTX_BATCH="${IB_OOM_CTX_BATCH:-16}"
IB="$BUILD/bin/inferbench"
exec > >(tee "$OUT/sweep.log") 2>&1

echo "== build inferbench (h200 preset)"
if [ "${IB_SKIP_BUILD:-0}" != 1 ]; then build_inferbench "$OUT/build.log" || exit 1; fi
"$IB" env

echo "== sweep: $MODEL, batch $BATCHES x input $LENS, output $OUT_LEN"
"$IB" sweep --model "$MODEL" --device "$DEVICE" --batch-sizes "$BATCHES" --input-lens "$LENS" \
  --output-len "$OUT_LEN" --runs 1 --max-duration "$MAX_DURATION" --result-dir "$OUT/grid" --overwrite
status=$?
echo "sweep exit $status"

for limit in $LIMITS; do
  echo "== find-oom: $MODEL under --memory-limit $limit, input $OOM_LENS, $OOM_STEPS steps"
  "$IB" sweep --find-oom --model "$MODEL" --device "$DEVICE" --memory-limit "$limit" \
    --input-lens "$OOM_LENS" --oom-steps "$OOM_STEPS" --oom-max-batch "$OOM_MAX_BATCH" \
    --find-oom-batch "$CTX_BATCH" --result-dir "$OUT/oom-${limit,,}"
  echo "find-oom $limit exit $?"
done
ls -la "$OUT"
