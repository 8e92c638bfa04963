// Byte-level BPE from a Hugging Face tokenizer.json (GPT-2, Llama-3, Qwen2 style): added and
// special tokens split out first, the pre-tokenizer's split regex, the GPT-2 byte-to-unicode
// map, merges applied by rank (lowest first), and "ignore_merges" (a piece found whole in the
// vocabulary is one token). decode() skips special tokens and returns raw bytes (a token may end
// inside a UTF-8 character). Normalizers and post-processors (BOS insertion) are not applied.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "core/result.h"
#include "model/tokenizer.h"

namespace ib {

// User errors: not JSON, not a byte-level BPE model, a pre-tokenizer regex other than the
// GPT-2 / Llama-3 / Qwen2 ones. origin names the file in messages.
Result<std::unique_ptr<Tokenizer>> parse_bpe_tokenizer(std::string_view tokenizer_json,
                                                       const std::string& origin);
Result<std::unique_ptr<Tokenizer>> load_bpe_tokenizer(const std::filesystem::path& file);

}  // namespace ib
