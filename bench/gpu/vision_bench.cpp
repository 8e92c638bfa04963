// The CLIP tower benchmark (issue 17's target: CLIP ViT-L/14-336 over 8 images in one batch in
// <= 10 ms on the H200, bf16): LLaVA's vision tower and projector with seeded weights of a
// config.json's shapes (LLaVA-1.5's by default) on the CUDA backend, over random pixels. Reports
// the median over the repeats of the whole encode_llava_images call (the pixels' upload, every
// kernel, waited for; the scratch kept between calls as the engine's encoder keeps it) as wall
// time and as device time (CUDA events around the call), the FLOPs of its matmuls and attention
// and the TFLOP/s they make, the tower alone from pixels already on the device
// (encode_llava_pixels), the bidirectional attention op alone at the tower's shape, and the
// pixels' upload alone. With --write-checkpoint DIR it instead
// writes DIR/model.safetensors holding the vision tower and projector of the config's shapes with
// seeded bf16 values (transformers 5's names) and DIR/config.json, for a run on dummy language
// model weights; a Qwen2-VL config.json (Qwen2VLForConditionalGeneration) writes its vision
// tower and merger so (`inferbench run --model DIR --load-format dummy`; the
// preprocessor_config.json is the caller's to add). Usage: ib_vision_bench [--config config.json]
// [--images 8] [--dtype bf16] [--reps 20]
//                        [--json result.json] [--write-checkpoint DIR]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend_factory.h"
#include "core/fs.h"
#include "core/rng.h"
#include "model/safetensors.h"
#include "vision/clip_vision_tower.h"
#include "vision/llava_config.h"
#include "vision/qwen2vl_vision_tower.h"

