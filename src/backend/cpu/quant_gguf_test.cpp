// kGguf on the CPU (backend/weight.h): the per-32 activation round trip on hand-made blocks, and
// the matmul against core/ggml_blocks.h's dequantization of the same bytes, summed in double.
#include <gtest/gtest.h>

#include <cmath>
#include <span>
#include <string_view>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/detail/kernels.h"
#include "core/ggml_blocks.h"
#include "core/rng.h"

namespace ib {
namespace {

TEST(CpuGguf, ActivationsRoundTripPer32WithTiesToEven) {
  // Block 0: max |x| 127, so d = 1 and x' = rne(x); block 1: max 254, d = 2; block 2: zeros.
  std::vector<float> x(96, 0.0f);
  const float b0[] = {127.0f, -63.0f, 0.4f, 2.5f, 3.5f, -1.5f, -0.5f, 126.6f};
  const float w0[] = {127.0f, -63.0f, 0.0f, 2.0f, 4.0f, -2.0f, -0.0f, 127.0f};
  for (int i = 0; i < 8; ++i) x[static_cast<size_t>(i)] = b0[i];
  x[32] = 254.0f;
  x[33] = 5.0f;   // 2.5 steps: rounds to 2, x' = 4
  x[34] = -7.0f;  // -3.5 steps: rounds to -4, x' = -8
  std::vector<float> out(96, NAN);
  cpu::quantize_blocks_q8(x.data(), 1, 96, out.data());
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out[static_cast<size_t>(i)], w0[i]) << i;
  EXPECT_EQ(out[32], 254.0f);
  EXPECT_EQ(out[33], 4.0f);
  EXPECT_EQ(out[34], -8.0f);
  for (int i = 64; i < 96; ++i) EXPECT_EQ(out[static_cast<size_t>(i)], 0.0f) << i;
}

// The test's own round trip, from weight.h's definition.
std::vector<double> round_trip(const std::vector<float>& x) {
  std::vector<double> out(x.size());
  for (size_t b = 0; b < x.size(); b += 32) {
    float amax = 0;
    for (size_t i = b; i < b + 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float inv = amax > 0 ? 127.0f / amax : 0.0f, d = amax / 127.0f;
    for (size_t i = b; i < b + 32; ++i) out[i] = std::nearbyint(x[i] * inv) * double{d};
  }
  return out;
}

// A weight of three rows of each type (a segment each) against the definition, summed in double.
void expect_matmul_matches(const std::vector<GgmlType>& types, uint64_t seed) {
  const int64_t k = 512, m = 3;
  const auto n = static_cast<int64_t>(3 * types.size());
  Rng rng(seed);
  GgufRows rows;
  rows.cols = k;
  int64_t longest = 0;
  for (const GgmlType t : types) longest = std::max(longest, gguf_row_bytes(t, k));
  const int64_t stride = (longest + 15) / 16 * 16;
  std::vector<uint8_t> bytes(static_cast<size_t>(n * stride), 0);
  std::vector<float> dense(static_cast<size_t>(n * k));
  for (int64_t r = 0; r < n; ++r) {
    const GgmlType t = types[static_cast<size_t>(r / 3)];
    if (r % 3 == 0) {
      rows.begin[rows.count] = r;
      rows.type[rows.count++] = t;
    }
    std::vector<float> v(static_cast<size_t>(k));
    for (auto& e : v) e = static_cast<float>(rng.uniform() - 0.5) * 0.2f;
    auto q = quantize_ggml(t, v);
    ASSERT_TRUE(q.ok());
    std::copy(q->begin(), q->end(), bytes.begin() + r * stride);
    ASSERT_TRUE(dequantize_ggml(t, *q, std::span<float>(dense.data() + r * k, k)).ok());
  }
  ASSERT_EQ(rows.count, static_cast<int>(types.size()));
  std::vector<float> x(static_cast<size_t>(m * k));
  for (auto& e : x) e = static_cast<float>(rng.uniform() - 0.5) * 4.0f;

  CpuBackend backend(2);
  auto wbuf = backend.alloc(bytes.size(), MemoryTag::kOther);
  auto xbuf = backend.alloc(x.size() * 4, MemoryTag::kOther);
  auto obuf = backend.alloc(static_cast<size_t>(m * n * 4), MemoryTag::kOther);
  ASSERT_TRUE(wbuf.ok() && xbuf.ok() && obuf.ok());
  WeightRef w;
  w.format = WeightFormat::kGguf;
  w.data = wbuf->view(DType::kU8, {n, stride});
  w.gguf = rows;
  backend.copy_from_host(w.data, bytes.data(), DType::kU8);
  ASSERT_TRUE(w.quantized_layout_ok());
  const Tensor xt = xbuf->view(DType::kF32, {m, k});
  backend.copy_from_host(xt, x.data(), DType::kF32);
  const Tensor out = obuf->view(DType::kF32, {m, n});
  backend.matmul(xt, w, nullptr, out);
  std::vector<float> got(static_cast<size_t>(m * n));
  backend.copy_to_host(out, got.data());

  const std::vector<double> xr = round_trip(x);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double want = 0;
      for (int64_t c = 0; c < k; ++c) want += dense[j * k + c] * xr[i * k + c];
      EXPECT_NEAR(got[i * n + j], want, 1e-5 * (1 + std::fabs(want))) << i << " " << j;
    }
  }
}

TEST(CpuGguf, MatmulIsTheDequantizedRowsTimesTheRoundTrippedActivations) {
  expect_matmul_matches({GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kQ8_0, GgmlType::kQ4_0}, 5);
  expect_matmul_matches({GgmlType::kQ5_K}, 6);
}

TEST(CpuGguf, LayoutChecksRefuseWhatTheRowsCannotHold) {
  WeightRef w;
  w.format = WeightFormat::kGguf;
  std::vector<uint8_t> storage(4 * 160);
  w.data = Tensor(storage.data(), DType::kU8, {4, 160});
  w.gguf.count = 1;
  w.gguf.cols = 256;
  w.gguf.type[0] = GgmlType::kQ4_K;  // 144 bytes a row: fits 160
  EXPECT_TRUE(w.quantized_layout_ok());
  w.gguf.type[0] = GgmlType::kQ5_K;  // 176 bytes: does not
  EXPECT_FALSE(w.quantized_layout_ok());
  w.gguf.type[0] = GgmlType::kF16;  // not a block type
  EXPECT_FALSE(w.quantized_layout_ok());
  w.gguf.type[0] = GgmlType::kQ4_K;
  w.gguf.cols = 200;  // not whole blocks
  EXPECT_FALSE(w.quantized_layout_ok());
}

}  // namespace
}  // namespace ib
