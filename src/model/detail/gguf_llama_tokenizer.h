// The tokenizer.json document of a GGUF "llama" (SentencePiece BPE) tokenizer, private to
// model/: gguf_tokenizer's second path, so Llama-2, Mistral and Phi-3 GGUF files share the
// tokenizer.json machinery (bpe_tokenizer.h).
#pragma once

#include <nlohmann/json.hpp>

#include "model/gguf_file.h"

namespace ib::detail {

// tokens, types (may be null: all normal) and scores are the tokenizer.ggml.* arrays, of one
// length. Merges are rebuilt as transformers' SentencePiece converter does: every split of a
// normal token into two vocabulary pieces, ranked by the token's score (highest first). The
// normalizer prepends U+2581 (unless tokenizer.ggml.add_space_prefix is false) and replaces
// spaces with it; <0xNN> tokens are the byte fallback; BOS/EOS follow tokenizer.ggml.add_bos_token
// (default true) / add_eos_token (default false) and bos_token_id / eos_token_id.
nlohmann::json llama_tokenizer_document(const GgufFile& file, const GgufArray& tokens,
                                        const GgufArray* types, const GgufArray& scores);

}  // namespace ib::detail
