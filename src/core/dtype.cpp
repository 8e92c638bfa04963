#include "core/dtype.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ib {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "fp32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "fp16";
    case DType::kI32:
      return "int32";
    case DType::kI64:
      return "int64";
    case DType::kU8:
      return "uint8";
    case DType::kF8E4M3:
      return "fp8_e4m3";
    case DType::kI8:
      return "int8";
  }
  return "?";
}

std::optional<DType> parse_float_dtype(std::string_view s) {
  if (s == "fp32" || s == "float32" || s == "f32" || s == "float") return DType::kF32;
  if (s == "bf16" || s == "bfloat16") return DType::kBF16;
  if (s == "fp16" || s == "float16" || s == "f16" || s == "half") return DType::kF16;
  return std::nullopt;
}

float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: value = mant * 2^-24
      const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
      std::memcpy(&u, &v, 4);
      u |= sign;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const float a = std::fabs(f);
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7e00u);
  if (a >= 65520.0f) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (a < 6.103515625e-05f) {  // subnormal or zero: round a / 2^-24 to nearest even
    const float scaled = a * 16777216.0f;
    const auto m = static_cast<uint16_t>(std::nearbyint(scaled));
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t ua;
  std::memcpy(&ua, &a, 4);
  uint32_t exp = (ua >> 23) - 112u;
  uint32_t mant = ua & 0x7fffffu;
  // Round to nearest even on the 13 dropped bits.
  uint32_t half = (exp << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

float f8e4m3_bits_to_f32(uint8_t b) {
  const float sign = (b & 0x80u) ? -1.0f : 1.0f;
  const int exp = (b >> 3) & 0xf;
  const int mant = b & 0x7;
  if (exp == 15 && mant == 7) return std::numeric_limits<float>::quiet_NaN();
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant) / 8.0f, -6);
  return sign * std::ldexp(1.0f + static_cast<float>(mant) / 8.0f, exp - 7);
}

uint8_t f32_to_f8e4m3_bits(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  const float a = std::fabs(f);
  if (a >= kF8E4M3Max) return static_cast<uint8_t>(sign | 0x7e);  // 448 = S.1111.110
  if (a == 0.0f) return sign;
  // The spacing of representable values at a's binade: 2^(e - 3) for normals (e >= -6), 2^-9
  // for subnormals. a / spacing, rounded to nearest even, counts those steps exactly.
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1): the binade is 2^(e - 1)
  const int binade = std::max(e - 1, -6);
  const float steps = std::nearbyint(std::ldexp(a, 3 - binade));  // in units of 2^(binade - 3)
  // steps is in [0, 16]; 16 carries into the next binade (or from subnormal to normal).
  const int q = static_cast<int>(steps);
  if (binade == -6 && q < 8) return static_cast<uint8_t>(sign | q);  // subnormal (or zero)
  int exp_field = binade + 7;
  int mant = q - 8;
  if (mant == 8) {
    ++exp_field;
    mant = 0;
  }
  if (exp_field > 15 || (exp_field == 15 && mant == 7)) return static_cast<uint8_t>(sign | 0x7e);
  return static_cast<uint8_t>(sign | exp_field << 3 | mant);
}

}  // namespace ib
