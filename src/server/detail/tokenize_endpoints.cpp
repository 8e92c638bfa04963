// /tokenize and /detokenize (tokenize_endpoints.h).
#include "server/detail/tokenize_endpoints.h"

#include <optional>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "server/detail/chat_prompt.h"

namespace ib::detail {
namespace {

using nlohmann::json;

ApiError bad(std::string param, std::string message, std::string code = "invalid_type") {
  return bad_field(std::move(param), std::move(message), std::move(code));
}

std::optional<ApiError> wrong_model(const std::string& asked, const ServedModel& model) {
  if (model.serves(asked)) return std::nullopt;
  return model_not_found(asked, model);
}

}  // namespace

std::variant<std::string, ApiError> tokenize_body(std::string_view body, const Tokenizer& tokenizer,
                                                  const ServedModel& model,
                                                  const ChatFormat* chat_format,
                                                  const ImagePrompter* images) {
  const json doc = json::parse(body, nullptr, false);
  if (!doc.is_object()) return bad("", "the body must be a JSON object");
  const ApiKind kind = doc.contains("messages") ? ApiKind::kChat : ApiKind::kCompletions;
  if (kind == ApiKind::kCompletions && !doc.contains("prompt")) {
    return bad("prompt", "give \"prompt\" (text or token ids) or \"messages\"", "missing");
  }
  auto parsed = parse_generation_call(body, kind);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const GenerationCall& call = std::get<GenerationCall>(parsed);
  if (auto e = wrong_model(call.model, model)) return *e;
  std::vector<int32_t> tokens;
  if (kind == ApiKind::kChat) {
    auto chat = chat_prompt(call.messages, chat_format, tokenizer, images);
    if (auto* e = std::get_if<ApiError>(&chat)) return *e;
    tokens = std::move(std::get<PromptWithImages>(chat).token_ids);
  } else if (!call.prompt_tokens.empty()) {
    tokens = call.prompt_tokens;
  } else {
    tokens = tokenizer.encode(call.prompt_text);
  }
  const json out{{"count", tokens.size()},
                 {"max_model_len", model.max_model_len},
                 {"tokens", tokens},
                 {"token_strs", nullptr}};
  return out.dump();
}

std::variant<std::string, ApiError> detokenize_body(std::string_view body,
                                                    const Tokenizer& tokenizer,
                                                    const ServedModel& model) {
  const json doc = json::parse(body, nullptr, false);
  if (!doc.is_object()) return bad("", "the body must be a JSON object");
  if (auto it = doc.find("model"); it != doc.end() && !it->is_null()) {
    if (!it->is_string()) return bad("model", "\"model\" must be a string");
    if (auto e = wrong_model(it->get<std::string>(), model)) return *e;
  }
  const auto tokens_it = doc.find("tokens");
  if (tokens_it == doc.end() || !tokens_it->is_array()) {
    return bad("tokens", "\"tokens\" must be a list of token ids", "missing");
  }
  std::vector<int32_t> ids;
  for (const auto& t : *tokens_it) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
        (model.vocab_size > 0 && t.get<int64_t>() >= model.vocab_size)) {
      return bad(
          "tokens",
          fmt::format("token ids are integers in [0, {}); got {}", model.vocab_size, t.dump()),
          "invalid_value");
    }
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return json{{"prompt", tokenizer.decode(ids)}}.dump(-1, ' ', false,
                                                      json::error_handler_t::replace);
}

}  // namespace ib::detail
