// PEFT LoRA adapters: adapter_config.json and adapter_model.safetensors read into host fp32,
// every tensor checked against the base model's shapes; and --lora-modules items.
#include "engine/lora.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/fs.h"
#include "model/safetensors.h"

namespace ib {
namespace {

constexpr std::string_view kTargetNames[kNumLoraTargets] = {
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

std::string all_target_names() {
  std::string out;
  for (std::string_view n : kTargetNames) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

int target_index(std::string_view name) {
  for (int i = 0; i < kNumLoraTargets; ++i) {
    if (kTargetNames[i] == name) return i;
  }
  return -1;
}

// "base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight" -> layer N, target, A or B.
struct TensorName {
  int layer = -1;
  int target = -1;
  bool is_a = false;
};
bool parse_tensor_name(const std::string& name, TensorName& out) {
  static const std::string kPrefix = "base_model.model.model.layers.";
  if (name.rfind(kPrefix, 0) != 0) return false;
  size_t at = kPrefix.size();
  const size_t dot = name.find('.', at);
  if (dot == std::string::npos || dot == at) return false;
  const std::string layer = name.substr(at, dot - at);
  if (!std::all_of(layer.begin(), layer.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      layer.size() > 6) {
    return false;
  }
  out.layer = std::stoi(layer);
  std::string rest = name.substr(dot + 1);  // "self_attn.q_proj.lora_A.weight"
  for (const char* module : {"self_attn.", "mlp."}) {
    if (rest.rfind(module, 0) == 0) {
      rest = rest.substr(std::strlen(module));
      const size_t end = rest.find('.');
      if (end == std::string::npos) return false;
      out.target = target_index(rest.substr(0, end));
      const std::string tail = rest.substr(end);
      if (tail != ".lora_A.weight" && tail != ".lora_B.weight") return false;
      out.is_a = tail == ".lora_A.weight";
      const bool attn = std::strcmp(module, "self_attn.") == 0;
      return out.target >= 0 && attn == (out.target <= 3);
    }
  }
  return false;
}

std::vector<float> to_f32(const HostTensorRef& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  const auto* bytes = static_cast<const char*>(t.data);
  for (size_t i = 0; i < out.size(); ++i) {
    if (t.dtype == DType::kF32) {
      std::memcpy(&out[i], bytes + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, bytes + 2 * i, 2);
      out[i] = t.dtype == DType::kBF16 ? bf16_bits_to_f32(h) : f16_bits_to_f32(h);
    }
  }
  return out;
}

Error refuse(const std::string& dir, const std::string& what) {
  return user_error("LoRA adapter " + dir + ": " + what);
}

}  // namespace

std::string_view lora_target_name(LoraTarget target) {
  return kTargetNames[static_cast<int>(target)];
}

LoraTargetShape lora_target_shape(const ModelConfig& c, LoraTarget target) {
  const int64_t d = c.hidden_size, q = int64_t{c.num_heads} * c.head_dim;
  const int64_t kv = int64_t{c.num_kv_heads} * c.head_dim, f = c.intermediate_size;
  switch (target) {
    case LoraTarget::kQ:
      return {d, q, 0};
    case LoraTarget::kK:
      return {d, kv, q};
    case LoraTarget::kV:
      return {d, kv, q + kv};
    case LoraTarget::kO:
      return {q, d, 0};
    case LoraTarget::kGate:
      return {d, f, 0};
    case LoraTarget::kUp:
      return {d, f, f};
    case LoraTarget::kDown:
      return {f, d, 0};
  }
  return {};
}

int64_t LoraAdapter::bytes() const {
  int64_t total = 0;
  for (const auto& layer : layers) {
    for (const LoraMatrices& m : layer) total += static_cast<int64_t>(m.a.size() + m.b.size()) * 4;
  }
  return total;
}

Result<LoraAdapter> load_lora_adapter(const std::string& dir, const ModelConfig& base,
                                      int max_lora_rank) {
  namespace fs = std::filesystem;
  const fs::path config_path = fs::path(dir) / "adapter_config.json";
  const fs::path weights_path = fs::path(dir) / "adapter_model.safetensors";
  if (!fs::is_directory(dir)) {
    return refuse(dir,
                  "not a directory; give the directory PEFT's save_pretrained wrote "
                  "(adapter_config.json and adapter_model.safetensors)");
  }
  if (!fs::exists(config_path)) {
    return refuse(dir, "no adapter_config.json; give the directory PEFT's save_pretrained wrote");
  }
  if (!fs::exists(weights_path)) {
    return refuse(dir,
                  "no adapter_model.safetensors (a .bin adapter is not read); save the "
                  "adapter with safe_serialization=True (PEFT's default)");
  }
  IB_ASSIGN_OR_RETURN(const std::string text, read_file(config_path));
  const nlohmann::json cfg = nlohmann::json::parse(text, nullptr, false);
  if (!cfg.is_object()) return refuse(dir, "adapter_config.json is not a JSON object");

  LoraAdapter adapter;
  adapter.path = dir;
  if (cfg.contains("peft_type") && cfg["peft_type"] != "LORA") {
    return refuse(dir, "peft_type " + cfg["peft_type"].dump() +
                           " is not LORA; only LoRA adapters are served");
  }
  if (!cfg.contains("r") || !cfg["r"].is_number_integer() || cfg["r"].get<int>() <= 0) {
    return refuse(dir, "adapter_config.json needs a positive integer r (the rank)");
  }
  adapter.rank = cfg["r"].get<int>();
  if (adapter.rank > max_lora_rank) {
    return refuse(dir, "rank r = " + std::to_string(adapter.rank) + " exceeds --max-lora-rank " +
                           std::to_string(max_lora_rank) + "; raise --max-lora-rank to at least " +
                           std::to_string(adapter.rank));
  }
  const nlohmann::json alpha = cfg.value("lora_alpha", nlohmann::json(8));
  if (!alpha.is_number()) return refuse(dir, "lora_alpha must be a number");
  adapter.alpha = alpha.get<double>();
  adapter.use_rslora =
      cfg.contains("use_rslora") && cfg["use_rslora"].is_boolean() && cfg["use_rslora"].get<bool>();
  adapter.scale = static_cast<float>(
      adapter.use_rslora ? adapter.alpha / std::sqrt(static_cast<double>(adapter.rank))
                         : adapter.alpha / adapter.rank);
  if (cfg.contains("base_model_name_or_path") && cfg["base_model_name_or_path"].is_string()) {
    adapter.base_model = cfg["base_model_name_or_path"].get<std::string>();
  }
  const std::string bias =
      cfg.contains("bias") && cfg["bias"].is_string() ? cfg["bias"].get<std::string>() : "none";
  if (bias != "none") {
    return refuse(dir, "bias \"" + bias +
                           "\": adapters that train biases are not served (their biases would "
                           "replace the base model's); retrain with bias=\"none\"");
  }
  if (cfg.contains("lora_bias") && cfg["lora_bias"].is_boolean() && cfg["lora_bias"].get<bool>()) {
    return refuse(dir,
                  "lora_bias: adapters with a bias on lora_B are not served; retrain with "
                  "lora_bias=False");
  }
  if (cfg.contains("use_dora") && cfg["use_dora"].is_boolean() && cfg["use_dora"].get<bool>()) {
    return refuse(dir, "use_dora: DoRA adapters are not served; use a plain LoRA adapter");
  }
  if (cfg.contains("fan_in_fan_out") && cfg["fan_in_fan_out"].is_boolean() &&
      cfg["fan_in_fan_out"].get<bool>()) {
    return refuse(dir, "fan_in_fan_out: transposed (Conv1D) adapters are not served");
  }
  for (const char* key : {"rank_pattern", "alpha_pattern"}) {
    if (cfg.contains(key) && !cfg[key].is_null() && !cfg[key].empty()) {
      return refuse(dir, std::string(key) +
                             ": per-module ranks or alphas are not served; give every module "
                             "the same r and lora_alpha");
    }
  }
  if (cfg.contains("modules_to_save") && !cfg["modules_to_save"].is_null() &&
      !cfg["modules_to_save"].empty()) {
    return refuse(dir, "modules_to_save " + cfg["modules_to_save"].dump() +
                           ": adapters that replace whole modules are not served (each adapter "
                           "would need its own copy of them); retrain without modules_to_save");
  }
  const nlohmann::json targets = cfg.value("target_modules", nlohmann::json());
  std::vector<bool> allowed(kNumLoraTargets, false);
  if (targets.is_string() && targets.get<std::string>() == "all-linear") {
    std::fill(allowed.begin(), allowed.end(), true);
    adapter.target_modules.assign(std::begin(kTargetNames), std::end(kTargetNames));
  } else if (targets.is_array() && !targets.empty()) {
    for (const auto& t : targets) {
      const int i = t.is_string() ? target_index(t.get<std::string>()) : -1;
      if (i < 0) {
        return refuse(dir, "target_modules holds " + t.dump() +
                               ", which the engine cannot adapt; targets may be " +
                               all_target_names());
      }
      allowed[static_cast<size_t>(i)] = true;
      adapter.target_modules.emplace_back(kTargetNames[i]);
    }
  } else {
    return refuse(dir, "target_modules must be a list of module names (any of " +
                           all_target_names() + ") or \"all-linear\"");
  }
  std::sort(adapter.target_modules.begin(), adapter.target_modules.end());

  IB_ASSIGN_OR_RETURN(auto file, SafetensorsCheckpoint::open(weights_path.string()));
  adapter.layers.resize(static_cast<size_t>(base.num_layers));
  const std::string for_base =
      adapter.base_model.empty()
          ? std::string()
          : " (it records base_model_name_or_path " + adapter.base_model + ")";
  for (const std::string& name : file->names()) {
    TensorName n;
    if (!parse_tensor_name(name, n)) {
      return refuse(dir, "tensor " + name +
                             " is not a LoRA A or B matrix of a layer's q/k/v/o/gate/up/down "
                             "projection as PEFT names them "
                             "(base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight)");
    }
    if (n.layer >= base.num_layers) {
      return refuse(dir, "tensor " + name + " is for layer " + std::to_string(n.layer) +
                             " but the base model has " + std::to_string(base.num_layers) +
                             " layers: the adapter was trained for another base model" + for_base);
    }
    if (!allowed[static_cast<size_t>(n.target)]) {
      return refuse(dir, "tensor " + name + " adapts " + std::string(kTargetNames[n.target]) +
                             ", which target_modules does not list");
    }
    IB_ASSIGN_OR_RETURN(const HostTensorRef t, file->get(name));
    if (t.dtype != DType::kF32 && t.dtype != DType::kBF16 && t.dtype != DType::kF16) {
      return refuse(dir, "tensor " + name + " is not f32, bf16 or f16");
    }
    const LoraTargetShape shape = lora_target_shape(base, static_cast<LoraTarget>(n.target));
    const std::vector<int64_t> want = n.is_a ? std::vector<int64_t>{adapter.rank, shape.in}
                                             : std::vector<int64_t>{shape.out, adapter.rank};
    if (t.shape != want) {
      return refuse(
          dir, "tensor " + name + " has shape " + shape_string(t.shape) + " but the base model " +
                   base.name + " with r = " + std::to_string(adapter.rank) + " needs " +
                   shape_string(want) + ": the adapter was trained for another base model" +
                   for_base + "; use an adapter of this model");
    }
    LoraMatrices& m = adapter.layers[static_cast<size_t>(n.layer)][static_cast<size_t>(n.target)];
    (n.is_a ? m.a : m.b) = to_f32(t);
  }
  bool any = false;
  for (size_t l = 0; l < adapter.layers.size(); ++l) {
    for (int i = 0; i < kNumLoraTargets; ++i) {
      const LoraMatrices& m = adapter.layers[l][static_cast<size_t>(i)];
      if (m.a.empty() != m.b.empty()) {
        return refuse(dir, "layer " + std::to_string(l) + " " + std::string(kTargetNames[i]) +
                               " has lora_" + (m.a.empty() ? "B" : "A") + " but no lora_" +
                               (m.a.empty() ? "A" : "B") + "; the file is incomplete");
      }
      any = any || !m.a.empty();
    }
  }
  if (!any) return refuse(dir, "adapter_model.safetensors holds no LoRA tensors");
  return adapter;
}

Result<LoraModuleSpec> parse_lora_module(std::string_view item) {
  const size_t eq = item.find('=');
  if (eq == std::string_view::npos || eq == 0 || eq + 1 == item.size()) {
    return user_error("--lora-modules " + std::string(item) +
                      ": expected name=path (e.g. sql=/adapters/sql-lora)");
  }
  return LoraModuleSpec{std::string(item.substr(0, eq)), std::string(item.substr(eq + 1))};
}

}  // namespace ib
