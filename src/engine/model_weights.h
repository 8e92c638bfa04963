// ModelWeights (engine-owned): a Llama-family model's weights in backend memory, fused for the forward pass
// (q/k/v into one matrix, gate/up into one), loaded from dummy values or safetensors files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"

namespace ib {

enum class LoadFormat { kAuto, kDummy, kSafetensors };

struct WeightOptions {
  LoadFormat format = LoadFormat::kAuto;  // auto: safetensors when path has them, else dummy
  std::string path;                       // model directory (config.json + *.safetensors)
  uint64_t seed = 0;                      // dummy weights
};

// Shapes (D = hidden, F = intermediate, Q = num_heads * head_dim, KV = num_kv_heads * head_dim):
struct LayerWeights {
  Tensor attn_norm;  // (D)
  Tensor wqkv;       // (Q + 2 KV, D): rows q, then k, then v (HF q_proj/k_proj/v_proj)
  Tensor bqkv;       // (Q + 2 KV) or empty when the model has no attention bias
  Tensor wo;         // (D, Q)
  Tensor ffn_norm;   // (D)
  Tensor w_gate_up;  // (2F, D): rows gate, then up
  Tensor w_down;     // (D, F)
};

struct ModelWeights {
  Tensor embed;       // (V, D)
  Tensor final_norm;  // (D)
  Tensor lm_head;     // (V, D); the same memory as embed when tied
  std::vector<LayerWeights> layers;
  std::vector<Buffer> storage;  // owns the memory behind the views above
  std::string description;      // e.g. "dummy (seed 0)" or "safetensors: DIR (2 files)"
  int64_t bytes = 0;
};

// Loads (or generates) the weights of config into backend memory at backend.activation_dtype().
// Dummy weights: uniform(-a, a) with a = sqrt(3 / fan_in) for matrices (unit-variance outputs),
// uniform(-1, 1) embeddings, norms 1.0, biases uniform(-0.1, 0.1); seeded and identical on every
// backend (counter-based). Errors: missing or mismatched tensors (named), unreadable files.
Result<ModelWeights> load_weights(const ModelConfig& config, const WeightOptions& options,
                                  Backend& backend);

// The rotary inverse frequencies (head_dim / 2), including Llama-3 rope scaling, as HF computes
// them (in double, then rounded to fp32).
std::vector<float> rope_inv_freq(const ModelConfig& config);

}  // namespace ib
