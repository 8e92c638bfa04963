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
//   up to accumulation order. 4-bit formats (issue 14) add zero points and groups.
#pragma once

#include <cstdint>

#include "backend/tensor.h"

namespace ib {

enum class WeightFormat { kDense, kFp8E4M3 };
inline const char* weight_format_name(WeightFormat format) {
  switch (format) {
    case WeightFormat::kDense:
      return "dense";
    case WeightFormat::kFp8E4M3:
      return "fp8";
  }
  return "?";
}

struct WeightRef {
  WeightFormat format = WeightFormat::kDense;
  Tensor data;         // (N, K): activation dtype (kDense) or fp8_e4m3 (kFp8E4M3)
  Tensor scales;       // quantized formats: (N) per channel or (N, K / group_size) per group
  Tensor zeros;        // asymmetric formats: shaped like scales; empty when symmetric
  int group_size = 0;  // K elements sharing a scale; 0: per channel (or dense)

  WeightRef() = default;
  // A dense tensor is a dense weight (implicit, so ops take either).
  WeightRef(Tensor dense) : data(dense) {}  // NOLINT(google-explicit-constructor)

  bool empty() const { return data.empty(); }
  int64_t rows() const { return data.dim(0); }  // N (output features)
  // The bytes the weight occupies as stored: data, scales and zero points.
  size_t bytes() const { return data.bytes() + scales.bytes() + zeros.bytes(); }
  // The dense (N, K) tensor; asserts the format is dense (ops of a backend that runs only dense
  // weights read it through this).
  const Tensor& dense() const {
    IB_ASSERT(format == WeightFormat::kDense, "a dense op was given a quantized weight");
    return data;
  }
};

}  // namespace ib
