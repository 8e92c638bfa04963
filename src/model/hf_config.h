// Reads a Hugging Face config.json into a ModelConfig (Llama, Mistral, Qwen2 first; Phi-3,
// Gemma-2, Mixtral and DeepSeek-V2 are read so they can be listed and refused precisely).
#pragma once

#include <string>
#include <string_view>

#include "model/config.h"

namespace ib {

// Never crashes on malformed input (fuzzed: fuzz/hf_config_fuzz.cpp). Errors name the field.
Result<ModelConfig> parse_hf_config(std::string_view json, const std::string& name);
// Reads dir/config.json.
Result<ModelConfig> load_hf_config(const std::string& dir);

}  // namespace ib
