// The vision towers end to end on the CUDA backend against the CPU backend (the oracle): LLaVA's
// CLIP tower and projector, and Qwen2-VL's tower (2-D rotary on the device, attention per frame)
// and merger, with the same seeded weights (fill_uniform draws the same values on both backends)
// and pixels, in fp32, bf16 and fp16. Two sizes each: head_dim 8 (the tiny test presets' size;
// the fallback attention kernel) and head_dim 64 / 80 (the tensor-core kernel in bf16 and fp16),
// with token counts that are not multiples of 16. Stated tolerance on the image embeddings'
// relative L2: fp32 1e-4; bf16 3e-2 and fp16 1e-2, the activations being rounded after every op
// of a few layers.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend_factory.h"
#include "backend/cuda/cuda_backend.h"
#include "core/rng.h"
#include "vision/clip_vision_tower.h"
#include "vision/detail/vision_weights.h"
#include "vision/qwen2vl_vision_tower.h"
#include "vision/vision_cuda_test_support.h"

namespace ib {
namespace {

constexpr float kWeightScale = 0.08f;
constexpr uint64_t kWeightSeed = 17;

using vision_cuda_test::rel_l2;
using vision_cuda_test::tolerance;

std::vector<float> random_values(uint64_t seed, int64_t n, float scale) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = scale * static_cast<float>(2.0 * rng.uniform() - 1.0);
  return v;
}

std::unique_ptr<Backend> make_backend(const std::string& device, DType dtype) {
  auto backend = create_backend(BackendOptions{device, dtype, 0, std::nullopt});
  IB_ASSERT(backend.ok(), "backend creation");
  return std::move(backend).value();
}

// out (rows, Dt) in act on backend, read back as floats.
std::vector<float> features(Backend& backend, int64_t rows, int64_t dt,
                            const std::function<Status(Tensor)>& encode) {
  const DType act = backend.activation_dtype();
  auto buffer = backend.alloc(static_cast<size_t>(rows * dt) * dtype_size(act), MemoryTag::kOther);
  IB_ASSERT(buffer.ok(), "test allocation");
  const Tensor out = buffer->view(act, {rows, dt});
  backend.fill_constant(out, NAN);  // an unwritten element fails the comparison
  const Status status = encode(out);
  EXPECT_TRUE(status.ok()) << status.error().message;
  std::vector<float> host;
  detail::features_to_host(backend, out, host);
  return host;
}

LlavaConfig llava_config(int64_t hidden, int heads, int64_t image_px, int64_t patch_px) {
  LlavaConfig c;
  c.vision.hidden_size = hidden;
  c.vision.intermediate_size = 2 * hidden;
  c.vision.num_hidden_layers = 3;  // 2 run (feature layer -2)
  c.vision.num_attention_heads = heads;
  c.vision.image_size_px = image_px;
  c.vision.patch_size_px = patch_px;
  c.text_hidden_size = 96;
  return c;
}

Qwen2VlConfig qwen2vl_config(int64_t embed_dim, int heads) {
  Qwen2VlConfig c;
  c.vision.depth = 2;
  c.vision.embed_dim = embed_dim;
  c.vision.mlp_hidden = 2 * embed_dim;
  c.vision.num_heads = heads;
  c.vision.patch_size_px = 4;
  c.text_hidden_size = 64;
  return c;
}

class VisionCuda : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: GPU test skipped";
  }
  // The oracle first, then the backend under test.
  std::vector<std::pair<std::string, DType>> sides() const {
    return {{"cpu", DType::kF32}, {"cuda", GetParam()}};
  }
};

TEST_P(VisionCuda, LlavaTowerMatchesCpu) {
  // The tiny preset's tower (hd 8, 17 tokens, patches of 3 x 7 x 7 = 147 values: an odd matmul
  // K), and hd 64 over 65 tokens (patches of 8 px), 3 images in one batch.
  for (const LlavaConfig& config : {llava_config(32, 4, 28, 7), llava_config(128, 2, 64, 8)}) {
    const int64_t images = 3, s = config.vision.image_size_px;
    const std::vector<float> pixels = random_values(3, images * 3 * s * s, 2.0f);
    const int64_t rows = images * config.tokens_per_image(), dt = config.text_hidden_size;
    std::vector<std::vector<float>> out;
    for (const auto& [device, dtype] : sides()) {
      auto backend = make_backend(device, dtype);
      auto weights = random_llava_vision_weights(*backend, config, kWeightSeed, kWeightScale);
      ASSERT_TRUE(weights.ok()) << weights.error().message;
      out.push_back(features(*backend, rows, dt, [&](Tensor t) {
        return encode_llava_images(*backend, *weights, config, pixels, images, t);
      }));
      ASSERT_TRUE(backend->device_status().ok()) << backend->device_status().error().message;
    }
    EXPECT_LT(rel_l2(out[1], out[0]), tolerance(GetParam()))
        << "D=" << config.vision.hidden_size << " heads=" << config.vision.num_attention_heads;
  }
}

TEST_P(VisionCuda, Qwen2VlTowerMatchesCpu) {
  // Frames of 60, 8 and 16 patches (the last image two frames): hd 8 and hd 80.
  const std::vector<std::array<int64_t, 3>> grids = {{1, 6, 10}, {1, 4, 2}, {2, 4, 4}};
  for (const Qwen2VlConfig& config : {qwen2vl_config(32, 4), qwen2vl_config(160, 2)}) {
    int64_t patches = 0;
    for (const auto& g : grids) patches += g[0] * g[1] * g[2];
    const std::vector<float> pixels =
        random_values(4, patches * config.vision.patch_values(), 2.0f);
    const int64_t rows = patches / config.vision.merge_units(), dt = config.text_hidden_size;
    std::vector<std::vector<float>> out;
    for (const auto& [device, dtype] : sides()) {
      auto backend = make_backend(device, dtype);
      auto weights = random_qwen2vl_vision_weights(*backend, config, kWeightSeed, kWeightScale);
      ASSERT_TRUE(weights.ok()) << weights.error().message;
      out.push_back(features(*backend, rows, dt, [&](Tensor t) {
        return encode_qwen2vl_images(*backend, *weights, config, pixels, grids, t);
      }));
      ASSERT_TRUE(backend->device_status().ok()) << backend->device_status().error().message;
    }
    EXPECT_LT(rel_l2(out[1], out[0]), tolerance(GetParam()))
        << "D=" << config.vision.embed_dim << " heads=" << config.vision.num_heads;
  }
}

std::string dtype_param(const ::testing::TestParamInfo<DType>& info) {
  return std::string(dtype_name(info.param));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, VisionCuda,
                         ::testing::Values(DType::kF32, DType::kBF16, DType::kF16), dtype_param);

}  // namespace
}  // namespace ib
