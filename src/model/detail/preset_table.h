// The preset table (private to model/): each public config, transcribed from its HF config.json.
#pragma once

#include <string>
#include <vector>

#include "model/config.h"

namespace ib::detail {

struct PresetEntry {
  ModelConfig config;                // config.name is the preset name; hf_repo_id the HF repo
  std::vector<std::string> aliases;  // extra names accepted by find_preset
};

// Every preset in display order (tiny ones first).
std::vector<PresetEntry> preset_table();

}  // namespace ib::detail
