// The prompt of a chat call, shared by /v1/chat/completions and /tokenize.
#pragma once

#include <cstdint>
#include <variant>
#include <vector>

#include "model/chat_template.h"
#include "model/tokenizer.h"
#include "server/image_prompter.h"
#include "server/protocol.h"

namespace ib::detail {

// The model's chat template (add_generation_prompt=True), tokenized without the tokenizer's own
// BOS/EOS (the template writes them, as transformers' apply_chat_template(tokenize=True) and
// vLLM do), when format is not null; else render_chat's fixed format, tokenized as a text prompt.
// A template that rejects the messages (raise_exception) or fails on them gives a 400 on
// "messages" with the template's message.
// Image parts: the rendered text is tokenized around each kImagePlaceholder, which becomes the
// model's image token, then images places the images (their visual tokens). Without images (a
// model with no vision tower) an image part is a 400 naming it.
std::variant<PromptWithImages, ApiError> chat_prompt(const std::vector<ChatMessage>& messages,
                                                     const ChatFormat* format,
                                                     const Tokenizer& tokenizer,
                                                     const ImagePrompter* images);

}  // namespace ib::detail
