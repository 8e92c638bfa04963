// Element types of tensors and checkpoints, with conversions usable on host and device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace ib {

// kF8E4M3: OCP FP8 E4M3 ("E4M3FN": bias 7, no infinities, max 448), as torch.float8_e4m3fn
// and safetensors' F8_E4M3 store it; quantized weights and activations. kI8: two's-complement
// int8 (safetensors' I8), INT8 quantized weights and activations.
enum class DType : uint8_t { kF32, kBF16, kF16, kI32, kI64, kU8, kF8E4M3, kI8 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kBF16:
      return 2;
    case DType::kF16:
      return 2;
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
    case DType::kU8:
      return 1;
    case DType::kF8E4M3:
      return 1;
    case DType::kI8:
      return 1;
  }
  return 0;
}

// "fp32", "bf16", "fp16", "int32", "int64", "uint8", "fp8_e4m3", "int8"
std::string_view dtype_name(DType t);
// Accepts fp32/float32/f32, bf16/bfloat16, fp16/float16/half/f16.
std::optional<DType> parse_float_dtype(std::string_view s);

// bf16 <-> f32 (round to nearest even; NaN stays NaN).
inline uint16_t f32_to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_bits_to_f32(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// Rounds f32 to the nearest bf16 value, returned as f32.
inline float round_to_bf16(float f) {
  return bf16_bits_to_f32(f32_to_bf16_bits(f));
}

// IEEE half <-> f32 (round to nearest even).
float f16_bits_to_f32(uint16_t h);
uint16_t f32_to_f16_bits(float f);

// OCP FP8 E4M3 (OFP8 specification, "E4M3"): sign, 4 exponent bits (bias 7), 3 mantissa bits.
// Exponent 0 is subnormal (m / 8 * 2^-6); S.1111.111 is NaN; there is no infinity, so the largest
// finite magnitude is 1.75 * 2^8 = 448.
inline constexpr float kF8E4M3Max = 448.0f;
float f8e4m3_bits_to_f32(uint8_t b);
// Round to nearest even; magnitudes beyond 448 saturate to +-448 (the "satfinite" conversion
// every quantizer uses); NaN -> 0x7f.
uint8_t f32_to_f8e4m3_bits(float f);

}  // namespace ib
