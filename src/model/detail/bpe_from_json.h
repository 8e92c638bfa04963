// The BPE tokenizer from an already parsed tokenizer.json document and tokenizer_config.json
// (null when there is none), private to model/: parse_bpe_tokenizer's second half, also fed by
// the GGUF tokenizer (gguf_tokenizer.cpp).
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "core/result.h"
#include "model/tokenizer.h"

namespace ib::detail {

Result<std::unique_ptr<Tokenizer>> bpe_tokenizer_from_json(const nlohmann::json& doc,
                                                           const std::string& origin,
                                                           const nlohmann::json& config);

}  // namespace ib::detail
