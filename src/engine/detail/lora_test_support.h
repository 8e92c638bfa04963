// Test support (engine tests only): random LoRA adapters written as PEFT saves them
// (adapter_config.json + adapter_model.safetensors with base_model.model.model.layers.N...
// lora_A / lora_B names), from module names written here, independently of engine/lora.cpp.
#pragma once

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/rng.h"
#include "model/config.h"
#include "model/safetensors.h"

namespace ib::testing {

// One adapted module's matrices, host fp32: a (r, in), b (out, r).
struct PeftModule {
  std::vector<float> a, b;
};

struct PeftAdapter {
  int r = 4;
  double alpha = 8;
  bool use_rslora = false;
  std::vector<std::string> targets;
  // "model.layers.N.self_attn.q_proj" -> matrices
  std::map<std::string, PeftModule> modules;
  nlohmann::json extra_config = nlohmann::json::object();  // merged into adapter_config.json
  double scale() const { return use_rslora ? alpha / std::sqrt(double(r)) : alpha / r; }
};

// (in, out) of a module as transformers' LlamaForCausalLM builds it.
inline std::pair<int64_t, int64_t> module_shape(const ModelConfig& c, const std::string& target) {
  const int64_t d = c.hidden_size, q = int64_t{c.num_heads} * c.head_dim;
  const int64_t kv = int64_t{c.num_kv_heads} * c.head_dim, f = c.intermediate_size;
  if (target == "q_proj") return {d, q};
  if (target == "k_proj" || target == "v_proj") return {d, kv};
  if (target == "o_proj") return {q, d};
  if (target == "gate_proj" || target == "up_proj") return {d, f};
  return {f, d};  // down_proj
}

inline std::string module_path(int layer, const std::string& target) {
  const bool attn =
      target == "q_proj" || target == "k_proj" || target == "v_proj" || target == "o_proj";
  return "model.layers." + std::to_string(layer) + (attn ? ".self_attn." : ".mlp.") + target;
}

// Random A and B (uniform in +-amplitude) for every layer and target.
inline PeftAdapter random_adapter(const ModelConfig& c, int r, double alpha,
                                  std::vector<std::string> targets, uint64_t seed,
                                  float amplitude = 0.2f) {
  PeftAdapter p;
  p.r = r;
  p.alpha = alpha;
  p.targets = std::move(targets);
  Rng rng(seed);
  auto fill = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = amplitude * (2.0f * static_cast<float>(rng.uniform()) - 1.0f);
    return v;
  };
  for (int l = 0; l < c.num_layers; ++l) {
    for (const std::string& t : p.targets) {
      const auto [in, out] = module_shape(c, t);
      p.modules[module_path(l, t)] = PeftModule{fill(r * in), fill(out * r)};
    }
  }
  return p;
}

inline void write_peft_adapter(const std::filesystem::path& dir, const ModelConfig& c,
                               const PeftAdapter& p) {
  std::filesystem::create_directories(dir);
  nlohmann::json cfg = {{"peft_type", "LORA"},
                        {"r", p.r},
                        {"lora_alpha", p.alpha},
                        {"target_modules", p.targets},
                        {"bias", "none"},
                        {"use_rslora", p.use_rslora},
                        {"modules_to_save", nullptr},
                        {"base_model_name_or_path", c.name},
                        {"task_type", "CAUSAL_LM"},
                        {"lora_dropout", 0.0}};
  cfg.update(p.extra_config);
  std::ofstream(dir / "adapter_config.json") << cfg.dump(2);
  std::vector<SafetensorsWriteTensor> tensors;
  auto bytes = [](const std::vector<float>& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  };
  for (const auto& [path, m] : p.modules) {
    const int64_t in = static_cast<int64_t>(m.a.size()) / p.r;
    const int64_t out = static_cast<int64_t>(m.b.size()) / p.r;
    tensors.push_back(
        {"base_model.model." + path + ".lora_A.weight", DType::kF32, {p.r, in}, bytes(m.a)});
    tensors.push_back(
        {"base_model.model." + path + ".lora_B.weight", DType::kF32, {out, p.r}, bytes(m.b)});
  }
  const Status s = write_safetensors((dir / "adapter_model.safetensors").string(), tensors);
  IB_ASSERT(s.ok(), "write_safetensors failed in a test");
}

inline const std::vector<std::string>& all_targets() {
  static const std::vector<std::string> t = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                             "gate_proj", "up_proj", "down_proj"};
  return t;
}

}  // namespace ib::testing
