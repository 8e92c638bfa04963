#!/usr/bin/env bash
# Sliding-window KV freeing on the GPU machine (issue 15): the CUDA engine's sliding-window cases
# against the CPU engine and the reference (engine_cuda_test *window*: their prompts pass the
# window, so the blocks behind it go back to the pool while the batch runs), then Mistral-7B-v0.1
# (window 4,096 on every layer) against Mistral-7B (v0.2's shapes, no window), bf16 dummy
# weights, a static batch of 4 prompts of 16,384 tokens, 64 output tokens: the KV peak
# (result.json memory.peaks.kv_used_bytes) and the throughput of each.
# Usage (~4 minutes of the machine; carry .deps/icu.tar.xz): OUT=dir bash bench/gpu/window_kv.sh
# Environment: B (the build directory, /tmp/ib-window).
# Writes build.log, tests.log, runs.log (the table) and window_kv.tgz (result.json files, logs).
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh
use_icu
B=${B:-/tmp/ib-window}
build_gpu_tests $B "$O/build.log" inferbench engine_cuda_test || exit 1
echo "built $(el)"
timeout 200 $B/src/engine/engine_cuda_test --gtest_filter='*window*' > "$O/tests.log" 2>&1
echo "engine_cuda_test rc=$? $(el)"; grep -E "PASSED|FAILED|Failure" "$O/tests.log" | head
R=/tmp/window-runs; rm -rf $R; mkdir -p $R
for m in mistral-7b-v0.1 mistral-7b; do
  timeout 200 $B/bin/inferbench run --device cuda --dtype bf16 --load-format dummy --disable-tqdm \
    --model $m --batch-size 4 --load-mode static --input-len 16384 --output-len 64 \
    --num-prompts 4 --runs 1 --max-model-len 16448 --seed 0 --result-dir $R/$m --overwrite \
    > $R/$m.log 2>&1
  echo "$m rc=$? $(el)"
done | tee "$O/runs.log"
python3 - "$R" <<'PYEOF' | tee -a "$O/runs.log"
import json, sys
print("| model | window | KV peak GiB | output tok/s |")
print("| --- | ---: | ---: | ---: |")
for m, w in (("mistral-7b-v0.1", "4,096"), ("mistral-7b", "none")):
    try:
        d = json.load(open(f"{sys.argv[1]}/{m}/result.json"))
    except OSError:
        print(f"| {m} | {w} | (no result) | |")
        continue
    peak = d["memory"]["peaks"]["kv_used_bytes"] / 2**30
    print(f"| {m} | {w} | {peak:.2f} | {d.get('output_throughput', 0):.1f} |")
PYEOF
find $R -name '*.jsonl' -delete
tar czf "$O/window_kv.tgz" -C $R .
echo "done $(el)"
