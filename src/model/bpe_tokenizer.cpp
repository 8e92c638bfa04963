// BPE tokenizers from a Hugging Face tokenizer.json (bpe_tokenizer.h): the added-token split,
// then normalizer, pre-tokenizer and model per section, then the post-processor's special tokens.
#include "model/bpe_tokenizer.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model/detail/bpe_from_json.h"
#include "model/detail/bpe_model.h"
#include "model/detail/tokenizer_steps.h"
#include "model/gguf_model.h"

namespace ib {
namespace {

using nlohmann::json;

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";
constexpr int64_t kMaxId = int64_t{1} << 24;

struct Added {
  int32_t id = 0;
  bool lstrip = false;  // eats the whitespace before it
  bool rstrip = false;  // eats the whitespace after it
};

// The ids a post-processor puts around one sequence.
struct Template {
  std::vector<int32_t> prefix;
  std::vector<int32_t> suffix;
};

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(detail::BpeModel model) : model_(std::move(model)) {}

  std::string name() const override { return "bpe"; }

  std::vector<int32_t> encode(std::string_view text) const override {
    return encode_text(text, true);
  }
  std::vector<int32_t> encode_without_specials(std::string_view text) const override {
    return encode_text(text, false);
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    return decode_text(ids, false);
  }
  std::string decode_continuation(const std::vector<int32_t>& ids) const override {
    return decode_text(ids, true);
  }

  Status load(const json& doc, const json& config);

 private:
  std::vector<int32_t> encode_text(std::string_view text, bool add_specials) const {
    std::vector<int32_t> ids;
    if (add_specials) ids = template_.prefix;
    size_t start = 0;
    size_t i = 0;
    while (i < text.size()) {
      const auto [hit, length] = added_at(text, i);
      if (hit == nullptr) {
        ++i;
        continue;
      }
      size_t end = i;
      if (hit->lstrip) {
        while (end > start && is_space(text[end - 1])) --end;
      }
      encode_section(text.substr(start, end - start), start == 0, ids);
      ids.push_back(hit->id);
      i += length;
      if (hit->rstrip) {
        while (i < text.size() && is_space(text[i])) ++i;
      }
      start = i;
    }
    encode_section(text.substr(start), start == 0, ids);
    if (add_specials) ids.insert(ids.end(), template_.suffix.begin(), template_.suffix.end());
    return ids;
  }

  std::string decode_text(const std::vector<int32_t>& ids, bool continuation) const {
    std::string out;
    std::vector<std::string> pending;  // model tokens waiting for the decoder
    auto flush = [&] {
      if (pending.empty()) return;
      out += detail::decode_tokens(decoder_, std::move(pending), continuation || !out.empty());
      pending.clear();
    };
    for (const int32_t id : ids) {
      if (id < 0 || static_cast<size_t>(id) >= tokens_.size() ||
          (tokens_[static_cast<size_t>(id)].empty() && added_ids_.count(id) == 0)) {
        flush();
        out += kReplacementChar;
      } else if (special_.count(id) == 0) {
        pending.push_back(tokens_[static_cast<size_t>(id)]);
      }
    }
    flush();
    return out;
  }

  void encode_section(std::string_view text, bool first_section, std::vector<int32_t>& ids) const {
    if (text.empty()) return;
    const std::string normalized = detail::normalize(normalizer_, std::string(text));
    for (const std::string& piece : detail::pre_tokenize(pre_, normalized, first_section)) {
      model_.encode(piece, ids);
    }
  }

  // The longest added token at text[i], if any.
  std::pair<const Added*, size_t> added_at(std::string_view text, size_t i) const {
    if (!added_first_[static_cast<unsigned char>(text[i])]) return {nullptr, 0};
    for (const size_t length : added_lengths_) {  // longest first
      if (length > text.size() - i) continue;
      if (auto it = added_.find(std::string(text.substr(i, length))); it != added_.end()) {
        return {&it->second, length};
      }
    }
    return {nullptr, 0};
  }

  Status load_added(const json& doc);
  Status load_template(const json& doc, const json& config);

