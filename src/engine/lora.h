// LoRA adapters as PEFT saves them (adapter_config.json + adapter_model.safetensors), read into
// host memory and checked against the base model, and folded into dense weights (--merge-lora).
// The engine serves them unmerged from device slots (engine.h: Engine::add_lora), the products
// computed by the backend's LoraOps (backend/ops.h).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "engine/model_weights.h"
#include "model/config.h"

namespace ib {

// The projections an adapter may target, by PEFT's module names; q/k/v map to row ranges of the
// engine's fused qkv, gate/up to those of gate_up.
enum class LoraTarget { kQ, kK, kV, kO, kGate, kUp, kDown };
inline constexpr int kNumLoraTargets = 7;
std::string_view lora_target_name(LoraTarget target);  // "q_proj", ...

// A target's shapes in a model: in_features (K) and out_features (N), and where its rows start
// in the engine's fused weight (q 0, k Q, v Q + KV; gate 0, up F; o and down 0).
struct LoraTargetShape {
  int64_t in = 0;
  int64_t out = 0;
  int64_t row_offset = 0;
};
LoraTargetShape lora_target_shape(const ModelConfig& config, LoraTarget target);

// One adapted projection: A (rank, in) and B (out, rank), fp32 on the host; empty when the
// adapter does not target it.
struct LoraMatrices {
  std::vector<float> a;  // (rank, in)
  std::vector<float> b;  // (out, rank)
  bool empty() const { return a.empty(); }
};

struct LoraAdapter {
  std::string path;
  int rank = 0;
  double alpha = 0;
  bool use_rslora = false;
  float scale = 0;  // alpha / rank, or alpha / sqrt(rank) with use_rslora (PEFT's scaling)
  std::vector<std::string> target_modules;  // as the config names them, sorted
  std::string base_model;                   // base_model_name_or_path, as recorded
  // (num_layers) x kNumLoraTargets
  std::vector<std::array<LoraMatrices, kNumLoraTargets>> layers;
  int64_t bytes() const;  // of A and B at fp32
};

// Reads a PEFT LoRA adapter directory for base. User errors (each names the problem and the fix):
// a missing or malformed file; peft_type other than LORA; bias other than "none"; a target outside
// q/k/v/o/gate/up/down_proj; r above max_lora_rank; a tensor whose shape is not the base model's
// (named with both shapes: an adapter for another base); tensors missing for a target, or for a
// layer the model does not have. modules_to_save (whole replaced modules, e.g. lm_head) is
// refused: serving it would need a copy of those modules per adapter. layers_to_transform /
// layers_pattern are honoured by reading the layers the file holds.
Result<LoraAdapter> load_lora_adapter(const std::string& dir, const ModelConfig& base,
                                      int max_lora_rank);

// Parses one --lora-modules item, "name=path" (vLLM's form); a user error otherwise.
struct LoraModuleSpec {
  std::string name;
  std::string path;
};
Result<LoraModuleSpec> parse_lora_module(std::string_view item);

// --merge-lora: W += scale * B A for every projection the adapter targets, on the dense weights
// (rounded once into the backend's dtype); quantized matmul weights are refused (the fold would
// need a requantization that changes the base). Gains are not folded at this point (called
// before the runner exists).
Status merge_lora(const ModelConfig& config, const LoraAdapter& adapter, ModelWeights& weights,
                  Backend& backend);

}  // namespace ib
