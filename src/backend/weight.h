// WeightRef: a matmul weight as the backend's ops read it — its storage format and the tensors
// that hold it. A backend says which formats it runs (Backend::supports_weight_format).
//
// Formats and what a matmul y = x @ w^T computes with them (the CPU backend is the oracle):
// - kDense: data (N, K) in the activation dtype; fp32 accumulation.
// - kFp8E4M3 (W8A8, vLLM's --quantization fp8): data (N, K) fp8_e4m3, scales f32 (N), one per
//   output channel (a per-tensor checkpoint scale repeated on every row), w = data * scales[n].
//   Activations are quantized per token, dynamically: s_m = max_k |x[m][k]| / 448 (1 for a zero
//   row), xq[m][k] = e4m3(x[m][k] * inv_m), inv_m = 448 / max_k |x[m][k]| (0 for a zero row), and
//   y[m][n] = (sum_k xq[m][k] * data[n][k]) * s_m * scales[n] (+ bias[n]), the sum exact in fp32
//   up to accumulation order.
// - kInt8W8A16 (--quantization int8): data (N, K) int8, scales f32 (N): per-channel symmetric,
//   w = data * scales[n], data in [-127, 127]. Activations stay in the activation dtype:
//   y[m][n] = (sum_k x[m][k] * data[n][k]) * scales[n] (+ bias[n]), fp32 sums.
// - kInt8W8A8 (--quantization int8-w8a8): the weights of kInt8W8A16; activations quantized per
//   token, dynamically and symmetrically: s_m = max_k |x[m][k]| / 127 (1 for a zero row),
//   xq[m][k] = clamp(rne(x[m][k] * inv_m), -127, 127), inv_m = 127 / max_k |x[m][k]| (0 for a
//   zero row), y[m][n] = (sum_k xq[m][k] * data[n][k]) * s_m * scales[n] (+ bias[n]), the sum
//   exact in int32.
// Static FP8 activation scales (kFp8E4M3 with input_scale > 0, a checkpoint's X.input_scale, vLLM's
//   activation_scheme "static"): xq = e4m3(x * inv) saturated, inv = 1 / s in fp32,
//   y = (sum_k xq * data) * s * scales[n].
// Static activation scales (kInt8W8A8 with input_scale > 0; calibrated, engine/calibration.h, or
// a checkpoint's X.input_scale, symmetric):
//   the activations are quantized with fixed parameters instead of per token (inv = 1 / s in
//   fp32). Symmetric: xq = clamp(rne(x * inv), -127, 127), y = (sum_k xq * data) * s * scales[n].
//   Asymmetric (the seed's uint8 affine scheme, zero point z in [0, 255]):
//   u = clamp(rne(x * inv) + z, 0, 255),
//   y = (sum_k (u - z) * data) * s * scales[n], summed exactly as sum (u - 128) * data -
//   (z - 128) * sum data, so that int8 tensor cores take u - 128; input_row_sums holds each
//   row's sum_k data[n][k] (QuantOps::weight_row_sums; the CUDA backend reads it, the CPU sums
//   itself).
// INT8 weights are quantized like FP8 ones: scales[n] = max_k |w[n][k]| / 127 (1 for a zero
// row), data[n][k] = clamp(rne(w[n][k] * inv_n), -127, 127), inv_n = 127 / max_k |w[n][k]|
// (0 for a zero row), in fp32.
//
// 4-bit formats (issue 14). Published checkpoints (AWQ, GPTQ, compressed-tensors W4A16,
// bitsandbytes NF4) are repacked at load into these layouts; the packing of each published
// layout lives with its loader (engine/int4_layouts.h). Activations stay in the activation dtype
// (W4A16), sums in fp32.
// - kInt4W4A16 (--quantization awq, gptq): data (N, K / 2) u8, two 4-bit codes per byte, code
//   of k = 2j in the low nibble of byte j, k = 2j + 1 in the high one; codes q in [0, 15].
//   group_size G (K % G == 0, G % 16 == 0); scales (N, K / G) f16 (as AWQ and GPTQ publish them);
//   zeros (N, K / G) u8, the zero point z in [0, 15] (symmetric formats store 8, GPTQ's sym).
//   w[n][k] = (q[n][k] - z[n][k / G]) * s[n][k / G], in fp32.
//   input_perm (K) i32, or empty: act-order (GPTQ desc_act), the weight's column k multiplies
//   input feature input_perm[k]: y[m][n] = sum_k x[m][input_perm[k]] * w[n][k] (+ bias[n]); the
//   loader sorts the columns by g_idx so that groups are contiguous.
//   Quantized at load (dummy weights, a dense checkpoint): per group of 128, round to nearest
//   even, in fp32, s rounded to f16 first and q computed with the rounded s. awq (AutoAWQ's
//   zero-point RTN): s = max(max - min, 1e-5) / 15, z = clamp(rne(-min / s), 0, 15),
//   q = clamp(rne(w / s) + z, 0, 15). gptq (symmetric): s = max |w| / 7.5 (1 for a zero group),
//   z = 8, q = clamp(rne(w / s) + 8, 0, 15); a group whose s rounds to f16 zero (max |w| below
//   7.5 * 2^-24) stores q = z, w = 0.
//   QuantOps::quantize_weight reads the method and the group from the WeightRef it fills:
//   asymmetric true is awq, false gptq (the matmul ignores it: it reads zeros), and group_size
//   (the allocator sets 128 for dummy weights and dense checkpoints; a published checkpoint's
//   own group, or K for per-channel scales, when it arrives already quantized).
// - kNf4 (--quantization nf4, bitsandbytes' 4-bit NormalFloat): data (N, K / 2) u8, two codes per
//   byte, k = 2j in the HIGH nibble of byte j (bitsandbytes' order), k = 2j + 1 in the low one;
//   blocks of group_size = 64 consecutive k (K % 64 == 0); scales (N, K / 64) f32, each block's
//   absmax (a checkpoint's double-quantized absmax already expanded: code2[qabsmax] * absmax2 +
//   offset, in fp32); zeros empty. w[n][k] = kNf4Levels[q[n][k]] * scales[n][k / 64] in fp32.
//   Quantized at load: absmax = max |w| over the block (1 for a zero block), q = the level
//   nearest w / absmax (ties to the lower code).
// - kGguf (--quantization gguf: a GGUF file's matmul weights as stored, in llama.cpp's block
//   formats, core/ggml_blocks.h): data (N, S) u8, row n holds K / block_elems blocks of its row
//   segment's type, S the longest row's bytes (shorter rows padded). `gguf` lists up to
//   kGgufMaxSegments segments, rows [begin[i], begin[i + 1]) of one type each (a fused q/k/v whose
//   sources differ: Q4_K_M's Q6_K v in some layers); types Q8_0, Q4_0, Q4_K, Q5_K, Q6_K. scales
//   and zeros empty. Arrives quantized only (no quantize_weight).
//   Activations are quantized per 32-element block of each token, as llama.cpp's CUDA kernels do
//   (q8_1), for every number of tokens: a = max |x| over the block, inv = 127 / a, xq =
//   clamp(rne(x * inv), -127, 127), d = a / 127 (a zero block: xq = 0, d = 0), x' = xq * d, in
//   fp32; y[m][n] = sum_k w[n][k] * x'[m][k] (+ bias[n]), w dequantized as ggml_blocks.h
//   defines, fp32 sums.
#pragma once

