// POST /tokenize and /detokenize, as vLLM's OpenAI server offers them: the served model's
// tokenizer exactly as the generation endpoints apply it, so that clients can check the token
// counts a benchmark is built on.
#pragma once

#include <string>
#include <string_view>
#include <variant>

#include "model/chat_template.h"
#include "model/tokenizer.h"
#include "server/image_prompter.h"
#include "server/protocol.h"

namespace ib::detail {

// {"model"?, "prompt": text | token ids} or {"model"?, "messages": [...]} (rendered as
// /v1/chat/completions renders them) -> {"count", "max_model_len", "tokens", "token_strs": null}.
// chat_format: the model's chat template, or null; images: the model's, or null (chat_prompt.h):
// an image counts its visual tokens.
std::variant<std::string, ApiError> tokenize_body(std::string_view body, const Tokenizer& tokenizer,
                                                  const ServedModel& model,
                                                  const ChatFormat* chat_format,
                                                  const ImagePrompter* images);
// {"model"?, "tokens": [ids]} -> {"prompt": text}. Ids outside the vocabulary are a 400.
std::variant<std::string, ApiError> detokenize_body(std::string_view body,
                                                    const Tokenizer& tokenizer,
                                                    const ServedModel& model);

}  // namespace ib::detail
