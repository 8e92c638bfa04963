// Differential tests of the CUDA vision ops against the CPU ops (backend/ops.h, VisionOps), in
// fp32, bf16 and fp16: LayerNorm (CLIP-L's and Qwen2-VL's widths, rows far from zero mean), the
// residual add, quick_gelu and erf gelu (the 16-byte and the scalar path), the per-row rotary
// embedding, the patch unfolding (exact), and bidirectional attention at CLIP ViT-L/14-336's shape
// (577 tokens x 16 heads x 64, 2 images: the tensor-core kernel and its partial last tiles),
// Qwen2-VL's head_dim 80 over frames of 16, 100 and 1,000 tokens, and the fallback (head_dim 8, 32
// and 96, every dtype). Stated tolerance: relative L2 within detail/test_support.h's per dtype
// (fp32 2e-5, bf16 1e-2, fp16 3e-3); fp32 attention within 1e-5. Every output is poisoned with NaN
// first, so an unwritten element fails.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cuda/detail/test_support.h"
#include "backend/cuda/detail/vision_kernels.h"

namespace ib::cuda {
namespace {

using testing::dtype_param_name;
using testing::Pair;
using testing::random_floats;
using testing::tolerance;
using testing::Twin;

class CudaVision : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { IB_REQUIRE_CUDA(); }
};

double attention_tolerance(DType dtype) {
  return dtype == DType::kF32 ? 1e-5 : tolerance(dtype);
}

TEST_P(CudaVision, LayerNormMatchesCpu) {
  Twin twin(GetParam());
  Rng rng(1);
  for (const int64_t d : {1024, 1280, 80, 37}) {
    const int64_t t = 67;
    std::vector<float> x = random_floats(rng, t * d, -2.0f, 2.0f);
    for (float& v : x) v += 3.0f;  // an offset the mean must remove
    Pair xs = twin.floats({t, d}, x);
    Pair w = twin.floats({d}, random_floats(rng, d, 0.5f, 1.5f));
    Pair b = twin.floats({d}, random_floats(rng, d, -0.5f, 0.5f));
    Pair out = twin.output({t, d});
    twin.cpu().vision_ops()->layer_norm(xs.cpu, w.cpu, b.cpu, 1e-5f, out.cpu);
    twin.gpu().layer_norm(xs.gpu, w.gpu, b.gpu, 1e-5f, out.gpu);
    ASSERT_TRUE(twin.gpu().device_status().ok()) << twin.gpu().device_status().error().message;
    EXPECT_LT(twin.error(out), tolerance(GetParam())) << "D=" << d;
  }
}

TEST_P(CudaVision, AddAndActivationsMatchCpu) {
  Twin twin(GetParam());
  Rng rng(2);
  // 33 x 4096: the 16-byte path; 33 x 4097: an element count no vector width divides.
  for (const int64_t d : {4096, 4097}) {
    const int64_t t = 33;
    for (const VisionActivation act : {VisionActivation::kQuickGelu, VisionActivation::kGeluErf}) {
      Pair x = twin.floats({t, d}, random_floats(rng, t * d, -6.0f, 6.0f));
      twin.cpu().vision_ops()->activation(x.cpu, act);
      twin.gpu().activation(x.gpu, act);
      ASSERT_TRUE(twin.gpu().device_status().ok());
      EXPECT_LT(twin.error(x), tolerance(GetParam()))
          << (act == VisionActivation::kQuickGelu ? "quick_gelu" : "gelu") << " D=" << d;
    }
    Pair x = twin.floats({t, d}, random_floats(rng, t * d));
    Pair y = twin.floats({t, d}, random_floats(rng, t * d));
    twin.cpu().vision_ops()->add(x.cpu, y.cpu);
    twin.gpu().add(x.gpu, y.gpu);
    ASSERT_TRUE(twin.gpu().device_status().ok());
    EXPECT_LT(twin.error(x), tolerance(GetParam())) << "add D=" << d;
  }
}

// CLIP-L/14-336's shape (2 images of 336 x 336, patches of 14) and one of 3 x 3 patches of 2.
TEST_P(CudaVision, UnfoldPatchesMatchesCpu) {
  Twin twin(GetParam());
  Rng rng(5);
  for (const auto& [s, p] : {std::pair<int64_t, int64_t>{336, 14}, {6, 2}}) {
    const int64_t n = 2, grid = s / p;
    Pair pixels = twin.floats({n * 3 * s, s}, random_floats(rng, n * 3 * s * s, -2.0f, 2.0f));
    Pair out = twin.output({n * grid * grid, 3 * p * p});
    twin.cpu().vision_ops()->unfold_patches(pixels.cpu, p, out.cpu);
    twin.gpu().unfold_patches(pixels.gpu, p, out.gpu);
    ASSERT_TRUE(twin.gpu().device_status().ok()) << twin.gpu().device_status().error().message;
    EXPECT_EQ(twin.error(out), 0.0) << "S=" << s << " p=" << p;  // a copy: exact
  }
}

TEST_P(CudaVision, RotaryRowsMatchesCpu) {
  Twin twin(GetParam());
  Rng rng(3);
  for (const int64_t hd : {80, 64, 8}) {
    const int64_t t = 50, h = 16, half = hd / 2;
    const std::vector<float> qkv0 = random_floats(rng, t * 3 * h * hd);
    Pair qkv = twin.floats({t, 3 * h * hd}, qkv0);
    std::vector<float> c(static_cast<size_t>(t * half)), s(c.size());
    for (size_t i = 0; i < c.size(); ++i) {
      const double angle = 4.0 * rng.uniform() - 2.0;
      c[i] = static_cast<float>(std::cos(angle));
      s[i] = static_cast<float>(std::sin(angle));
    }
    Pair cos_t = twin.floats({t, half}, c, DType::kF32);
    Pair sin_t = twin.floats({t, half}, s, DType::kF32);
    twin.cpu().vision_ops()->rotary_rows(qkv.cpu, cos_t.cpu, sin_t.cpu, static_cast<int>(h));
    twin.gpu().rotary_rows(qkv.gpu, cos_t.gpu, sin_t.gpu, static_cast<int>(h));
    ASSERT_TRUE(twin.gpu().device_status().ok());
    EXPECT_LT(twin.error(qkv), tolerance(GetParam())) << "hd=" << hd;
    // v is left exactly as it was.
    const std::vector<float> got = twin.gpu_floats(qkv.gpu);
    const std::vector<float> v0 = twin.representable(qkv0);
    for (int64_t r = 0; r < t; ++r) {
      for (int64_t i = 2 * h * hd; i < 3 * h * hd; ++i) {
        const auto at = static_cast<size_t>(r * 3 * h * hd + i);
        ASSERT_EQ(got[at], v0[at]) << "v changed at row " << r << " column " << i;
      }
    }
  }
}

struct AttentionCase {
  int64_t images, seq_len;
  int heads, head_dim;
};

std::string describe(const AttentionCase& c) {
  std::ostringstream s;
  s << "B=" << c.images << " S=" << c.seq_len << " H=" << c.heads << " hd=" << c.head_dim;
  return s.str();
}

void expect_attention_matches(Twin& twin, const AttentionCase& c, uint64_t seed) {
  const int64_t t = c.images * c.seq_len, width = int64_t{c.heads} * c.head_dim;
  Rng rng(seed);
  // q and k in [-2, 2]: scores of a few units, a softmax far from uniform.
  Pair qkv = twin.floats({t, 3 * width}, random_floats(rng, t * 3 * width, -2.0f, 2.0f));
  Pair out = twin.output({t, width});
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  twin.cpu().vision_ops()->bidirectional_attention(qkv.cpu, c.seq_len, c.heads, scale, out.cpu);
  twin.gpu().bidirectional_attention(qkv.gpu, c.seq_len, c.heads, scale, out.gpu);
  ASSERT_TRUE(twin.gpu().device_status().ok()) << twin.gpu().device_status().error().message;
  EXPECT_LT(twin.error(out), attention_tolerance(twin.dtype())) << describe(c);
}

TEST_P(CudaVision, AttentionAtClipLargeShapeMatchesCpu) {
  Twin twin(GetParam());
  const AttentionCase c{2, 577, 16, 64};
  expect_attention_matches(twin, c, 4);
}

TEST_P(CudaVision, AttentionAtQwen2VlShapesMatchesCpu) {
  Twin twin(GetParam());
  uint64_t seed = 5;
  for (const AttentionCase& c : {AttentionCase{3, 16, 16, 80}, AttentionCase{2, 100, 16, 80},
                                 AttentionCase{1, 1000, 16, 80}, AttentionCase{4, 64, 4, 80}}) {
    expect_attention_matches(twin, c, seed++);
  }
}

TEST_P(CudaVision, AttentionFallbackHeadDimsMatchCpu) {
  Twin twin(GetParam());
  uint64_t seed = 9;
  for (const AttentionCase& c :
       {AttentionCase{3, 17, 4, 8}, AttentionCase{2, 70, 2, 32}, AttentionCase{1, 5, 1, 96}}) {
    expect_attention_matches(twin, c, seed++);
  }
}

// The tensor-core kernel is the one bf16 and fp16 take at head_dim 64 and 80 (the shapes above),
// and fp32 never takes it.
TEST_P(CudaVision, FlashKernelTakesTheHalfPrecisionShapes) {
  Twin twin(GetParam());
  for (const int hd : {64, 80, 8, 96}) {
    Pair qkv = twin.output({4, 3 * 2 * hd});
    Pair out = twin.output({4, 2 * hd});
    const bool half = GetParam() != DType::kF32;
    EXPECT_EQ(vision_flash_supported(qkv.gpu, hd, out.gpu), half && (hd == 64 || hd == 80))
        << "hd=" << hd;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaVision,
                         ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                         dtype_param_name);

}  // namespace
}  // namespace ib::cuda
