// ggml's block formats, CPU reference (part of the gguf.h front door): dequantization, the oracle
// of every GGUF kernel, and a round-to-nearest quantizer per type for tests and dummy files.
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

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "model/gguf_file.h"

namespace ib {

// Dequantizes out.size() elements stored in type's layout. User error (naming type) unless
// out.size() is a whole number of blocks and bytes holds exactly those blocks.
Status dequantize_ggml(GgmlType type, std::string_view bytes, std::span<float> out);

// Quantizes x into type's layout, round to nearest with scales chosen so that no element clips:
// per element |x - dequantized| <= step / 2, where step is the block's (Q8_0, Q4_0: d) or
// sub-block's (K-quants: d * sc) quantization step. User error unless x is a whole number of
// blocks of finite values within the f16 range (|x| <= 65504).
Result<std::string> quantize_ggml(GgmlType type, std::span<const float> x);

// The named tensor of a mapped file, dequantized to f32 (numel elements, ne[0] fastest). User
// error naming the tensor and the file when it is absent.
Result<std::vector<float>> read_gguf_tensor_f32(const GgufModelFile& file, std::string_view name);

}  // namespace ib
