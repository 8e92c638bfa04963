// A GGUF "llama" (SentencePiece BPE) tokenizer as a tokenizer.json document
// (detail/gguf_llama_tokenizer.h).
#include "model/detail/gguf_llama_tokenizer.h"

#include <algorithm>
#include <unordered_map>

namespace ib::detail {
namespace {

using nlohmann::json;

// llama.cpp's token types (tokenizer.ggml.token_type).
constexpr int64_t kNormal = 1;
constexpr int64_t kUnknown = 2;
constexpr int64_t kControl = 3;
constexpr int64_t kUserDefined = 4;

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581

bool flag(const GgufFile& file, std::string_view key, bool fallback) {
  const GgufValue* v = file.find(key);
  if (v == nullptr) return fallback;
  if (const auto* b = std::get_if<bool>(&v->value)) return *b;
  return fallback;
}

std::optional<int64_t> integer(const GgufFile& file, std::string_view key) {
  const GgufValue* v = file.find(key);
  return v == nullptr ? std::nullopt : v->as_int();
}

struct Merge {
  double score = 0;
  size_t merged = 0;
  size_t left = 0;
  size_t right = 0;
};

size_t utf8_length(unsigned char c) {
  return c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

}  // namespace

json llama_tokenizer_document(const GgufFile& file, const GgufArray& tokens, const GgufArray* types,
                              const GgufArray& scores) {
  const size_t n = tokens.items.size();
  auto type_of = [&](size_t id) {
    return types == nullptr ? kNormal : types->items[id].as_int().value_or(kNormal);
  };
  std::unordered_map<std::string, size_t> ids;
  json vocab = json::object();
  json added = json::array();
  std::string unk;
  for (size_t id = 0; id < n; ++id) {
    const std::string& token = *tokens.items[id].as_string();
    ids.emplace(token, id);
    vocab[token] = id;
    const int64_t type = type_of(id);
    if ((type == kUnknown || type == kControl || type == kUserDefined) && !token.empty()) {
      added.push_back({{"id", id}, {"content", token}, {"special", type != kUserDefined}});
    }
    if (type == kUnknown && unk.empty()) unk = token;
  }
  std::vector<Merge> merges;
  for (size_t id = 0; id < n; ++id) {
    if (type_of(id) != kNormal) continue;
    const std::string& token = *tokens.items[id].as_string();
    for (size_t cut = utf8_length(static_cast<unsigned char>(token[0])); cut < token.size();
         cut += utf8_length(static_cast<unsigned char>(token[cut]))) {
      const auto left = ids.find(token.substr(0, cut));
      const auto right = ids.find(token.substr(cut));
      if (left == ids.end() || right == ids.end()) continue;
      merges.push_back({scores.items[id].as_number().value_or(0), id, left->second, right->second});
    }
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.merged != b.merged) return a.merged < b.merged;
    return a.left != b.left ? a.left < b.left : a.right < b.right;
  });
  json merge_list = json::array();
  for (const Merge& m : merges) {
    merge_list.push_back(
        json::array({*tokens.items[m.left].as_string(), *tokens.items[m.right].as_string()}));
  }

  const bool space_prefix = flag(file, "tokenizer.ggml.add_space_prefix", true);
  json normalizers = json::array();
  if (space_prefix) normalizers.push_back({{"type", "Prepend"}, {"prepend", kSpace}});
  normalizers.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpace}});
  json decoders =
      json::array({{{"type", "Replace"}, {"pattern", {{"String", kSpace}}}, {"content", " "}},
                   {{"type", "ByteFallback"}},
                   {{"type", "Fuse"}}});
  if (space_prefix) {
    decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  }
  json single = json::array();
  json specials = json::object();
  auto special = [&](std::string_view key, bool add) -> std::optional<json> {
    const auto id = integer(file, key);
    if (!add || !id || *id < 0 || static_cast<size_t>(*id) >= n) return std::nullopt;
    const std::string& token = *tokens.items[static_cast<size_t>(*id)].as_string();
    specials[token] = {{"id", token}, {"ids", {*id}}, {"tokens", {token}}};
    return json{{"SpecialToken", {{"id", token}, {"type_id", 0}}}};
  };
  if (auto bos = special("tokenizer.ggml.bos_token_id",
                         flag(file, "tokenizer.ggml.add_bos_token", true))) {
    single.push_back(*bos);
  }
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  if (auto eos = special("tokenizer.ggml.eos_token_id",
                         flag(file, "tokenizer.ggml.add_eos_token", false))) {
    single.push_back(*eos);
  }
  json model = {{"type", "BPE"},
                {"vocab", std::move(vocab)},
                {"merges", std::move(merge_list)},
                {"byte_fallback", true},
                {"fuse_unk", true}};
  if (!unk.empty()) model["unk_token"] = unk;
  return {{"model", std::move(model)},
          {"normalizer", {{"type", "Sequence"}, {"normalizers", std::move(normalizers)}}},
          {"decoder", {{"type", "Sequence"}, {"decoders", std::move(decoders)}}},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single", std::move(single)},
            {"special_tokens", std::move(specials)}}},
          {"added_tokens", std::move(added)}};
}

}  // namespace ib::detail
