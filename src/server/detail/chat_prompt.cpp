// The prompt of a chat call (chat_prompt.h).
#include "server/detail/chat_prompt.h"

#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace ib::detail {
namespace {

// text tokenized piece by piece around each kImagePlaceholder, which becomes image_token; the
// first piece as the whole text would be (encode), the others without specials.
std::vector<int32_t> tokens_around_placeholders(std::string_view text, bool first_with_specials,
                                                const Tokenizer& tokenizer, int32_t image_token,
                                                size_t& placeholders) {
  std::vector<int32_t> out;
  placeholders = 0;
  for (bool first = true;; first = false) {
    const size_t at = text.find(kImagePlaceholder);
    const std::string_view piece = text.substr(0, at);
    const auto ids = first && first_with_specials ? tokenizer.encode(piece)
                                                  : tokenizer.encode_without_specials(piece);
    out.insert(out.end(), ids.begin(), ids.end());
    if (at == std::string_view::npos) return out;
    out.push_back(image_token);
    ++placeholders;
    text.remove_prefix(at + kImagePlaceholder.size());
  }
}

}  // namespace

std::variant<PromptWithImages, ApiError> chat_prompt(const std::vector<ChatMessage>& messages,
                                                     const ChatFormat* format,
                                                     const Tokenizer& tokenizer,
                                                     const ImagePrompter* images) {
  std::vector<ChatImage> parts;
  for (const ChatMessage& m : messages) parts.insert(parts.end(), m.images.begin(), m.images.end());
  if (!parts.empty() && images == nullptr) {
    return bad_field(parts.front().param,
                     "the served model has no vision tower, so it cannot take image_url parts; "
                     "send text parts only",
                     "unsupported");
  }
  std::string text;
  if (format == nullptr) {
    text = render_chat(messages);
  } else {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const ChatMessage& m : messages) {
      list.push_back({{"role", m.role}, {"content", m.content}});
    }
    auto rendered = format->render(list, /*add_generation_prompt=*/true);
    if (!rendered.ok()) return bad_field("messages", rendered.error().message, "invalid_value");
    text = std::move(*rendered);
  }
  if (parts.empty()) {
    PromptWithImages out;
    out.token_ids =
        format == nullptr ? tokenizer.encode(text) : tokenizer.encode_without_specials(text);
    return out;
  }
  size_t placeholders = 0;
  const std::vector<int32_t> tokens = tokens_around_placeholders(
      text, format == nullptr, tokenizer, images->image_token_id(), placeholders);
  if (placeholders != parts.size()) {
    return bad_field("messages",
                     fmt::format("the prompt holds {} {} for {} image_url part(s); a text part "
                                 "must not hold {} itself",
                                 placeholders, kImagePlaceholder, parts.size(), kImagePlaceholder),
                     "invalid_value");
  }
  return images->place(tokens, parts);
}

}  // namespace ib::detail
