#include "model/bpe_tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "model/detail/regex.h"
#include "model/detail/split_regexes.h"

namespace ib {
namespace {

// A small GPT-2-style tokenizer.json: byte-level pre-tokenizer, a handful of ranked merges that
// build "hello" and " world" (Ġ = the mapped space byte), "é" from its two mapped bytes, and one
// special token.
constexpr std::string_view kTokenizerJson = R"({
  "added_tokens": [{"id": 100, "content": "<|end|>", "special": true},
                   {"id": 101, "content": "<tool>", "special": false}],
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
  "decoder": {"type": "ByteLevel"},
  "model": {
    "type": "BPE",
    "vocab": {"h": 0, "e": 1, "l": 2, "o": 3, "Ġ": 4, "w": 5, "r": 6, "d": 7, "he": 8,
              "ll": 9, "hell": 10, "hello": 11, "Ġw": 12, "or": 13, "Ġwor": 14, "ld": 15,
              "Ġworld": 16, "!": 17, "Ċ": 18, "Ã": 19, "©": 20, "Ã©": 21},
    "merges": ["h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld",
               ["Ã", "©"]]
  }
})";

std::unique_ptr<Tokenizer> tokenizer() {
  auto t = parse_bpe_tokenizer(kTokenizerJson, "test");
  EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message);
  return std::move(t).value();
}

using Ids = std::vector<int32_t>;

TEST(BpeTokenizer, MergesByRank) {
  const auto t = tokenizer();
  EXPECT_EQ(t->name(), "bpe");
  EXPECT_EQ(t->encode("hello world"), (Ids{11, 16}));
  EXPECT_EQ(t->encode("hell"), (Ids{10}));
  EXPECT_EQ(t->encode("dew"), (Ids{7, 1, 5}));      // no merge applies
  EXPECT_EQ(t->encode("world"), (Ids{5, 13, 15}));  // "Ġw" needs the space: w, or, ld
  EXPECT_EQ(t->encode("hello!\n"), (Ids{11, 17, 18}));
  EXPECT_EQ(t->encode("\xC3\xA9"), (Ids{21}));  // "é": two mapped bytes merged
}

TEST(BpeTokenizer, AddedTokensSplitFirstAndSpecialOnesDecodeToNothing) {
  const auto t = tokenizer();
  EXPECT_EQ(t->encode("hello<|end|>hello"), (Ids{11, 100, 11}));
  EXPECT_EQ(t->encode("<tool>world"), (Ids{101, 5, 13, 15}));
  EXPECT_EQ(t->decode({11, 100, 16}), "hello world");
  EXPECT_EQ(t->decode({101, 17}), "<tool>!");
}

TEST(BpeTokenizer, DecodeInvertsEncodeAndKeepsPartialBytes) {
  const auto t = tokenizer();
  for (const std::string text : {"hello world", "hello\n", "\xC3\xA9!"}) {
    EXPECT_EQ(t->decode(t->encode(text)), text);
  }
  EXPECT_EQ(t->decode({19}), "\xC3");  // half of "é": raw byte, no replacement
  EXPECT_EQ(t->decode({999, -1}), "\xEF\xBF\xBD\xEF\xBF\xBD");  // unknown ids
}

TEST(BpeTokenizer, RejectsWhatItCannotRun) {
  EXPECT_FALSE(parse_bpe_tokenizer("{", "t").ok());
  EXPECT_FALSE(parse_bpe_tokenizer(R"({"model": {"type": "Unigram", "vocab": []}})", "t").ok());
  auto odd = parse_bpe_tokenizer(
      R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(\\w+"}},
          "model": {"type": "BPE", "vocab": {}, "merges": []}})",
      "t");
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.error().message.find("regex"), std::string::npos) << odd.error().message;
  auto bert = parse_bpe_tokenizer(
      R"({"pre_tokenizer": {"type": "BertPreTokenizer"},
          "model": {"type": "BPE", "vocab": {}, "merges": []}})",
      "t");
  ASSERT_FALSE(bert.ok());
  EXPECT_NE(bert.error().message.find("pre-tokenizer 'BertPreTokenizer' is not supported"),
            std::string::npos)
      << bert.error().message;
  EXPECT_FALSE(parse_bpe_tokenizer(R"({"model": {"vocab": {"a": "x"}, "merges": []},
      "pre_tokenizer": {"type": "ByteLevel"}})",
                                   "t")
                   .ok());
}

TEST(BpeTokenizer, LoadTokenizerPicksTokenizerJsonOrTheByteFallback) {
  const auto dir = std::filesystem::temp_directory_path() / "ib_bpe_tokenizer_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << kTokenizerJson;
  auto bpe = load_tokenizer(dir.string());
  ASSERT_TRUE(bpe.ok());
  EXPECT_EQ((*bpe)->name(), "bpe");
  auto preset = load_tokenizer("tiny-15m");
  ASSERT_TRUE(preset.ok());
  EXPECT_EQ((*preset)->name(), "byte");
  std::ofstream(dir / "tokenizer.json") << "not json";
  EXPECT_FALSE(load_tokenizer(dir.string()).ok());
  std::filesystem::remove_all(dir);
}

std::vector<std::string> pieces(std::string_view text, std::string_view regex) {
  auto compiled = detail::Regex::compile(regex);
  EXPECT_TRUE(compiled.ok());
  std::vector<std::string> out;
  size_t at = 0;
  for (const auto& [begin, end] : compiled->find_all(text)) {
    if (begin > at) out.emplace_back(text.substr(at, begin - at));
    out.emplace_back(text.substr(begin, end - begin));
    at = end;
  }
  if (at < text.size()) out.emplace_back(text.substr(at));
  return out;
}

TEST(SplitRegex, Gpt2) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("Hello, world!! 12345 it's\n\n  x", detail::kGpt2Regex),
            (V{"Hello", ",", " world", "!!", " 12345", " it", "'s", "\n\n ", " x"}));
  EXPECT_EQ(pieces("na\xC3\xAFve \xE6\x97\xA5\xE6\x9C\xAC  ", detail::kGpt2Regex),
            (V{"na\xC3\xAFve", " \xE6\x97\xA5\xE6\x9C\xAC", "  "}));
  EXPECT_EQ(pieces("IT'S", detail::kGpt2Regex), (V{"IT", "'", "S"}));  // case-sensitive
}

TEST(SplitRegex, Llama3AndQwen2) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("Hello, world!! 12345 it's\n\n  x", detail::kLlama3Regex),
            (V{"Hello", ",", " world", "!!", " ", "123", "45", " it", "'s", "\n\n", " ", " x"}));
  EXPECT_EQ(pieces("IT'S a.\n b", detail::kLlama3Regex), (V{"IT", "'S", " a", ".\n", " b"}));
  EXPECT_EQ(pieces("x 2024", detail::kQwen2Regex), (V{"x", " ", "2", "0", "2", "4"}));
}

TEST(SplitRegex, PiecesCoverInvalidUtf8) {
  const std::string text = "a\xFF\xC3 b";
  std::string joined;
  for (const auto& p : pieces(text, detail::kLlama3Regex)) joined += p;
  EXPECT_EQ(joined, text);
}

}  // namespace
}  // namespace ib
