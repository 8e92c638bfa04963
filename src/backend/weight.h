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
// (0 for a zero row), in fp32. 4-bit formats (issue 14) add zero points and groups.
#pragma once

#include <cstdint>

#include "backend/tensor.h"

namespace ib {

enum class WeightFormat { kDense, kFp8E4M3, kInt8W8A16, kInt8W8A8 };
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
  }
  return "?";
}
// The element type of a quantized format's data (kDense: none, the activation dtype).
inline DType quantized_data_dtype(WeightFormat format) {
  return format == WeightFormat::kFp8E4M3 ? DType::kF8E4M3 : DType::kI8;
}
// Whether a format's data is 1-byte quantized with f32 per-row scales (every format but dense).
inline bool is_quantized(WeightFormat format) {
  return format != WeightFormat::kDense;
}
// Whether the format quantizes activations per token before the matmul (W8A8).
inline bool quantizes_activations(WeightFormat format) {
  return format == WeightFormat::kFp8E4M3 || format == WeightFormat::kInt8W8A8;
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

  WeightRef() = default;
  // A dense tensor is a dense weight (implicit, so ops take either).
  WeightRef(Tensor dense) : data(dense) {}  // NOLINT(google-explicit-constructor)

  bool empty() const { return data.empty(); }
  int64_t rows() const { return data.dim(0); }  // N (output features)
  // Whether data and scales have the format's layout: (N, K) of quantized_data_dtype, f32 (N).
  bool quantized_layout_ok() const {
    return is_quantized(format) && data.rank == 2 && data.dtype == quantized_data_dtype(format) &&
           scales.dtype == DType::kF32 && scales.numel() == data.dim(0);
  }
  // The bytes the weight occupies as stored: data, scales and zero points.
  size_t bytes() const {
    return data.bytes() + scales.bytes() + zeros.bytes() + input_row_sums.bytes();
  }
  // The dense (N, K) tensor; asserts the format is dense (ops of a backend that runs only dense
  // weights read it through this).
  const Tensor& dense() const {
    IB_ASSERT(format == WeightFormat::kDense, "a dense op was given a quantized weight");
    return data;
  }
};

}  // namespace ib
