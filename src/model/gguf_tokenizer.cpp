// The tokenizer of a GGUF file (gguf_model.h): tokenizer.ggml.* rebuilt as the tokenizer.json
// document the project's BPE tokenizer reads (bpe_tokenizer.h), so both formats share one
// implementation; "gpt2" here, "llama" in gguf_llama_tokenizer.cpp.
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "model/detail/bpe_from_json.h"
#include "model/detail/gguf_llama_tokenizer.h"
#include "model/detail/split_regexes.h"
#include "model/gguf_model.h"

namespace ib {
namespace {

using nlohmann::json;

// llama.cpp's token types (tokenizer.ggml.token_type).
constexpr int64_t kControlToken = 3;
constexpr int64_t kUserDefinedToken = 4;

Error refuse(const std::string& origin, std::string_view what) {
  return user_error(fmt::format("{}: {}", origin, what));
}

// A required array whose items are all of one type.
Result<const GgufArray*> typed_array(const GgufFile& file, const std::string& origin,
                                     std::string_view key, bool strings) {
  const GgufValue* v = file.find(key);
  const GgufArray* a = v == nullptr ? nullptr : v->as_array();
  const bool typed = a != nullptr && (strings ? a->element_type == GgufValueType::kString
                                              : a->element_type != GgufValueType::kString &&
                                                    a->element_type != GgufValueType::kArray);
  if (!typed) {
    return refuse(origin, fmt::format("GGUF metadata '{}' must be an array of {}", key,
                                      strings ? "strings" : "numbers"));
  }
  return a;
}

// The pre_tokenizer of tokenizer.ggml.pre (absent: GPT-2's).
Result<json> pre_tokenizer(const GgufFile& file, const std::string& origin, bool& ignore_merges) {
  std::string pre = "default";
  if (const GgufValue* v = file.find("tokenizer.ggml.pre")) {
    if (v->as_string() == nullptr) return refuse(origin, "tokenizer.ggml.pre must be a string");
    pre = *v->as_string();
  }
  if (pre == "default" || pre == "gpt-2") {
    return json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  }
  std::string_view regex;
  if (pre == "llama-bpe" || pre == "llama3") {
    regex = detail::kLlama3Regex;
    ignore_merges = true;  // as Llama-3's tokenizer.json
  } else if (pre == "qwen2") {
    regex = detail::kQwen2Regex;
  } else {
    return refuse(origin, fmt::format("tokenizer.ggml.pre '{}' is not supported; inferbench "
                                      "reads llama-bpe, qwen2, gpt-2 and default",
                                      pre.substr(0, 64)));
  }
  return json{
      {"type", "Sequence"},
      {"pretokenizers",
       json::array(
           {json{{"type", "Split"}, {"pattern", {{"Regex", regex}}}},
            json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> gguf_tokenizer(const GgufFile& file, const std::string& origin) {
  const GgufValue* model = file.find("tokenizer.ggml.model");
  if (model == nullptr || model->as_string() == nullptr) {
    return refuse(origin, "GGUF metadata 'tokenizer.ggml.model' is missing or not a string");
  }
  const std::string& kind = *model->as_string();
  if (kind != "gpt2" && kind != "llama") {
    return refuse(origin, fmt::format("tokenizer.ggml.model '{}' is not supported; inferbench "
                                      "reads 'gpt2' (byte-level BPE: Llama-3, Qwen2) and 'llama' "
                                      "(SentencePiece BPE: Llama-2, Mistral, Phi-3)",
                                      kind.substr(0, 64)));
  }
  IB_ASSIGN_OR_RETURN(const GgufArray* tokens,
                      typed_array(file, origin, "tokenizer.ggml.tokens", true));
  const GgufArray* types = nullptr;
  if (file.find("tokenizer.ggml.token_type") != nullptr) {
    IB_ASSIGN_OR_RETURN(types, typed_array(file, origin, "tokenizer.ggml.token_type", false));
    if (types->items.size() != tokens->items.size()) {
      return refuse(origin, fmt::format("tokenizer.ggml.token_type has {} entries for {} tokens",
                                        types->items.size(), tokens->items.size()));
    }
  }
  if (kind == "llama") {
    IB_ASSIGN_OR_RETURN(const GgufArray* scores,
                        typed_array(file, origin, "tokenizer.ggml.scores", false));
    if (scores->items.size() != tokens->items.size()) {
      return refuse(origin, fmt::format("tokenizer.ggml.scores has {} entries for {} tokens",
                                        scores->items.size(), tokens->items.size()));
    }
    return detail::bpe_tokenizer_from_json(
        detail::llama_tokenizer_document(file, *tokens, types, *scores), origin, json());
  }
  IB_ASSIGN_OR_RETURN(const GgufArray* merges,
                      typed_array(file, origin, "tokenizer.ggml.merges", true));
  bool ignore_merges = false;
  IB_ASSIGN_OR_RETURN(json pre, pre_tokenizer(file, origin, ignore_merges));

  json vocab = json::object();
  json added = json::array();
  for (size_t id = 0; id < tokens->items.size(); ++id) {
    const std::string& token = *tokens->items[id].as_string();
    vocab[token] = id;
    const int64_t type = types == nullptr ? 1 : types->items[id].as_int().value_or(1);
    if ((type == kControlToken || type == kUserDefinedToken) && !token.empty()) {
      added.push_back({{"id", id}, {"content", token}, {"special", type == kControlToken}});
    }
  }
  json merge_list = json::array();
  for (const GgufValue& m : merges->items) merge_list.push_back(*m.as_string());
  const json doc = {{"model",
                     {{"type", "BPE"},
                      {"vocab", std::move(vocab)},
                      {"merges", std::move(merge_list)},
                      {"ignore_merges", ignore_merges}}},
                    {"pre_tokenizer", std::move(pre)},
                    {"decoder", {{"type", "ByteLevel"}}},
                    {"added_tokens", std::move(added)}};
  return detail::bpe_tokenizer_from_json(doc, origin, json());
}

}  // namespace ib
