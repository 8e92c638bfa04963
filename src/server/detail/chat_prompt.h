// The prompt of a chat call, shared by /v1/chat/completions and /tokenize.
#pragma once

#include <cstdint>
#include <variant>
#include <vector>

#include "model/chat_template.h"
#include "model/tokenizer.h"
#include "server/protocol.h"

namespace ib::detail {

// The model's chat template (add_generation_prompt=True), tokenized without the tokenizer's own
// BOS/EOS (the template writes them, as transformers' apply_chat_template(tokenize=True) and
// vLLM do), when format is not null; else render_chat's fixed format, tokenized as a text prompt.
// A template that rejects the messages (raise_exception) or fails on them gives a 400 on
// "messages" with the template's message.
std::variant<std::vector<int32_t>, ApiError> chat_prompt_tokens(
    const std::vector<ChatMessage>& messages, const ChatFormat* format, const Tokenizer& tokenizer);

}  // namespace ib::detail
