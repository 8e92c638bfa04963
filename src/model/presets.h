// Architecture presets: exact public configs of well-known models, plus tiny Llama-shaped
// models for CPU tests and demos.
#pragma once

#include <string>
#include <vector>

#include "model/config.h"

namespace ib {

// Every preset, in display order (tiny ones first).
std::vector<ModelConfig> all_presets();
// Lookup by preset name (case-insensitive; also accepts the HF repo id, e.g.
// "meta-llama/Meta-Llama-3-8B"). The error lists close matches.
Result<ModelConfig> find_preset(const std::string& name);

// Resolves --model: a preset name, a directory with an HF config.json, or a GGUF file
// (load_gguf_config).
Result<ModelConfig> resolve_model(const std::string& model);
// Where the weights of --model are (WeightOptions::path): model itself when it is a directory or
// a GGUF file, else "" (a preset: dummy weights).
std::string model_weights_path(const std::string& model);

}  // namespace ib