  detail::BpeModel model_;
  detail::Normalizer normalizer_;
  detail::PreTokenizer pre_;
  detail::Decoder decoder_;
  Template template_;
  std::unordered_map<std::string, Added> added_;    // content -> token
  std::set<size_t, std::greater<>> added_lengths_;  // distinct content lengths, longest first
  std::array<bool, 256> added_first_{};             // first bytes of added tokens
  std::unordered_set<int32_t> added_ids_;           // decoded as their content
  std::unordered_set<int32_t> special_;             // skipped by decode
  std::vector<std::string> tokens_;                 // by id
};

Status BpeTokenizer::load_added(const json& doc) {
  for (const json& a : doc.value("added_tokens", json::array())) {
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
        !a.contains("content") || !a["content"].is_string() ||
        a["content"].get<std::string>().empty()) {
      return user_error("an added token without id or content");
    }
    const int64_t id = a["id"].get<int64_t>();
    if (id < 0 || id > kMaxId) return user_error("an added token id out of range");
    const std::string content = a["content"].get<std::string>();
    added_[content] =
        Added{static_cast<int32_t>(id), a.value("lstrip", false), a.value("rstrip", false)};
    added_lengths_.insert(content.size());
    added_first_[static_cast<unsigned char>(content[0])] = true;
    added_ids_.insert(static_cast<int32_t>(id));
    if (a.value("special", false)) special_.insert(static_cast<int32_t>(id));
  }
  return Ok{};
}

// The content of a tokenizer_config.json token field: "text", {"content": "text"} or null.
std::string token_content(const json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return {};
  const json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return {};
}

Status BpeTokenizer::load_template(const json& doc, const json& config) {
  const json post = doc.value("post_processor", json());
  std::vector<json> steps;
  if (post.is_object() && post.value("type", "") == "Sequence") {
    for (const json& s : post.value("processors", json::array())) steps.push_back(s);
  } else if (!post.is_null()) {
    steps.push_back(post);
  }
  for (const json& step : steps) {
    const std::string type = step.is_object() ? step.value("type", "") : "";
    if (type == "ByteLevel") continue;  // offsets only
    if (type != "TemplateProcessing") {
      return user_error(fmt::format(
          "post-processor '{}' is not supported; inferbench reads TemplateProcessing, ByteLevel, "
          "Sequence",
          type.substr(0, 64)));
    }
    const json specials = step.value("special_tokens", json::object());
    bool after_sequence = false;
    for (const json& item : step.value("single", json::array())) {
      if (item.contains("Sequence")) {
        after_sequence = true;
        continue;
      }
      const std::string name = item.value("SpecialToken", json::object()).value("id", "");
      if (!specials.contains(name) || !specials[name].contains("ids")) {
        return user_error(
            fmt::format("post-processor TemplateProcessing: special token '{}' "
                        "has no ids",
                        name.substr(0, 64)));
      }
      for (const json& id : specials[name]["ids"]) {
        (after_sequence ? template_.suffix : template_.prefix).push_back(id.get<int32_t>());
      }
    }
  }
  // tokenizer_config.json's add_bos_token / add_eos_token, when stated, decide (as transformers'
  // Llama and Gemma tokenizers rebuild their post-processor from them).
  auto id_of = [&](const char* key) -> std::optional<int32_t> {
    const std::string content = token_content(config, key);
    if (content.empty()) return std::nullopt;
    if (auto it = added_.find(content); it != added_.end()) return it->second.id;
    if (auto it = model_.vocab().find(content); it != model_.vocab().end()) return it->second;
    return std::nullopt;
  };
  if (config.is_object() && config.contains("add_bos_token") &&
      config["add_bos_token"].is_boolean()) {
    template_.prefix.clear();
    const auto bos = id_of("bos_token");
    if (config["add_bos_token"].get<bool>() && bos) template_.prefix.push_back(*bos);
  }
  if (config.is_object() && config.contains("add_eos_token") &&
      config["add_eos_token"].is_boolean()) {
    template_.suffix.clear();
    const auto eos = id_of("eos_token");
    if (config["add_eos_token"].get<bool>() && eos) template_.suffix.push_back(*eos);
  }
  return Ok{};
}

