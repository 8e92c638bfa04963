// Internal to the CPU backend: element i of fp32 / bf16 / fp16 memory read as f32 and written
// from f32 (round to nearest even), for ops that take any floating-point dtype.
#pragma once

#include <cstdint>

#include "core/assert.h"
#include "core/dtype.h"

namespace ib::cpu {

inline bool is_float(DType t) {
  return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16;
}

inline float load_as_f32(const void* src, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<const float*>(src)[i];
    case DType::kBF16:
      return bf16_bits_to_f32(static_cast<const uint16_t*>(src)[i]);
    case DType::kF16:
      return f16_bits_to_f32(static_cast<const uint16_t*>(src)[i]);
    default:
      IB_ASSERT(false, "expected a floating-point dtype");
  }
  return 0.0f;
}

inline void store_from_f32(void* dst, DType dtype, int64_t i, float v) {
  switch (dtype) {
    case DType::kF32:
      static_cast<float*>(dst)[i] = v;
      break;
    case DType::kBF16:
      static_cast<uint16_t*>(dst)[i] = f32_to_bf16_bits(v);
      break;
    case DType::kF16:
      static_cast<uint16_t*>(dst)[i] = f32_to_f16_bits(v);
      break;
    default:
      IB_ASSERT(false, "expected a floating-point dtype");
  }
}

}  // namespace ib::cpu
