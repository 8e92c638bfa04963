#!/usr/bin/env bash
# The seed's table 3.3 on the H200 (issue 17): bench/seed-3.3.yaml (LLaVA-1.5-7B at 336 px,
# Qwen2-VL-7B at 672 and 1,344 px, each with a text-only twin; batch 1, bf16), after writing the
# two seeded vision checkpoints it needs (ib_vision_bench --write-checkpoint, the real shapes;
# the language models run on dummy weights; bench/models/*/model.safetensors, not in git), then bench/gpu/vlm_summary.py over the results.
# Usage (repository root; carry .deps/icu.tar.xz and .deps/img.tar.xz where the machine lacks
# ICU, libpng or libjpeg): OUT=dir bash bench/gpu/vlm_suite.sh
# Environment: B (build directory, /tmp/ib-vision-cuda: bench/gpu/vision_cuda.sh's, reused when
# it is there), IB_OVERRIDES (suite overrides, e.g. "num_prompts=10 runs=1").
# Writes suite.log, summary.md and seed-3.3.tgz (each entry's result.json and log, the leaderboard).
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh
use_icu
use_img
B=${B:-/tmp/ib-vision-cuda}
build_gpu_tests $B "$O/suite-build.log" inferbench ib_vision_bench || exit 1
echo "built $(el)"
# The model directories hold config.json and preprocessor_config.json (in git); the vision
# tensors are written beside them.
for m in llava-1.5-7b qwen2-vl-7b; do
  $B/bench/gpu/ib_vision_bench --config bench/models/$m/config.json --write-checkpoint bench/models/$m
done
echo "checkpoints $(el)"
S=$O/seed-3.3; OV=()
for o in ${IB_OVERRIDES:-}; do OV+=(--override "$o"); done
timeout 480 $B/bin/inferbench suite bench/seed-3.3.yaml --result-dir "$S" "${OV[@]}" > "$O/suite.log" 2>&1
echo "suite rc=$? $(el)"
tail -5 "$O/suite.log"
python3 bench/gpu/vlm_summary.py "$S" --out "$O/summary.md"
(cd "$O" && tar czf seed-3.3.tgz --exclude='*.jsonl' seed-3.3 && rm -rf seed-3.3)
echo "done $(el)"
