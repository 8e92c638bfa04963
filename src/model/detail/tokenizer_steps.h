// The pipeline stages of a tokenizer.json around its model (private to model/): normalizers,
// pre-tokenizers and decoders, each parsed once from its JSON and then applied without state.
// Supported: normalizers Prepend, Replace, NFC, NFD, NFKC, NFKD, Lowercase, Sequence;
// pre-tokenizers ByteLevel, Split, Digits, Metaspace, Sequence; decoders ByteLevel,
// ByteFallback, Fuse, Strip, Replace, Metaspace, Sequence. Anything else is a user error naming
// the component and this list.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/result.h"
#include "model/detail/regex.h"

namespace ib::detail {

// A literal or regex pattern ({"String": s} or {"Regex": r}), for Split and Replace.
struct Pattern {
  std::string literal;
  std::optional<Regex> regex;
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;
  // text with every match replaced by with.
  std::string replace_all(std::string_view text, std::string_view with) const;
};
// component names the owner in errors ("normalizer Replace").
Result<Pattern> parse_pattern(const nlohmann::json& node, std::string_view component);

struct NormalizerStep {
  enum class Kind { kPrepend, kReplace, kNfc, kNfd, kNfkc, kNfkd, kLowercase };
  Kind kind = Kind::kNfc;
  std::string text;  // Prepend: the prefix; Replace: the replacement
  Pattern pattern;   // Replace
};
using Normalizer = std::vector<NormalizerStep>;

// A null normalizer is an empty one.
Result<Normalizer> parse_normalizer(const nlohmann::json& node);
std::string normalize(const Normalizer& normalizer, std::string text);

enum class SplitBehavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct PreTokenizerStep {
  enum class Kind { kByteLevel, kSplit, kDigits, kMetaspace };
  Kind kind = Kind::kSplit;
  Pattern pattern;  // Split; ByteLevel with use_regex: the GPT-2 regex
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool use_regex = false;           // ByteLevel
  bool add_prefix_space = false;    // ByteLevel; Metaspace (prepend_scheme "always")
  bool prepend_first_only = false;  // Metaspace prepend_scheme "first"
  bool individual_digits = false;   // Digits
  bool split = true;                // Metaspace
  std::string replacement;          // Metaspace
};

struct PreTokenizer {
  std::vector<PreTokenizerStep> steps;
  bool byte_level = false;  // a ByteLevel step maps bytes to GPT-2's visible characters
};

Result<PreTokenizer> parse_pre_tokenizer(const nlohmann::json& node);
// The pieces the model encodes one by one. first_section: text starts the input (no added
// token before it), for Metaspace's prepend_scheme "first".
std::vector<std::string> pre_tokenize(const PreTokenizer& pre, std::string_view text,
                                      bool first_section);

struct DecoderStep {
  enum class Kind { kByteLevel, kByteFallback, kFuse, kStrip, kReplace, kMetaspace };
  Kind kind = Kind::kFuse;
  Pattern pattern;      // Replace
  std::string content;  // Replace: the replacement; Strip: the character; Metaspace: U+2581
  size_t start = 0;     // Strip
  size_t stop = 0;      // Strip
  bool strip_first_space = true;  // Metaspace: prepend_scheme is not "never"
};
using Decoder = std::vector<DecoderStep>;

Result<Decoder> parse_decoder(const nlohmann::json& node);
// Model tokens (vocabulary strings) to text; with no decoder the tokens are concatenated.
// continuation: the tokens follow earlier text, so Strip's start and Metaspace's first-token
// space removal do not apply.
std::string decode_tokens(const Decoder& decoder, std::vector<std::string> tokens,
                          bool continuation = false);

// GPT-2's byte-to-unicode map: printable bytes stand for themselves, the other 68 bytes take the
// code points 256, 257, ... in byte order, so every byte is a visible character.
const std::array<char32_t, 256>& byte_to_codepoint();
// cp below U+0800 (the byte map's range) as UTF-8.
void append_utf8(std::string& out, char32_t cp);

}  // namespace ib::detail