#include <algorithm>
#include <cstdint>

#include "backend/tensor.h"
#include "core/ggml_blocks.h"

namespace ib {

enum class WeightFormat { kDense, kFp8E4M3, kInt8W8A16, kInt8W8A8, kInt4W4A16, kNf4, kGguf };

// bitsandbytes' NF4 levels (the quantiles of N(0, 1) normalised to [-1, 1]), code 0..15.
inline constexpr float kNf4Levels[16] = {-1.0f,
                                         -0.6961928009986877f,
                                         -0.5250730514526367f,
                                         -0.39491748809814453f,
                                         -0.28444138169288635f,
                                         -0.18477343022823334f,
                                         -0.09105003625154495f,
                                         0.0f,
                                         0.07958029955625534f,
                                         0.16093020141124725f,
                                         0.24611230194568634f,
                                         0.33791524171829224f,
                                         0.44070982933044434f,
                                         0.5626170039176941f,
                                         0.7229568362236023f,
                                         1.0f};
// The --quantization value of each format ("dense" for none).
inline const char* weight_format_name(WeightFormat format) {
  switch (format) {
    case WeightFormat::kDense:
      return "dense";
    case WeightFormat::kFp8E4M3:
      return "fp8";
    case WeightFormat::kInt8W8A16:
      return "int8";
    case WeightFormat::kInt8W8A8:
      return "int8-w8a8";
    case WeightFormat::kInt4W4A16:
      return "w4a16";
    case WeightFormat::kNf4:
      return "nf4";
    case WeightFormat::kGguf:
      return "gguf";
  }
  return "?";
}
// Whether a format's data is quantized (every format but dense).
inline bool is_quantized(WeightFormat format) {
  return format != WeightFormat::kDense;
}
// Whether a format is 8-bit: (N, K) one byte per weight with f32 per-row scales.
inline bool is_8bit(WeightFormat format) {
  return format == WeightFormat::kFp8E4M3 || format == WeightFormat::kInt8W8A16 ||
         format == WeightFormat::kInt8W8A8;
}
// Whether a format is 4-bit: (N, K / 2) u8, two codes per byte, grouped scales.
inline bool is_4bit(WeightFormat format) {
  return format == WeightFormat::kInt4W4A16 || format == WeightFormat::kNf4;
}
// The element type of a quantized format's data (kDense: none, the activation dtype).
inline DType quantized_data_dtype(WeightFormat format) {
  if (is_4bit(format) || format == WeightFormat::kGguf) return DType::kU8;
  return format == WeightFormat::kFp8E4M3 ? DType::kF8E4M3 : DType::kI8;
}
// Whether the format quantizes activations per token before the matmul (W8A8).
inline bool quantizes_activations(WeightFormat format) {
  return format == WeightFormat::kFp8E4M3 || format == WeightFormat::kInt8W8A8;
}

// The ggml types a kGguf weight's rows can hold (block-quantized ones: the float types load dense).
inline bool is_gguf_block_type(GgmlType type) {
  return type == GgmlType::kQ8_0 || type == GgmlType::kQ4_0 || type == GgmlType::kQ4_K ||
         type == GgmlType::kQ5_K || type == GgmlType::kQ6_K;
}
// The bytes of a row of cols elements in type (cols a whole number of blocks).
inline int64_t gguf_row_bytes(GgmlType type, int64_t cols) {
  const GgmlTypeInfo& info = ggml_type_info(type);
  return cols / info.block_elems * info.block_bytes;
}

// kGguf's row segments (above).
inline constexpr int kGgufMaxSegments = 4;
struct GgufRows {
  int count = 0;
  int64_t begin[kGgufMaxSegments] = {};
  GgmlType type[kGgufMaxSegments] = {};
  int64_t cols = 0;  // K
  // Rows from `row` on hold type: a new segment unless the last one has that type. False (and
  // nothing added) when the segments are full.
  bool append(int64_t row, GgmlType t) {
    if (count > 0 && type[count - 1] == t) return true;
    if (count == kGgufMaxSegments) return false;
    begin[count] = row;
    type[count++] = t;
    return true;
  }
  // The segment of row n.
  int segment_of(int64_t n) const {
    int s = 0;
    while (s + 1 < count && n >= begin[s + 1]) ++s;
    return s;
  }
};

// The bytes of a kGguf weight's rows in data: its longest row's, rounded up to 16.
inline int64_t gguf_row_stride(const GgufRows& rows) {
  int64_t longest = 0;
  for (int s = 0; s < rows.count; ++s)
    longest = std::max(longest, gguf_row_bytes(rows.type[s], rows.cols));
  return (longest + 15) / 16 * 16;
}

struct WeightRef {
  WeightFormat format = WeightFormat::kDense;
  Tensor data;         // (N, K): activation dtype (kDense), else quantized_data_dtype(format)
  Tensor scales;       // quantized formats: (N) per channel or (N, K / group_size) per group
  Tensor zeros;        // asymmetric formats: shaped like scales; empty when symmetric
  int group_size = 0;  // K elements sharing a scale; 0: per channel (or dense)
  // kInt8W8A8's and kFp8E4M3's static activation quantization (above); input_scale 0: per
  // token, dynamic.
  float input_scale = 0.0f;
  int32_t input_zero_point = 0;  // asymmetric only, in [0, 255]
  bool input_asymmetric = false;
  Tensor input_row_sums;  // asymmetric static: (N) int32, sum_k data[n][k]
  Tensor input_perm;      // kInt4W4A16 act-order: (K) int32, empty otherwise
  // kInt4W4A16's load-time quantization (above): true awq (zero-point RTN), false gptq
  // (symmetric, z = 8). Read by quantize_weight only.
  bool asymmetric = false;
  GgufRows gguf;  // kGguf only

