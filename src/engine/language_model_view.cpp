// The language model of a LLaVA checkpoint under a causal LM's tensor names.
#include "engine/detail/language_model_view.h"

#include <map>
#include <span>
#include <string_view>
#include <utility>

namespace ib::detail {
namespace {

// Checkpoint prefix -> the causal LM's ("": not the language model's), the first match wins.
using PrefixRule = std::pair<std::string_view, std::string_view>;
// LLaVA, both layouts.
constexpr PrefixRule kLlavaPrefixes[] = {
    {"model.language_model.", "model."},
    {"lm_head.", "lm_head."},
    {"language_model.model.", "model."},
    {"language_model.lm_head.", "lm_head."},
};
// Qwen2-VL: transformers 5's (model.language_model., model.visual.) and the published files'
// (model., visual.).
constexpr PrefixRule kQwen2VlPrefixes[] = {
    {"model.language_model.", "model."},
    {"lm_head.", "lm_head."},
    {"model.visual.", ""},
    {"model.", "model."},
};

std::span<const PrefixRule> rules(ViewLayout layout) {
  if (layout == ViewLayout::kQwen2Vl) return kQwen2VlPrefixes;
  return kLlavaPrefixes;
}

class LanguageModelView final : public SafetensorsCheckpoint {
 public:
  LanguageModelView(std::unique_ptr<SafetensorsCheckpoint> inner, ViewLayout layout)
      : inner_(std::move(inner)) {
    for (const std::string& name : inner_->names()) {
      std::string view = language_model_name(name, layout);
      if (!view.empty()) to_inner_.emplace(std::move(view), name);
    }
  }
  bool contains(const std::string& name) const override { return to_inner_.contains(name); }
  Result<HostTensorRef> get(const std::string& name) const override {
    const auto it = to_inner_.find(name);
    if (it == to_inner_.end()) {
      return user_error("the vision-language checkpoint has no language model tensor '" + name +
                        "'");
    }
    return inner_->get(it->second);
  }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    out.reserve(to_inner_.size());
    for (const auto& [view, inner] : to_inner_) out.push_back(view);
    return out;
  }
  std::vector<std::string> files() const override { return inner_->files(); }

 private:
  std::unique_ptr<SafetensorsCheckpoint> inner_;
  std::map<std::string, std::string> to_inner_;  // view name -> checkpoint name
};

}  // namespace

std::string language_model_name(const std::string& checkpoint_name, ViewLayout layout) {
  for (const auto& [from, to] : rules(layout)) {
    if (checkpoint_name.starts_with(from)) {
      if (to.empty()) return "";  // not the language model's
      return std::string(to) + checkpoint_name.substr(from.size());
    }
  }
  return "";
}

std::unique_ptr<SafetensorsCheckpoint> language_model_view(
    std::unique_ptr<SafetensorsCheckpoint> checkpoint, ViewLayout layout) {
  return std::make_unique<LanguageModelView>(std::move(checkpoint), layout);
}

}  // namespace ib::detail