namespace ib {
namespace {

struct Options {
  std::string config = "src/vision/testdata/llava-1.5-7b-config.json";
  int64_t images = 8;
  std::string dtype = "bf16";
  int reps = 20;
  std::string json;
  std::string checkpoint_dir;
};

// The FLOPs of one encode_llava_images call: the patch embedding, each layer's qkv, attention
// (q k^T and p v), out projection and MLP, and the projector, over every image.
double tower_flops(const LlavaConfig& c, int64_t images) {
  const auto& v = c.vision;
  const double d = static_cast<double>(v.hidden_size), f = static_cast<double>(v.intermediate_size);
  const double p = static_cast<double>(v.patches_per_image()), s = p + 1;
  const double k = 3.0 * static_cast<double>(v.patch_size_px * v.patch_size_px);
  const double t = static_cast<double>(c.tokens_per_image());
  const double dt = static_cast<double>(c.text_hidden_size);
  const double per_layer = 2 * s * d * 3 * d + 4 * s * s * d + 2 * s * d * d + 4 * s * d * f;
  const double per_image =
      2 * p * k * d + c.layers_to_run() * per_layer + 2 * t * d * dt + 2 * t * dt * dt;
  return per_image * static_cast<double>(images);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The vision tensors of a schema (llava_vision_schema's or qwen2vl_vision_schema's) with seeded
// bf16 values (uniform in +-0.02, the norms' gains around 1), and config.json, into dir.
int write_checkpoint(const std::vector<VisionTensorName>& schema, const std::string& config_text,
                     const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::vector<SafetensorsWriteTensor> tensors;
  Rng rng(1);
  for (const VisionTensorName& t : schema) {
    int64_t n = 1;
    for (const int64_t dim : t.shape) n *= dim;
    const bool norm =
        t.name.find("norm") != std::string::npos || t.name.find("ln_q") != std::string::npos;
    const bool gain = norm && t.name.ends_with(".weight");
    std::string bytes(static_cast<size_t>(n) * 2, '\0');
    for (int64_t i = 0; i < n; ++i) {
      const float v = (gain ? 1.0f : 0.0f) + 0.02f * static_cast<float>(2.0 * rng.uniform() - 1.0);
      const uint16_t bits = f32_to_bf16_bits(v);
      bytes[static_cast<size_t>(2 * i)] = static_cast<char>(bits & 0xff);
      bytes[static_cast<size_t>(2 * i + 1)] = static_cast<char>(bits >> 8);
    }
    tensors.push_back({t.name, DType::kBF16, t.shape, std::move(bytes)});
  }
  const Status st = write_safetensors(dir + "/model.safetensors", tensors);
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.error().message.c_str());
    return 1;
  }
  // config.json as given (left alone where it already is that text: the repository's model
  // directories hold it, bench/models/).
  const auto existing = read_file(dir + "/config.json");
  if (!existing.ok() || *existing != config_text)
    std::ofstream(dir + "/config.json") << config_text;
  std::printf("wrote %zu vision tensors and config.json into %s\n", tensors.size(), dir.c_str());
  return 0;
}

int run(const Options& o) {
  auto text = read_file(o.config);
  if (!text.ok()) {
    std::fprintf(stderr, "%s\n", text.error().message.c_str());
    return 2;
  }
  if (text->find("Qwen2VLForConditionalGeneration") != std::string::npos) {
    auto qwen = parse_qwen2vl_config(*text, o.config);
    if (!qwen.ok() || o.checkpoint_dir.empty()) {
      std::fprintf(stderr, "%s\n",
                   qwen.ok() ? "a Qwen2-VL config: --write-checkpoint only (the timing is LLaVA's)"
                             : qwen.error().message.c_str());
      return 2;
    }
    return write_checkpoint(qwen2vl_vision_schema(*qwen), *text, o.checkpoint_dir);
  }
  auto config = parse_llava_config(*text, o.config);
  const auto dtype = parse_float_dtype(o.dtype);
  if (!config.ok() || !dtype) {
    std::fprintf(stderr, "%s\n",
                 config.ok() ? "--dtype: fp32, bf16 or fp16" : config.error().message.c_str());
    return 2;
  }
  if (!o.checkpoint_dir.empty()) {
    return write_checkpoint(llava_vision_schema(*config), *text, o.checkpoint_dir);
  }
  auto backend = create_backend(BackendOptions{"cuda", *dtype, 0, std::nullopt});
  if (!backend.ok()) {
    std::fprintf(stderr, "%s\n", backend.error().message.c_str());
    return 1;
  }
  Backend& b = **backend;
  const LlavaConfig& c = *config;
  auto weights = random_llava_vision_weights(b, c, 1, 0.02f);
  if (!weights.ok()) {
    std::fprintf(stderr, "%s\n", weights.error().message.c_str());
    return 1;
  }
  const int64_t s = c.vision.image_size_px;
  std::vector<float> pixels(static_cast<size_t>(o.images * 3 * s * s));  // (N, 3, S, S)
  Rng rng(2);
  for (float& x : pixels) x = static_cast<float>(4.0 * rng.uniform() - 2.0);
  const int64_t rows = o.images * c.tokens_per_image(), dt = c.text_hidden_size;
  auto out_buf = b.alloc(static_cast<size_t>(rows * dt) * dtype_size(*dtype), MemoryTag::kOther);
  if (!out_buf.ok()) {
    std::fprintf(stderr, "%s\n", out_buf.error().message.c_str());
    return 1;
  }
  const Tensor out = out_buf->view(*dtype, {rows, dt});  // (N * tokens per image, Dt)

  // The engine's encoder keeps its scratch between batches: so does the benchmark (the first
  // warm-up grows it).
  VisionScratch scratch(b);
  std::vector<double> wall_ms, device_ms, on_device_ms;
  for (int r = -2; r < o.reps; ++r) {  // two warm-ups: plans, attributes, module load, scratch
    const auto t0 = std::chrono::steady_clock::now();
    b.timer_start();
    const Status st = encode_llava_images(b, *weights, c, pixels, o.images, out, &scratch);
    b.timer_stop();
    b.synchronize();
    const auto t1 = std::chrono::steady_clock::now();
    if (!st.ok() || !b.device_status().ok()) {
      std::fprintf(stderr, "encode failed: %s\n",
                   (!st.ok() ? st : b.device_status()).error().message.c_str());
      return 1;
    }
    if (r < 0) continue;
    wall_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    device_ms.push_back(static_cast<double>(b.timer_elapsed_ns().value_or(0)) / 1e6);
  }
  // The tower alone, from the pixels the last call left on the device (its input buffer).
  auto device_pixels = scratch.input({o.images * 3 * s, s});
  if (!device_pixels.ok()) return 1;
  for (int r = -1; r < o.reps; ++r) {
    b.timer_start();
    const Status st = encode_llava_pixels(b, *weights, c, *device_pixels, out, scratch);
    b.timer_stop();
    b.synchronize();
    if (!st.ok() || !b.device_status().ok()) return 1;
    if (r >= 0) on_device_ms.push_back(static_cast<double>(b.timer_elapsed_ns().value_or(0)) / 1e6);
  }

  // The attention op alone at the tower's shape: (N S, 3 D) -> (N S, D).
  const int64_t seq = c.vision.patches_per_image() + 1, d = c.vision.hidden_size;
  auto qkv_buf =
      b.alloc(static_cast<size_t>(o.images * seq * 3 * d) * dtype_size(*dtype), MemoryTag::kOther);
  auto att_buf =
      b.alloc(static_cast<size_t>(o.images * seq * d) * dtype_size(*dtype), MemoryTag::kOther);
  if (!qkv_buf.ok() || !att_buf.ok()) return 1;
  const Tensor qkv = qkv_buf->view(*dtype, {o.images * seq, 3 * d});
  const Tensor att = att_buf->view(*dtype, {o.images * seq, d});
  b.fill_uniform(qkv, 3, 0, 2.0f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.vision.head_dim()));
  const int heads = c.vision.num_attention_heads;
  std::vector<double> attention_ms;
  for (int r = -2; r < o.reps; ++r) {
    b.timer_start();
    for (int layer = 0; layer < c.layers_to_run(); ++layer) {
      b.vision_ops()->bidirectional_attention(qkv, seq, heads, scale, att);
    }
    b.timer_stop();
    b.synchronize();
    if (r >= 0) {
      attention_ms.push_back(static_cast<double>(b.timer_elapsed_ns().value_or(0)) / 1e6 /
                             c.layers_to_run());
    }
  }
  if (!b.device_status().ok()) return 1;

