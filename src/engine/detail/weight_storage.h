// Internal to engine/: allocation of a model's weight tensors and the safetensors loader, shared
// by load_weights() (model_weights.cpp).
#pragma once

#include <string>

#include "engine/model_weights.h"

namespace ib::detail {

// Allocates every weight tensor of config at backend.activation_dtype(), uninitialised, after
// checking the total against the backend's free memory and memory limit.
Result<ModelWeights> allocate_weights(const ModelConfig& config, Backend& backend);

// Fills allocated weights from an HF safetensors checkpoint (file or directory).
Status load_safetensors(const ModelConfig& config, const std::string& path, Backend& backend,
                        ModelWeights& weights);

}  // namespace ib::detail
