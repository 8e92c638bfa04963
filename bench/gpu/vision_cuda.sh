#!/usr/bin/env bash
# The vision encoders on the CUDA backend (issue 17), on the GPU machine:
#  1. the gpu tests: each CUDA vision op against the CPU op (backend_cuda_test's CudaVision only:
#     LayerNorm, add, activations, rotary_rows, bidirectional attention at CLIP-L's and
#     Qwen2-VL's shapes, fp32/bf16/fp16), both towers end to end against the CPU
#     (vision_cuda_test), and a tiny LLaVA's and a tiny Qwen2-VL's logits through the engine
#     against the CPU engine's (llava_engine_cuda_test, qwen2vl_engine_cuda_test);
#  2. the CLIP ViT-L/14-336 tower and projector over 8 images in one batch, bf16, seeded weights
#     of LLaVA-1.5's shapes (ib_vision_bench; the target: <= 10 ms, about 280 TFLOP/s), and the
#     same at 1 image;
#  3. LLaVA-1.5-7B at batch 1 with one 336 x 336 image, bf16: the vision tower and projector from a
#     seeded checkpoint of the real shapes (ib_vision_bench --write-checkpoint), the language
#     model on dummy weights; TTFT and its split (the target: TTFT <= 25 ms).
# Usage (~8 minutes of the machine, most of it the build; carry .deps/icu.tar.xz and .deps/img.tar.xz where the machine lacks ICU,
# libpng or libjpeg: bench/gpu/icu-deps.sh, bench/gpu/image-deps.sh):
#   OUT=dir bash bench/gpu/vision_cuda.sh
# Writes build.log, ctest.log, clip8.json, clip1.json, bench.log, llava7b.log and
# llava7b_result.json (8 files at most).
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
source bench/gpu/build_inferbench.sh
use_icu
use_img
B=/tmp/ib-vision-cuda
# The tests first, so that their results come back even when the machine's time runs out later.
build_gpu_tests $B "$O/build.log" backend_cuda_test vision_cuda_test llava_engine_cuda_test \
  qwen2vl_engine_cuda_test || exit 1
grep -q "vision (images) ON" "$O/build.log" || { echo "vision is off (libpng/libjpeg missing)"; exit 1; }
echo "built the tests $(el)"
{
  timeout 300 $B/src/backend/cuda/backend_cuda_test --gtest_filter='*CudaVision*'
  echo "CudaVision rc=$? $(el)"
  (cd $B && timeout 300 ctest -R "^(vision_cuda_test|llava_engine_cuda_test|qwen2vl_engine_cuda_test)$" \
    --output-on-failure)
  echo "ctest rc=$? $(el)"
} > "$O/ctest.log" 2>&1
grep -E "rc=" "$O/ctest.log"
grep -E "tests passed|Failed|FAILED|\*\*\*" "$O/ctest.log" | head -20
cmake --build $B -j "${JOBS:-16}" --target ib_vision_bench inferbench >> "$O/build.log" 2>&1 ||
  { echo "BUILD FAILED (bench)"; exit 1; }
echo "built the bench $(el)"
{
  timeout 120 $B/bench/gpu/ib_vision_bench --images 8 --dtype bf16 --reps 20 --json "$O/clip8.json"
  echo "clip8 rc=$? $(el)"
  timeout 120 $B/bench/gpu/ib_vision_bench --images 1 --dtype bf16 --reps 20 --json "$O/clip1.json"
  echo "clip1 rc=$? $(el)"
} 2>&1 | tee "$O/bench.log"
M=/tmp/llava-1.5-7b-seeded; rm -rf $M
timeout 300 $B/bench/gpu/ib_vision_bench --write-checkpoint $M >> "$O/bench.log" 2>&1 &&
  cp src/vision/testdata/llava_preprocessor_config.json $M/preprocessor_config.json
R=/tmp/llava7b-run; rm -rf $R
timeout 300 $B/bin/inferbench run --model $M --load-format dummy --device cuda --dtype bf16 \
  --dataset-name random-mm --random-mm-base-items-per-request 1 \
  --random-mm-num-mm-items-range-ratio 0 --random-mm-bucket-config '{(336, 336, 1): 1.0}' \
  --input-len 32 --output-len 1 --num-prompts 20 --batch-size 1 --runs 3 --disable-tqdm \
  --result-dir $R --overwrite > "$O/llava7b.log" 2>&1
echo "llava7b rc=$? $(el)"
grep -E "TTFT|Vision encoder|Visual tokens" "$O/llava7b.log" | head -20
[ -f $R/result.json ] && cp $R/result.json "$O/llava7b_result.json"
rm -rf $M
echo "done $(el)"