  WeightRef() = default;
  // A dense tensor is a dense weight (implicit, so ops take either).
  WeightRef(Tensor dense) : data(dense) {}  // NOLINT(google-explicit-constructor)

  bool empty() const { return data.empty(); }
  int64_t rows() const { return data.dim(0); }  // N (output features)
  // K (input features): data's columns, twice them for the 4-bit formats, gguf.cols for kGguf.
  int64_t cols() const {
    if (format == WeightFormat::kGguf) return gguf.cols;
    return is_4bit(format) ? 2 * data.dim(1) : data.dim(1);
  }
  // Whether data and scales have the format's layout: 8-bit (N, K) of quantized_data_dtype and
  // f32 (N); 4-bit as described above.
  bool quantized_layout_ok() const {
    if (!is_quantized(format) || data.rank != 2 || data.dtype != quantized_data_dtype(format))
      return false;
    if (is_8bit(format)) return scales.dtype == DType::kF32 && scales.numel() == data.dim(0);
    if (format == WeightFormat::kGguf) return gguf_layout_ok();
    const int64_t k = cols();
    if (group_size <= 0 || k % group_size != 0 || scales.rank != 2 || scales.dim(0) != rows() ||
        scales.dim(1) != k / group_size)
      return false;
    if (!input_perm.empty() && (input_perm.dtype != DType::kI32 || input_perm.numel() != k))
      return false;
    if (format == WeightFormat::kNf4)
      return scales.dtype == DType::kF32 && zeros.empty() && input_perm.empty();
    return scales.dtype == DType::kF16 && zeros.dtype == DType::kU8 && zeros.rank == 2 &&
           zeros.dim(0) == scales.dim(0) && zeros.dim(1) == scales.dim(1);
  }
  bool gguf_layout_ok() const {
    if (gguf.count < 1 || gguf.count > kGgufMaxSegments || gguf.begin[0] != 0 || gguf.cols <= 0)
      return false;
    for (int s = 0; s < gguf.count; ++s) {
      const int64_t end = s + 1 < gguf.count ? gguf.begin[s + 1] : rows();
      if (!is_gguf_block_type(gguf.type[s]) || end <= gguf.begin[s] ||
          gguf.cols % ggml_type_info(gguf.type[s]).block_elems != 0 ||
          gguf_row_bytes(gguf.type[s], gguf.cols) > data.dim(1))
        return false;
    }
    return scales.empty() && zeros.empty();
  }
  // The bytes the weight occupies as stored: data, scales and zero points.
  size_t bytes() const {
    return data.bytes() + scales.bytes() + zeros.bytes() + input_row_sums.bytes() +
           input_perm.bytes();
  }
  // The dense (N, K) tensor; asserts the format is dense (ops of a backend that runs only dense
  // weights read it through this).
  const Tensor& dense() const {
    IB_ASSERT(format == WeightFormat::kDense, "a dense op was given a quantized weight");
    return data;
  }
};

}  // namespace ib
