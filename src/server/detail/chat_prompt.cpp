// The prompt of a chat call (chat_prompt.h).
#include "server/detail/chat_prompt.h"

#include <nlohmann/json.hpp>

namespace ib::detail {

std::variant<std::vector<int32_t>, ApiError> chat_prompt_tokens(
    const std::vector<ChatMessage>& messages, const ChatFormat* format,
    const Tokenizer& tokenizer) {
  if (format == nullptr) return tokenizer.encode(render_chat(messages));
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
  auto text = format->render(list, /*add_generation_prompt=*/true);
  if (!text.ok()) return bad_field("messages", text.error().message, "invalid_value");
  return tokenizer.encode_without_specials(*text);
}

}  // namespace ib::detail