  // The host-side cost inside the call: the upload of the pixels (f32 -> act, pageable memory).
  std::vector<double> upload_ms;
  for (int r = -1; r < o.reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    b.copy_from_host(*device_pixels, pixels.data(), DType::kF32);
    b.synchronize();
    const auto t1 = std::chrono::steady_clock::now();
    if (r >= 0) upload_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  const double pixels_ms = median(upload_ms), on_device = median(on_device_ms);
  const double flops = tower_flops(c, o.images);
  const double attention_flops = 4.0 * static_cast<double>(seq * seq * d * o.images);
  const double wall = median(wall_ms), device = median(device_ms), att_ms = median(attention_ms);
  std::printf(
      "CLIP tower (%s, %lld images of %lld px, %d layers, %s): %.3f ms wall, %.3f ms device "
      "(median of %d), %.3f TFLOP -> %.1f TFLOP/s (wall), %.1f TFLOP/s (device)\n",
      o.config.c_str(), static_cast<long long>(o.images), static_cast<long long>(s),
      c.layers_to_run(), o.dtype.c_str(), wall, device, o.reps, flops / 1e12, flops / (wall * 1e9),
      flops / (device * 1e9));
  std::printf(
      "bidirectional_attention (%lld x %lld tokens, %d heads x %lld): %.1f us per layer, %.1f "
      "TFLOP/s; %.3f ms of the tower's %d layers\n",
      static_cast<long long>(o.images), static_cast<long long>(seq), heads,
      static_cast<long long>(c.vision.head_dim()), att_ms * 1e3, attention_flops / (att_ms * 1e9),
      att_ms * c.layers_to_run(), c.layers_to_run());
  std::printf(
      "inside the call: the pixels' upload (f32 -> %s, pageable) %.3f ms; the tower from pixels "
      "on the device %.3f ms (%.1f TFLOP/s); scratch kept between calls %.1f MiB\n",
      o.dtype.c_str(), pixels_ms, on_device, flops / (on_device * 1e9),
      static_cast<double>(scratch.bytes()) / (1 << 20));
  if (!o.json.empty()) {
    const nlohmann::json j = {{"config", o.config},
                              {"images", o.images},
                              {"dtype", o.dtype},
                              {"layers_run", c.layers_to_run()},
                              {"reps", o.reps},
                              {"tower_flops", flops},
                              {"tower_wall_ms_median", wall},
                              {"tower_device_ms_median", device},
                              {"tower_wall_ms", wall_ms},
                              {"tower_device_ms", device_ms},
                              {"tower_tflop_per_s_wall", flops / (wall * 1e9)},
                              {"tower_tflop_per_s_device", flops / (device * 1e9)},
                              {"attention_us_per_layer_median", att_ms * 1e3},
                              {"attention_tflop_per_s", attention_flops / (att_ms * 1e9)},
                              {"tower_from_device_pixels_ms_median", on_device},
                              {"tower_from_device_pixels_ms", on_device_ms},
                              {"tower_tflop_per_s_from_device_pixels", flops / (on_device * 1e9)},
                              {"scratch_kept_bytes", scratch.bytes()},
                              {"pixel_upload_ms_median", pixels_ms},
                              {"device", b.device_info().name}};
    std::ofstream(o.json) << j.dump(2) << "\n";
  }
  return 0;
}

}  // namespace
}  // namespace ib

int main(int argc, char** argv) {
  ib::Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--config") {
      o.config = value;
    } else if (flag == "--images") {
      o.images = std::atoll(value.c_str());
    } else if (flag == "--dtype") {
      o.dtype = value;
    } else if (flag == "--reps") {
      o.reps = std::atoi(value.c_str());
    } else if (flag == "--json") {
      o.json = value;
    } else if (flag == "--write-checkpoint") {
      o.checkpoint_dir = value;
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (argc % 2 == 0 || o.images < 1 || o.reps < 1) {
    std::fprintf(stderr,
                 "usage: ib_vision_bench [--config config.json] [--images 8] [--dtype bf16] "
                 "[--reps 20] [--json result.json] [--write-checkpoint DIR]\n");
    return 2;
  }
  return ib::run(o);
}
