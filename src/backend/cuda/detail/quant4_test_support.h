// Test support shared by the 4-bit tests (cuda_quant4_test.cpp, cuda_moe_test.cpp): a random
// 4-bit weight on the GPU and its values dequantized on the host as backend/weight.h defines them,
// as a dense fp32 weight of the reference (CPU) backend.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/detail/test_support.h"
#include "core/dtype.h"

namespace ib::cuda::testing {

// A 4-bit variant under test: format, group size (0: one group per row), act-order.
struct Variant {
  WeightFormat format;
  int group;
  bool act_order;
  std::string name() const {
    return std::string(weight_format_name(format)) + "_g" + std::to_string(group) +
           (act_order ? "_actorder" : "");
  }
};

// gpu: the 4-bit weight; cpu: its dequantized values, dense fp32 (x's column order).
struct Weight4 {
  WeightRef gpu, cpu;
};

inline int64_t u32_below(Rng& rng, int64_t n) {
  return static_cast<int64_t>(rng.uniform() * static_cast<double>(n)) % n;
}

inline Weight4 make_weight(Twin& twin, Rng& rng, int64_t n, int64_t k, const Variant& v) {
  const int group = v.group == 0 ? static_cast<int>(k) : v.group;
  const int64_t groups = k / group;
  const bool nf4 = v.format == WeightFormat::kNf4;
  std::vector<uint8_t> codes(static_cast<size_t>(n * k / 2));
  for (auto& c : codes) c = static_cast<uint8_t>(u32_below(rng, 256));
  std::vector<uint16_t> scale_bits(static_cast<size_t>(n * groups));
  std::vector<float> scales(scale_bits.size());
  std::vector<uint8_t> zeros(scale_bits.size());
  for (size_t i = 0; i < scales.size(); ++i) {
    const float s = 0.002f + 0.01f * static_cast<float>(rng.uniform());
    scale_bits[i] = f32_to_f16_bits(s);
    scales[i] = nf4 ? s * 8.0f : f16_bits_to_f32(scale_bits[i]);  // NF4: f32 absmax
    zeros[i] = static_cast<uint8_t>(u32_below(rng, 16));
  }
  std::vector<int32_t> perm(static_cast<size_t>(k));
  std::iota(perm.begin(), perm.end(), 0);
  if (v.act_order) {
    for (int64_t i = k - 1; i > 0; --i)
      std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(u32_below(rng, i + 1))]);
  }
  std::vector<float> dense(static_cast<size_t>(n * k));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      const uint8_t byte = codes[static_cast<size_t>(r * (k / 2) + c / 2)];
      const bool high = (c % 2 == 1) != nf4;  // NF4: k = 2j in the high nibble
      const int q = high ? byte >> 4 : byte & 0xF;
      const size_t g = static_cast<size_t>(r * groups + c / group);
      const float w = nf4 ? kNf4Levels[q] * scales[g]
                          : static_cast<float>(q - static_cast<int>(zeros[g])) * scales[g];
      dense[static_cast<size_t>(r * k + perm[static_cast<size_t>(c)])] = w;
    }
  }
  Weight4 w;
  w.cpu = WeightRef(twin.floats({n, k}, dense, DType::kF32).cpu);
  w.gpu.format = v.format;
  w.gpu.group_size = group;
  w.gpu.data = twin.bytes(DType::kU8, {n, k / 2}, codes).gpu;
  if (nf4) {
    w.gpu.scales = twin.floats({n, groups}, scales, DType::kF32).gpu;
  } else {
    w.gpu.scales = twin.empty(DType::kF16, {n, groups}).gpu;
    twin.gpu().copy_from_host(w.gpu.scales, scale_bits.data(), DType::kF16);
    w.gpu.zeros = twin.bytes(DType::kU8, {n, groups}, zeros).gpu;
  }
  if (v.act_order) w.gpu.input_perm = twin.ints({k}, perm).gpu;
  EXPECT_TRUE(w.gpu.quantized_layout_ok()) << v.name();
  const Status prepared = twin.gpu().prepare_weight(w.gpu);
  EXPECT_TRUE(prepared.ok()) << v.name();
  return w;
}

}  // namespace ib::cuda::testing
