#!/usr/bin/env bash
# Vision-language checks on the GPU machine (issue 17), against transformers:
#  1. the pixel values of inferbench's CLIP preprocessing against transformers' image processors
#     (both backends where present: torchvision and PIL) for LLaVA-1.5's preprocessor_config.json,
#     within 1e-5 (tools/compare_pixel_values.py);
#  2. llava-tiny: a random-weight LlavaForConditionalGeneration saved by transformers, reloaded in
#     fp32, one PNG through both: pixel values within 1e-5, the projector's image features within
#     1e-4 relative (tools/compare_llava_vision.py; the engine's CPU vision path);
#  3. qwen2vl-tiny: a random-weight Qwen2VLForConditionalGeneration saved by transformers,
#     reloaded in fp32, one PNG and a prompt around it through both: the pixel values (patch
#     rows) and grid within 1e-5, the logits after every prompt token within relative L2 1e-4
#     (tools/compare_qwen2vl.py; the engine's CPU path: vision tower, merger, M-RoPE Qwen2).
# Usage (~3 minutes; carry .deps/img.tar.xz and .deps/icu.tar.xz where the machine lacks libpng,
# libjpeg or ICU headers: bench/gpu/image-deps.sh, bench/gpu/icu-deps.sh):
#   OUT=dir bash bench/gpu/vlm.sh
# Writes build.log, pixel_values.json, pixel_values.log, llava_vision.json, llava_vision.log,
# qwen2vl.json, qwen2vl.log.
set -u; T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 )) s"; }
cd "$(dirname "$0")/../.."; O=${OUT:-$PWD/gpu-out}; mkdir -p "$O"
for dep in icu img; do
  if [ -f .deps/$dep.tar.xz ] && [ ! -d .deps/$dep/usr/lib ]; then
    tar xJf .deps/$dep.tar.xz -C .deps
    [ -d .deps/$dep/usr/lib/x86_64-linux-gnu ] && mv .deps/$dep/usr/lib/x86_64-linux-gnu/* .deps/$dep/usr/lib/
  fi
  [ -d .deps/$dep/usr/lib ] && export LD_LIBRARY_PATH=$PWD/.deps/$dep/usr/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
done
B=/tmp/ib-vlm
(cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DINFERBENCH_CUDA=OFF -DINFERBENCH_TESTS=OFF \
  -DINFERBENCH_VISION=ON \
  -DINFERBENCH_WERROR=OFF &&
  cmake --build $B -j16 --target vision_preprocess vision_encode qwen2vl_logits) > "$O/build.log" 2>&1 ||
  { tail -30 "$O/build.log"; exit 1; }
echo "built $(el)"
python3 -c "import transformers, torch, torchvision, PIL; print('transformers', transformers.__version__, \
'torch', torch.__version__, 'torchvision', torchvision.__version__, 'pillow', PIL.__version__)"
timeout 300 python3 tools/compare_pixel_values.py --tool $B/bench/vision/vision_preprocess \
  --config src/vision/testdata/llava_preprocessor_config.json --out "$O" --tol 1e-5 2>&1 |
  grep -v Warning | tee "$O/pixel_values.log"
echo "pixel values rc=${PIPESTATUS[0]} $(el)"
timeout 300 python3 tools/compare_llava_vision.py --tool $B/bench/vision/vision_encode --out "$O" 2>&1 |
  grep -v Warning | tee "$O/llava_vision.log"
echo "llava-tiny rc=${PIPESTATUS[0]} $(el)"
timeout 300 python3 tools/compare_qwen2vl.py --tool $B/bench/vision/qwen2vl_logits --out "$O" 2>&1 |
  grep -v Warning | tee "$O/qwen2vl.log"
echo "qwen2vl-tiny rc=${PIPESTATUS[0]} $(el)"
rm -rf "$O/llava-tiny" "$O/qwen2vl-tiny" "$O/images" "$O"/*.f32
