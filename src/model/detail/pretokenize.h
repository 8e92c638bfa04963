// The split step of byte-level BPE tokenizers, written out by hand for the three regexes that
// GPT-2, Llama-3 and Qwen2 tokenizer.json files carry (std::regex has no \p{L}). Unicode classes
// come from a compact range table: exact for ASCII, Latin, Greek, Cyrillic, Armenian, Hebrew,
// Arabic, kana and CJK; combining marks of Indic and other scripts count as letters.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ib::detail {

enum class SplitPattern {
  kGpt2,    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kLlama3,  // (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|...
  kQwen2,   // as Llama-3 with \p{N} (one digit per piece)
};

// The pattern of a tokenizer.json Split regex, when it is one of the three.
std::optional<SplitPattern> split_pattern_of(std::string_view regex);
inline constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Splits UTF-8 text into pieces (byte ranges of text) as the regex's find_iter would; bytes that
// are not valid UTF-8 count as one "other" character each.
std::vector<std::string_view> split_pieces(std::string_view text, SplitPattern pattern);

}  // namespace ib::detail