Status BpeTokenizer::load(const json& doc, const json& config) {
  IB_ASSIGN_OR_RETURN(normalizer_, detail::parse_normalizer(doc.value("normalizer", json())));
  IB_ASSIGN_OR_RETURN(pre_, detail::parse_pre_tokenizer(doc.value("pre_tokenizer", json())));
  IB_ASSIGN_OR_RETURN(decoder_, detail::parse_decoder(doc.value("decoder", json())));
  IB_TRY(load_added(doc));
  IB_TRY(load_template(doc, config));

  int32_t max_id = -1;
  for (const auto& [token, id] : model_.vocab()) max_id = std::max(max_id, id);
  for (const auto& [token, added] : added_) max_id = std::max(max_id, added.id);
  tokens_.assign(static_cast<size_t>(max_id + 1), std::string());
  for (const auto& [token, id] : model_.vocab()) tokens_[static_cast<size_t>(id)] = token;
  for (const auto& [token, added] : added_) tokens_[static_cast<size_t>(added.id)] = token;
  return Ok{};
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> parse_bpe_tokenizer(std::string_view tokenizer_json,
                                                       const std::string& origin,
                                                       std::string_view tokenizer_config_json) {
  const json doc = json::parse(tokenizer_json.begin(), tokenizer_json.end(), nullptr, false);
  if (doc.is_discarded()) return user_error(fmt::format("{}: not valid JSON", origin));
  json config;
  if (!tokenizer_config_json.empty()) {
    config =
        json::parse(tokenizer_config_json.begin(), tokenizer_config_json.end(), nullptr, false);
    if (config.is_discarded() || !config.is_object()) {
      return user_error(fmt::format("{}: tokenizer_config.json is not a JSON object", origin));
    }
  }
  return detail::bpe_tokenizer_from_json(doc, origin, config);
}

Result<std::unique_ptr<Tokenizer>> detail::bpe_tokenizer_from_json(const nlohmann::json& doc,
                                                                   const std::string& origin,
                                                                   const nlohmann::json& config) {
  auto prefixed = [&](const Error& e) {
    return user_error(fmt::format("{}: {}", origin, e.message));
  };
  try {
    if (!doc.is_object()) return user_error(fmt::format("{}: not a JSON object", origin));
    auto model = detail::BpeModel::parse(doc.value("model", json()));
    if (!model.ok()) return prefixed(model.error());
    auto tokenizer = std::make_unique<BpeTokenizer>(std::move(model).value());
    if (Status s = tokenizer->load(doc, config); !s.ok()) return prefixed(s.error());
    return std::unique_ptr<Tokenizer>(std::move(tokenizer));
  } catch (const json::exception& e) {  // a field of an unexpected type
    return user_error(fmt::format("{}: unexpected structure ({})", origin, e.what()));
  }
}

namespace {

Result<std::string> read_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return user_error(fmt::format("cannot read {}", file.string()));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> load_bpe_tokenizer(const std::filesystem::path& file) {
  IB_ASSIGN_OR_RETURN(const std::string text, read_file(file));
  std::string config;
  std::error_code ec;
  const std::filesystem::path config_file = file.parent_path() / "tokenizer_config.json";
  if (std::filesystem::is_regular_file(config_file, ec)) {
    IB_ASSIGN_OR_RETURN(config, read_file(config_file));
  }
  return parse_bpe_tokenizer(text, file.string(), config);
}

bool has_own_tokenizer(const std::string& model) {
  if (names_gguf_file(model)) return gguf_has_tokenizer(model);
  std::error_code ec;
  return !model.empty() &&
         std::filesystem::is_regular_file(std::filesystem::path(model) / "tokenizer.json", ec);
}

Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& model) {
  if (names_gguf_file(model)) return load_gguf_tokenizer(model);
  std::error_code ec;
  const std::filesystem::path file = std::filesystem::path(model) / "tokenizer.json";
  if (!model.empty() && std::filesystem::is_regular_file(file, ec)) {
    return load_bpe_tokenizer(file);
  }
  return make_byte_tokenizer();
}

}  // namespace ib
