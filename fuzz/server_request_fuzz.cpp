// Fuzzes the server's request parsing: any body must give a call or an OpenAI-style error,
// never a crash; the error body and every string the server would stream must be valid JSON.
// The first byte picks the endpoint (even: completions, odd: chat).
#include <cstdint>
#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

#include "core/assert.h"
#include "server/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto kind = (data[0] & 1) != 0 ? ib::ApiKind::kChat : ib::ApiKind::kCompletions;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  const auto parsed = ib::parse_generation_call(body, kind);
  if (const auto* e = std::get_if<ib::ApiError>(&parsed)) {
    IB_ASSERT(e->status == 400 && !e->message.empty(), "an error without status or message");
    IB_ASSERT(!nlohmann::json::parse(ib::error_body(*e), nullptr, false).is_discarded(),
              "an error body that is not JSON");
  } else {
    const auto& call = std::get<ib::GenerationCall>(parsed);
    IB_ASSERT(!call.max_tokens || *call.max_tokens > 0, "accepted max_tokens <= 0");
    IB_ASSERT(call.temperature >= 0 && call.top_p > 0 && call.top_p <= 1, "bad sampling values");
    const std::string prompt =
        kind == ib::ApiKind::kChat ? ib::render_chat(call.messages) : call.prompt_text;
    const int len = static_cast<int>(prompt.size() + call.prompt_tokens.size());
    const auto checked = ib::check_against_model(call, len, call.prompt_tokens,
                                                 ib::ServedModel{"m", 4096, 32000, {}});
    if (const auto* n = std::get_if<int>(&checked)) {
      IB_ASSERT(*n > 0 && len + *n <= 4096, "a checked call that does not fit the context");
    }
  }
  std::string literal;
  ib::append_json_string(literal, body);
  IB_ASSERT(!nlohmann::json::parse(literal, nullptr, false).is_discarded(),
            "a streamed string that is not JSON");
  IB_ASSERT(ib::complete_utf8_prefix(body) <= body.size(), "prefix beyond the text");
  return 0;
}
