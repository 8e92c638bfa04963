// Preset lookup (by name, alias or HF repo id, case-insensitive) and --model resolution.
#include "model/presets.h"

#include <algorithm>
#include <filesystem>
#include <string_view>

#include "model/detail/preset_table.h"
#include "model/gguf_model.h"
#include "model/hf_config.h"

namespace ib {
namespace {

namespace fs = std::filesystem;

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& ch : out) {
    if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
  }
  return out;
}

// Levenshtein distance (insert, delete, substitute), for "did you mean" suggestions.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// Every lowercase name a preset answers to: its name, aliases, HF repo id and the repo's name
// without the organisation (e.g. "meta-llama-3-8b").
std::vector<std::string> keys_of(const detail::PresetEntry& e) {
  std::vector<std::string> keys{lower(e.config.name)};
  for (const auto& a : e.aliases) keys.push_back(lower(a));
  const std::string& repo = e.config.hf_repo_id;
  if (!repo.empty()) {
    keys.push_back(lower(repo));
    keys.push_back(lower(repo.substr(repo.find('/') + 1)));
  }
  return keys;
}

// Up to three preset names close to `wanted` (edit distance or substring), closest first.
std::vector<std::string> close_names(const std::vector<detail::PresetEntry>& table,
                                     const std::string& wanted) {
  std::vector<std::pair<size_t, std::string>> scored;
  const size_t limit = std::max<size_t>(2, wanted.size() / 3);
  for (const auto& e : table) {
    size_t best = std::string::npos;
    for (const auto& key : keys_of(e)) {
      const bool contains = wanted.size() >= 3 && key.find(wanted) != std::string::npos;
      best = std::min(best, contains ? size_t{1} : edit_distance(key, wanted));
    }
    if (best <= limit) scored.emplace_back(best, e.config.name);
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<std::string> names;
  for (size_t i = 0; i < scored.size() && i < 3; ++i) names.push_back(scored[i].second);
  return names;
}

std::string did_you_mean(const std::vector<std::string>& names) {
  if (names.empty()) return "";
  std::string s = " (did you mean ";
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + names[i];
  return s + "?)";
}

}  // namespace

std::vector<ModelConfig> all_presets() {
  std::vector<ModelConfig> out;
  for (auto& e : detail::preset_table()) out.push_back(std::move(e.config));
  return out;
}

Result<ModelConfig> find_preset(const std::string& name) {
  const auto table = detail::preset_table();
  const std::string wanted = lower(name);
  for (const auto& e : table) {
    const auto keys = keys_of(e);
    if (std::find(keys.begin(), keys.end(), wanted) != keys.end()) return e.config;
  }
  return user_error("unknown model preset '" + name + "'" +
                    did_you_mean(close_names(table, wanted)) +
                    "; `inferbench models` lists the presets");
}

std::string model_weights_path(const std::string& model) {
  std::error_code ec;
  return fs::is_directory(model, ec) || is_gguf_file(model) ? model : std::string();
}

Result<ModelConfig> resolve_model(const std::string& model) {
  if (model.empty()) {
    return user_error(
        "--model is empty; give a preset name (`inferbench models` lists them), a "
        "Hugging Face model directory or a .gguf file");
  }
  if (names_gguf_file(model)) return load_gguf_config(model);
  std::error_code ec;
  const fs::path path(model);
  if (fs::is_directory(path, ec)) {
    if (!fs::is_regular_file(path / "config.json", ec)) {
      return user_error("model directory " + model +
                        " has no config.json; point --model at a "
                        "Hugging Face model directory or use a preset (`inferbench models`)");
    }
    return load_hf_config(model);
  }
  if (path.filename() == "config.json" && fs::is_regular_file(path, ec)) {
    return load_hf_config(path.parent_path().string());
  }
  auto preset = find_preset(model);
  if (preset.ok()) return preset;
  const auto table = detail::preset_table();
  return user_error("unknown model '" + model + "': no preset or HF repo id of that name" +
                    did_you_mean(close_names(table, lower(model))) +
                    " and no directory with config.json or GGUF file at that path; `inferbench "
                    "models` lists the presets");
}

}  // namespace ib
