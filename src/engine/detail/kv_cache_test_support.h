// Test support (engine tests only): a recognisable pattern written into a KV pool and checked
// after it grew (the old blocks must survive every growth path), on any backend.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "engine/detail/kv_cache.h"

namespace ib::testing {

// The value of element i of layer's K (half 0) or V (half 1): distinct and exact in f32 for up
// to 16 layers of 2^19 elements per half.
inline float pattern(size_t layer, int half, int64_t i) {
  IB_ASSERT(layer < 16 && i < (int64_t{1} << 19), "pattern: pool too large for exact values");
  return static_cast<float>((static_cast<int64_t>(layer) << 20) + (int64_t{half} << 19) + i);
}

// Writes pattern() into every element of every layer's K and V, each (blocks, heads, bs, d).
inline void fill_pattern(detail::KvCache& kv, Backend& backend) {
  for (size_t l = 0; l < kv.layers.size(); ++l) {
    for (int half = 0; half < 2; ++half) {
      const Tensor& t = half == 0 ? kv.layers[l].k : kv.layers[l].v;
      std::vector<float> v(static_cast<size_t>(t.numel()));
      for (size_t i = 0; i < v.size(); ++i) v[i] = pattern(l, half, static_cast<int64_t>(i));
      backend.copy_from_host(t, v.data(), DType::kF32);
    }
  }
  backend.synchronize();
}

// Whether the first `blocks` blocks of every K and V still hold pattern() (f32 pools only).
inline void expect_pattern(const detail::KvCache& kv, Backend& backend, int blocks) {
  for (size_t l = 0; l < kv.layers.size(); ++l) {
    for (int half = 0; half < 2; ++half) {
      const Tensor& t = half == 0 ? kv.layers[l].k : kv.layers[l].v;
      ASSERT_EQ(t.dtype, DType::kF32);
      std::vector<float> v(static_cast<size_t>(t.numel()));
      backend.copy_to_host(t, v.data());
      const auto n = static_cast<size_t>(t.numel() / t.dim(0) * blocks);
      ASSERT_LE(n, v.size());
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(v[i], pattern(l, half, static_cast<int64_t>(i)))
            << "layer " << l << " half " << half << " element " << i;
      }
    }
  }
}

inline int blocks_of(const detail::KvCache& kv) {
  return static_cast<int>(kv.layers.at(0).k.dim(0));
}

}  // namespace ib::testing
