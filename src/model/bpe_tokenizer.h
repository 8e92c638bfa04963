// BPE tokenizers from a Hugging Face tokenizer.json: byte-level ones (GPT-2, Llama-3, Qwen2,
// DeepSeek-V3) and SentencePiece-style ones (Llama-2, Mistral, Phi-3, Gemma: Metaspace or a
// Prepend+Replace normalizer, byte fallback). Added tokens are split out first (longest match;
// special ones are never split), then each section is normalized, pre-tokenized and merged by
// the BPE model; the post-processor's TemplateProcessing adds BOS/EOS, unless tokenizer_config.json
// states add_bos_token / add_eos_token, which then decide. decode() skips special tokens and
// returns raw bytes (a token may end inside a UTF-8 character). Supported components are listed
// in detail/tokenizer_steps.h; any other is a user error naming it.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "core/result.h"
#include "model/tokenizer.h"

namespace ib {

// User errors: not JSON, an unsupported model, normalizer, pre-tokenizer, post-processor or
// decoder. tokenizer_config_json may be empty (no tokenizer_config.json). origin names the file.
Result<std::unique_ptr<Tokenizer>> parse_bpe_tokenizer(std::string_view tokenizer_json,
                                                       const std::string& origin,
                                                       std::string_view tokenizer_config_json = {});
// Reads file and, when there, tokenizer_config.json beside it.
Result<std::unique_ptr<Tokenizer>> load_bpe_tokenizer(const std::filesystem::path& file);

}  // namespace ib
