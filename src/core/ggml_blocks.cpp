// ggml block formats (ggml_blocks.h): the type table, the element and 32-element types, and the
// dispatch.
#include "core/ggml_blocks.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "core/detail/ggml_block_codecs.h"
#include "core/dtype.h"

namespace ib {
namespace {

constexpr GgmlTypeInfo kSupported[] = {
    {GgmlType::kF32, "F32", 1, 4},       {GgmlType::kF16, "F16", 1, 2},
    {GgmlType::kQ4_0, "Q4_0", 32, 18},   {GgmlType::kQ8_0, "Q8_0", 32, 34},
    {GgmlType::kQ4_K, "Q4_K", 256, 144}, {GgmlType::kQ5_K, "Q5_K", 256, 176},
    {GgmlType::kQ6_K, "Q6_K", 256, 210}, {GgmlType::kBF16, "BF16", 1, 2},
};

// ggml's names by id ("" where an id was retired or never used).
constexpr std::array<std::string_view, 40> kIdNames = {
    "F32",   "F16",        "Q4_0",       "Q4_1",       "",         "",         "Q5_0",
    "Q5_1",  "Q8_0",       "Q8_1",       "Q2_K",       "Q3_K",     "Q4_K",     "Q5_K",
    "Q6_K",  "Q8_K",       "IQ2_XXS",    "IQ2_XS",     "IQ3_XXS",  "IQ1_S",    "IQ4_NL",
    "IQ3_S", "IQ2_S",      "IQ4_XS",     "I8",         "I16",      "I32",      "I64",
    "F64",   "IQ1_M",      "BF16",       "Q4_0_4_4",   "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",
    "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4"};

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::toupper(static_cast<unsigned char>(a[i])) !=
        std::toupper(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

}  // namespace

const GgmlTypeInfo& ggml_type_info(GgmlType type) {
  for (const auto& info : kSupported) {
    if (info.type == type) return info;
  }
  IB_ASSERT(false, "GgmlType without a table entry");
  return kSupported[0];
}

std::optional<GgmlType> ggml_type_of_id(uint32_t id) {
  for (const auto& info : kSupported) {
    if (static_cast<uint32_t>(info.type) == id) return info.type;
  }
  return std::nullopt;
}

std::string_view ggml_type_id_name(uint32_t id) {
  return id < kIdNames.size() ? kIdNames[id] : std::string_view();
}

std::optional<GgmlType> ggml_type_of_name(std::string_view name) {
  for (const auto& info : kSupported) {
    if (iequals(info.name, name)) return info.type;
  }
  return std::nullopt;
}

namespace detail {

uint16_t f16_at_least(float v) {
  uint16_t bits = f32_to_f16_bits(v);
  if (f16_bits_to_f32(bits) < v) ++bits;  // positive halves order like their bit patterns
  return bits;
}

float load_f16(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return f16_bits_to_f32(bits);
}

void store_f16(uint8_t* p, uint16_t bits) {
  std::memcpy(p, &bits, 2);
}

}  // namespace detail

namespace {

using detail::load_f16;
using detail::store_f16;

void dequantize_f32(const uint8_t* block, float* out) {
  std::memcpy(out, block, 4);
}
void quantize_f32(const float* x, uint8_t* block) {
  std::memcpy(block, x, 4);
}
void dequantize_f16(const uint8_t* block, float* out) {
  *out = load_f16(block);
}
void quantize_f16(const float* x, uint8_t* block) {
  store_f16(block, f32_to_f16_bits(*x));
}
void dequantize_bf16(const uint8_t* block, float* out) {
  uint16_t bits;
  std::memcpy(&bits, block, 2);
  *out = bf16_bits_to_f32(bits);
}
void quantize_bf16(const float* x, uint8_t* block) {
  const uint16_t bits = f32_to_bf16_bits(*x);
  std::memcpy(block, &bits, 2);
}

float abs_max(const float* x, int n) {
  float amax = 0;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  return amax;
}

// Q8_0: f16 d, int8 q[32]; x = q * d.
void dequantize_q8_0(const uint8_t* block, float* out) {
  const float d = load_f16(block);
  for (int i = 0; i < 32; ++i) out[i] = static_cast<float>(static_cast<int8_t>(block[2 + i])) * d;
}
void quantize_q8_0(const float* x, uint8_t* block) {
  const uint16_t d_bits = detail::f16_at_least(abs_max(x, 32) / 127.0f);
  const float d = f16_bits_to_f32(d_bits);
  store_f16(block, d_bits);
  for (int i = 0; i < 32; ++i) {
    const float q = d > 0 ? std::clamp(std::nearbyint(x[i] / d), -127.0f, 127.0f) : 0.0f;
    block[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(q));
  }
}

// Q4_0: f16 d, u8 qs[16]; x[j] = (low nibble of qs[j] - 8) * d, x[j + 16] from the high nibble.
void dequantize_q4_0(const uint8_t* block, float* out) {
  const float d = load_f16(block);
  for (int j = 0; j < 16; ++j) {
    out[j] = static_cast<float>((block[2 + j] & 0xF) - 8) * d;
    out[j + 16] = static_cast<float>((block[2 + j] >> 4) - 8) * d;
  }
}
void quantize_q4_0(const float* x, uint8_t* block) {
  // Symmetric in [-7, 7] so that the largest magnitude of either sign fits.
  const uint16_t d_bits = detail::f16_at_least(abs_max(x, 32) / 7.0f);
  const float d = f16_bits_to_f32(d_bits);
  store_f16(block, d_bits);
  auto code = [&](float v) {
    const float q = d > 0 ? std::clamp(std::nearbyint(v / d), -8.0f, 7.0f) : 0.0f;
    return static_cast<uint8_t>(static_cast<int>(q) + 8);
  };
  for (int j = 0; j < 16; ++j) {
    block[2 + j] = static_cast<uint8_t>(code(x[j]) | (code(x[j + 16]) << 4));
  }
}

struct Codec {
  GgmlType type;
  detail::DequantizeBlockFn dequantize;
  detail::QuantizeBlockFn quantize;
};

constexpr Codec kCodecs[] = {
    {GgmlType::kF32, dequantize_f32, quantize_f32},
    {GgmlType::kF16, dequantize_f16, quantize_f16},
    {GgmlType::kBF16, dequantize_bf16, quantize_bf16},
    {GgmlType::kQ8_0, dequantize_q8_0, quantize_q8_0},
    {GgmlType::kQ4_0, dequantize_q4_0, quantize_q4_0},
    {GgmlType::kQ4_K, detail::dequantize_q4_k, detail::quantize_q4_k},
    {GgmlType::kQ5_K, detail::dequantize_q5_k, detail::quantize_q5_k},
    {GgmlType::kQ6_K, detail::dequantize_q6_k, detail::quantize_q6_k},
};

const Codec& codec_of(GgmlType type) {
  for (const Codec& c : kCodecs) {
    if (c.type == type) return c;
  }
  IB_ASSERT(false, "GgmlType without a codec");
  return kCodecs[0];
}

// The number of blocks n elements make, or an error when n is not a whole number of them.
Result<size_t> block_count(const GgmlTypeInfo& info, size_t n, std::string_view verb) {
  const auto per_block = static_cast<size_t>(info.block_elems);
  if (n % per_block != 0) {
    return user_error(
        fmt::format("cannot {} {} elements as {}: not a multiple of its {}-element "
                    "blocks",
                    verb, n, info.name, per_block));
  }
  return n / per_block;
}

}  // namespace

Status dequantize_ggml(GgmlType type, std::string_view bytes, std::span<float> out) {
  const GgmlTypeInfo& info = ggml_type_info(type);
  IB_ASSIGN_OR_RETURN(const size_t blocks, block_count(info, out.size(), "dequantize"));
  const auto block_bytes = static_cast<size_t>(info.block_bytes);
  if (bytes.size() / block_bytes != blocks || bytes.size() % block_bytes != 0) {
    return user_error(fmt::format("cannot dequantize {} elements of {} from {} bytes: they take {}",
                                  out.size(), info.name, bytes.size(), blocks * block_bytes));
  }
  const Codec& codec = codec_of(type);
  const auto* src = reinterpret_cast<const uint8_t*>(bytes.data());
  for (size_t b = 0; b < blocks; ++b) {
    codec.dequantize(src + b * block_bytes, out.data() + b * static_cast<size_t>(info.block_elems));
  }
  return Ok{};
}

Result<std::string> quantize_ggml(GgmlType type, std::span<const float> x) {
  const GgmlTypeInfo& info = ggml_type_info(type);
  IB_ASSIGN_OR_RETURN(const size_t blocks, block_count(info, x.size(), "quantize"));
  for (size_t i = 0; i < x.size(); ++i) {
    if (!(std::fabs(x[i]) <= 65504.0f)) {
      return user_error(
          fmt::format("cannot quantize element {} ({}) as {}: values must be finite "
                      "and within the f16 range",
                      i, x[i], info.name));
    }
  }
  const auto block_bytes = static_cast<size_t>(info.block_bytes);
  std::string out(blocks * block_bytes, '\0');
  const Codec& codec = codec_of(type);
  auto* dst = reinterpret_cast<uint8_t*>(out.data());
  for (size_t b = 0; b < blocks; ++b) {
    codec.quantize(x.data() + b * static_cast<size_t>(info.block_elems), dst + b * block_bytes);
  }
  return out;
}

}  // namespace ib
