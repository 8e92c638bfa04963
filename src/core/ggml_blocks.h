// ggml's block formats (llama.cpp's tensor types, as GGUF files store them): the type ids, each
// type's block, the CPU reference dequantization (the oracle of every GGUF kernel: the CPU
// backend's kGguf matmul, backend/weight.h, and the CUDA kernels) and a round-to-nearest quantizer
// per type for tests and dummy files.
//
// Per block of the row (ne[0]); f16 is IEEE half, all little-endian:
//   F32 / F16 / BF16  one element.
//   Q8_0  32 elements, 34 bytes: f16 d, int8 q[32];              x = q * d
//   Q4_0  32 elements, 18 bytes: f16 d, u8 qs[16];                x = (nibble - 8) * d, element j
//         in qs[j]'s low nibble and element j + 16 in its high nibble
//   Q4_K  256 elements, 144 bytes: f16 d, f16 dmin, u8 scales[12], u8 qs[128]; eight sub-blocks of
//         32 with 6-bit scale sc and min m packed in scales; x = d * sc * q - dmin * m, q 4 bits:
//         each 64 elements take 32 bytes of qs, the first 32 in the low nibbles
//   Q5_K  256 elements, 176 bytes: as Q4_K plus u8 qh[32] (before qs): q 5 bits, its high bit for
//         the i-th 32 elements is bit i of qh[l]
//   Q6_K  256 elements, 210 bytes: u8 ql[128], u8 qh[64], int8 scales[16], f16 d; sixteen
//         sub-blocks of 16; x = d * scale * (q - 32), q 6 bits (4 in ql, 2 in qh)
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/result.h"

namespace ib {

// ggml's tensor type ids, as stored in the file: the types inferbench reads. Other ids are refused
// with their name (ggml_type_id_name) or, when ggml has none, their number.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
};

// A type's block: block_elems consecutive elements of a row (ne[0]) stored in block_bytes.
struct GgmlTypeInfo {
  GgmlType type;
  std::string_view name;  // "Q4_K"
  int64_t block_elems;
  int64_t block_bytes;
};
const GgmlTypeInfo& ggml_type_info(GgmlType type);
// The supported type of a file's id, or nullopt.
std::optional<GgmlType> ggml_type_of_id(uint32_t id);
// ggml's name of any type id ("Q4_1", "IQ2_XXS"), or "" when ggml has none.
std::string_view ggml_type_id_name(uint32_t id);
// A supported type from its name ("q4_k", "Q8_0"; case-insensitive).
std::optional<GgmlType> ggml_type_of_name(std::string_view name);

// Dequantizes out.size() elements stored in type's layout. User error (naming type) unless
// out.size() is a whole number of blocks and bytes holds exactly those blocks.
Status dequantize_ggml(GgmlType type, std::string_view bytes, std::span<float> out);

// Quantizes x into type's layout, round to nearest with scales chosen so that no element clips:
// per element |x - dequantized| <= step / 2, where step is the block's (Q8_0, Q4_0: d) or
// sub-block's (K-quants: d * sc) quantization step. User error unless x is a whole number of
// blocks of finite values within the f16 range (|x| <= 65504).
Result<std::string> quantize_ggml(GgmlType type, std::span<const float> x);

}  // namespace ib
