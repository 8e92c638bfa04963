// The one fp32 dot product every CPU kernel uses, so a row's result never depends on how rows were
// batched or tiled: lane l (0..3) sums the products at indices i with i % 4 == l in index order,
// the lanes combine as (s0 + s1) + (s2 + s3), then the k % 4 tail is added in order.
// F4 (a GCC/Clang vector of 4 floats) maps onto one SSE2 register; no FMA contraction is used
// (ISO C++ mode, baseline x86-64), so the vector and scalar forms give identical bits.
#pragma once

#include <cstdint>
#include <cstring>

namespace ib::cpu {

using F4 = float __attribute__((vector_size(16)));

inline F4 load_f4(const float* p) {
  F4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline float reduce_f4(F4 s) {
  return (s[0] + s[1]) + (s[2] + s[3]);
}

inline float dot_f32(const float* a, const float* b, int64_t k) {
  F4 s = {0.0f, 0.0f, 0.0f, 0.0f};
  const int64_t k4 = k / 4 * 4;
  for (int64_t i = 0; i < k4; i += 4) s += load_f4(a + i) * load_f4(b + i);
  float r = reduce_f4(s);
  for (int64_t i = k4; i < k; ++i) r += a[i] * b[i];
  return r;
}

}  // namespace ib::cpu
