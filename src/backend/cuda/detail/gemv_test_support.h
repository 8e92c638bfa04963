// Operands shared by the decode GEMV's form tests (cuda_gemv_persist_test.cpp,
// cuda_gemv_x_shared_test.cpp): a quantized weight in any format's layout, and the RoPE-cache
// form's operands.
#pragma once

#include <cmath>
#include <vector>

#include "backend/cuda/detail/kernels.h"
#include "backend/cuda/detail/test_support.h"

namespace ib::cuda::testing {

// dense (N, K) quantized on the GPU in format's layout (groups of 128 / blocks of 64).
inline WeightRef quantize(Twin& twin, Rng& rng, int64_t n, int64_t k, WeightFormat format) {
  const Pair dense = twin.floats({n, k}, random_floats(rng, n * k, -0.05f, 0.05f));
  WeightRef w;
  w.format = format;
  if (is_4bit(format)) {
    const bool nf4 = format == WeightFormat::kNf4;
    w.group_size = nf4 ? 64 : 128;
    w.asymmetric = !nf4;
    w.data = twin.empty(DType::kU8, {n, k / 2}).gpu;
    w.scales = twin.empty(nf4 ? DType::kF32 : DType::kF16, {n, k / w.group_size}).gpu;
    if (!nf4) w.zeros = twin.empty(DType::kU8, {n, k / w.group_size}).gpu;
  } else {
    w.data = twin.empty(quantized_data_dtype(format), {n, k}).gpu;
    w.scales = twin.empty(DType::kF32, {n}).gpu;
  }
  twin.gpu().quantize_weight(dense.gpu, w);
  return w;
}

// The RoPE-cache form's operands for m tokens: Llama-3-8B's heads (384 row tiles of qkv), a
// two-block cache, positions 30 + 7 i at slots 3 i + 2, Llama-3's frequencies.
struct RopeCase {
  AttentionShape shape;
  int64_t nq = (32 + 2 * 8) * 128;
  int block_size = 16;
  Pair kc, vc, pos, slot, freq, qkv;
  KvCacheLayer kv() const { return {kc.gpu, vc.gpu, block_size}; }
};

inline RopeCase rope_case(Twin& twin, int64_t m) {
  RopeCase c;
  c.shape.num_heads = 32;
  c.shape.num_kv_heads = 8;
  c.shape.head_dim = 128;
  c.shape.scale = 1.0f / std::sqrt(128.0f);
  const int64_t blocks = 2, bs = c.block_size;
  c.kc = twin.floats({blocks, 8, bs, 128}, std::vector<float>(blocks * 8 * bs * 128));
  c.vc = twin.floats({blocks, 8, bs, 128}, std::vector<float>(blocks * 8 * bs * 128));
  std::vector<int32_t> positions(static_cast<size_t>(m)), slots(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) {
    positions[static_cast<size_t>(i)] = static_cast<int32_t>(30 + 7 * i);
    slots[static_cast<size_t>(i)] = static_cast<int32_t>(3 * i + 2);
  }
  std::vector<float> inv_freq(64);
  for (size_t i = 0; i < inv_freq.size(); ++i)
    inv_freq[i] = static_cast<float>(std::pow(500000.0, -2.0 * static_cast<double>(i) / 128.0));
  c.pos = twin.ints({m}, positions);
  c.slot = twin.ints({m}, slots);
  c.freq = twin.floats({64}, inv_freq, DType::kF32);
  c.qkv = twin.output({m, c.nq});
  return c;
}

}  // namespace ib::cuda::testing
