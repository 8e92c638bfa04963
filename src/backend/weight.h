// WeightRef: a matmul weight as the backend's ops read it — its storage format and the tensors
// that hold it. Dense bf16/fp16/fp32 is the one format today; 8-bit and 4-bit formats (issues 13,
// 14) add a WeightFormat, their packed data with scales and zero points, and the ops that read
// them. A backend says which formats it runs (Backend::supports_weight_format).
#pragma once

#include <cstdint>

#include "backend/tensor.h"

namespace ib {

enum class WeightFormat { kDense };
inline const char* weight_format_name(WeightFormat format) {
  switch (format) {
    case WeightFormat::kDense:
      return "dense";
  }
  return "?";
}

struct WeightRef {
  WeightFormat format = WeightFormat::kDense;
  Tensor data;         // kDense: (N, K) in the activation dtype
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
