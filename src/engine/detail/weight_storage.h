// Internal to engine/: allocation of a model's weight tensors, the staging of quantized matmul
// weights, and the safetensors loader, shared by load_weights() (model_weights.cpp).
#pragma once

#include <string>

#include "engine/model_weights.h"

namespace ib::detail {

// Allocates every weight tensor of config, uninitialised: dense ones at
// backend.activation_dtype(), each layer's matmul weights in layout (8-bit: data (N, K) and
// scales (N); 4-bit: backend/weight.h's tensors with the layout's group, WeightRef::asymmetric
// set), after checking that 4-bit groups tile every K and the total, with the staging scratch
// quantized weights need, against the backend's free memory and memory limit.
Result<ModelWeights> allocate_weights(const ModelConfig& config, const MatmulLayout& layout,
                                      Backend& backend);

// Where a loader writes a matmul weight's dense values (N, K) in the activation dtype: the
// weight's own data when it is dense, else one scratch buffer (tag kWorkspace) sized for the
// largest quantized weight, which finish() quantizes into the weight. One weight at a time:
// every dense_for() of a quantized weight returns the same memory. The scratch is freed with the
// staging; the caller synchronizes the backend first.
class DenseStaging {
 public:
  // For config's matmul weights in format; no scratch when they are dense.
  static Result<DenseStaging> create(const ModelConfig& config, WeightFormat format,
                                     Backend& backend);
  Tensor dense_for(const WeightRef& weight) const;
  // Quantizes dense (from dense_for(weight)) into weight; nothing for a dense weight.
  void finish(const Tensor& dense, const WeightRef& weight);

 private:
  explicit DenseStaging(Backend& backend) : backend_(&backend) {}
  Backend* backend_;
  Buffer scratch_;
};

// Fills allocated weights from an HF safetensors checkpoint (file or directory); quantized
// matmul weights go through staging.
Status load_safetensors(const ModelConfig& config, const std::string& path, Backend& backend,
                        DenseStaging& staging, ModelWeights& weights);

}  // namespace ib::detail
