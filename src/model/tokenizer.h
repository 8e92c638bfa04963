// Tokenizer interface: the documented byte-level fallback (each UTF-8 byte b becomes token id
// b + 3; ids 0..2 reserved: pad, bos, eos), so text datasets run on dummy presets, and HF
// tokenizer.json BPE (bpe_tokenizer.h) where a model directory has one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace ib {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // As encode, without the BOS/EOS the tokenizer adds around a text (transformers'
  // add_special_tokens=False): for text a chat template rendered, which writes its own.
  virtual std::vector<int32_t> encode_without_specials(std::string_view text) const {
    return encode(text);
  }
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  // The text of ids that continue earlier text (a stream's next tokens): as decode, but without
  // the strip of a leading space that SentencePiece-style decoders apply at the start of a text.
  virtual std::string decode_continuation(const std::vector<int32_t>& ids) const {
    return decode(ids);
  }
};

// The byte-level fallback ("byte"): encode maps byte b to id b + 3 (no bos/eos added); decode maps
// ids 3..258 back to bytes, drops the reserved ids 0..2, and renders any other id (a dummy model
// can emit every id of its vocabulary) as U+FFFD, so decode never fails.
constexpr int32_t kBytePadId = 0;
constexpr int32_t kByteBosId = 1;
constexpr int32_t kByteEosId = 2;
constexpr int32_t kByteTokenOffset = 3;
std::unique_ptr<Tokenizer> make_byte_tokenizer();

// The tokenizer of --model: BPE from <dir>/tokenizer.json (and tokenizer_config.json) when model
// is a directory that has one, or from a GGUF file's tokenizer.ggml.* keys (load_gguf_tokenizer),
// else the byte fallback. User errors: an unreadable or unsupported tokenizer.json or GGUF
// tokenizer.
Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& model);
// Whether load_tokenizer(model) reads the model's own tokenizer rather than the byte fallback.
bool has_own_tokenizer(const std::string& model);

}  // namespace ib
