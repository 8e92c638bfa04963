// SentencePiece-style BPE tokenizer.json files (Llama-2, Gemma) and the pipeline steps they use:
// Prepend/Replace/NFKC normalizers, Split/Digits/Metaspace pre-tokenizers, byte fallback, unknown
// fusing, TemplateProcessing and tokenizer_config.json's add_bos_token / add_eos_token.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "model/bpe_tokenizer.h"
#include "model/detail/tokenizer_steps.h"

namespace ib {
namespace {

using Ids = std::vector<int32_t>;

// A Llama-2-shaped file: ▁ prepended and spaces replaced by the normalizer, no pre-tokenizer,
// <0xNN> byte tokens for the three bytes of 中, the decoder chain Llama-2 ships.
constexpr std::string_view kLlama2Like = R"({
  "added_tokens": [{"id": 0, "content": "<unk>", "special": true},
                   {"id": 1, "content": "<s>", "special": true},
                   {"id": 2, "content": "</s>", "special": true}],
  "normalizer": {"type": "Sequence", "normalizers": [
      {"type": "Prepend", "prepend": "▁"},
      {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
  "pre_tokenizer": null,
  "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
  "decoder": {"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
      {"type": "ByteFallback"}, {"type": "Fuse"},
      {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
  "model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true,
    "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0xE4>": 3, "<0xB8>": 4, "<0xAD>": 5, "▁": 6,
              "h": 7, "e": 8, "l": 9, "o": 10, "w": 11, "r": 12, "d": 13, "▁h": 14, "el": 15,
              "▁hel": 16, "lo": 17, "▁hello": 18, "▁w": 19, "or": 20, "▁wor": 21, "ld": 22,
              "▁world": 23},
    "merges": ["▁ h", "e l", "▁h el", "l o", "▁hel lo", "▁ w", "o r", "▁w or", "l d", "▁wor ld"]}
})";

std::unique_ptr<Tokenizer> make(std::string_view json, std::string_view config = {}) {
  auto t = parse_bpe_tokenizer(json, "test", config);
  EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message);
  return t.ok() ? std::move(t).value() : nullptr;
}

TEST(SentencePieceBpe, PrependReplaceAndBos) {
  const auto t = make(kLlama2Like);
  EXPECT_EQ(t->encode("hello world"), (Ids{1, 18, 23}));
  EXPECT_EQ(t->encode(" world"), (Ids{1, 6, 23}));  // "▁▁world"
  EXPECT_EQ(t->encode(""), (Ids{1}));
  EXPECT_EQ(t->encode("<s>hello"), (Ids{1, 1, 18}));  // special tokens are never split
}

TEST(SentencePieceBpe, ByteFallbackAndFusedUnknowns) {
  const auto t = make(kLlama2Like);
  EXPECT_EQ(t->encode("\xE4\xB8\xAD"), (Ids{1, 6, 3, 4, 5}));  // 中: ▁ then its three bytes
  EXPECT_EQ(t->encode("hé\xC3\xA9"), (Ids{1, 14, 0}));         // é é: no byte tokens, one <unk>
}

TEST(SentencePieceBpe, DecodeStripsTheAddedSpaceAndJoinsBytes) {
  const auto t = make(kLlama2Like);
  for (const std::string text : {"hello world", "\xE4\xB8\xAD", " world", "hello  world"}) {
    EXPECT_EQ(t->decode(t->encode(text)), text);
  }
  EXPECT_EQ(t->decode({1, 18, 2}), "hello");
  // A stream's next tokens keep their space: "hello" then " world", token by token.
  EXPECT_EQ(t->decode_continuation({23}), " world");
  EXPECT_EQ(t->decode({18}) + t->decode_continuation({23}), "hello world");
}

TEST(SentencePieceBpe, TokenizerConfigDecidesBosAndEos) {
  EXPECT_EQ(make(kLlama2Like, R"({"add_bos_token": false})")->encode("hello"), (Ids{18}));
  EXPECT_EQ(make(kLlama2Like, R"({"add_bos_token": true, "add_eos_token": true,
                                   "bos_token": "<s>", "eos_token": {"content": "</s>"}})")
                ->encode("hello"),
            (Ids{1, 18, 2}));
  EXPECT_FALSE(parse_bpe_tokenizer(kLlama2Like, "t", "[1]").ok());
}

TEST(SentencePieceBpe, UnsupportedComponentsAreNamed) {
  nlohmann::json doc = nlohmann::json::parse(kLlama2Like);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"normalizer", "normalizer 'BertNormalizer' is not supported"},
      {"pre_tokenizer", "pre-tokenizer 'BertNormalizer' is not supported"},
      {"decoder", "decoder 'BertNormalizer' is not supported"},
      {"post_processor", "post-processor 'BertNormalizer' is not supported"}};
  for (const auto& [field, message] : cases) {
    nlohmann::json bad = doc;
    bad[field] = {{"type", "BertNormalizer"}};
    auto t = parse_bpe_tokenizer(bad.dump(), "t");
    ASSERT_FALSE(t.ok()) << field;
    EXPECT_NE(t.error().message.find(message), std::string::npos) << t.error().message;
  }
  doc["model"]["type"] = "Unigram";
  auto unigram = parse_bpe_tokenizer(doc.dump(), "t");
  ASSERT_FALSE(unigram.ok());
  EXPECT_NE(unigram.error().message.find("model type 'Unigram' is not supported; inferbench "
                                         "reads BPE"),
            std::string::npos);
}

std::vector<std::string> pre(const char* json, std::string_view text, bool first = true) {
  auto p = detail::parse_pre_tokenizer(nlohmann::json::parse(json));
  EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error().message);
  return detail::pre_tokenize(*p, text, first);
}

TEST(TokenizerSteps, PreTokenizers) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pre(R"({"type": "Digits", "individual_digits": true})", "ab12c3"),
            (V{"ab", "1", "2", "c", "3"}));
  EXPECT_EQ(pre(R"({"type": "Digits", "individual_digits": false})", "ab12c3"),
            (V{"ab", "12", "c", "3"}));
  EXPECT_EQ(pre(R"({"type": "Split", "pattern": {"String": " "}, "behavior":
                    "MergedWithPrevious"})",
                "a b  c"),
            (V{"a ", "b ", " ", "c"}));
  EXPECT_EQ(
      pre(R"({"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Removed"})", "a \t b"),
      (V{"a", "b"}));
  EXPECT_EQ(pre(R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                    "split": true})",
                "hi you"),
            (V{"▁hi", "▁you"}));
  EXPECT_EQ(
      pre(R"({"type": "Metaspace", "prepend_scheme": "first", "split": false})", "hi you", false),
      (V{"hi▁you"}));
}

TEST(TokenizerSteps, NormalizersAndDecoders) {
  auto n = detail::parse_normalizer(nlohmann::json::parse(
      R"({"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]})"));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(detail::normalize(*n, "\xEF\xAC\x81LE \xEF\xBC\xA1"), "file a");  // ﬁLE Ａ
  auto nfc = detail::parse_normalizer(nlohmann::json::parse(R"({"type": "NFC"})"));
  ASSERT_TRUE(nfc.ok());
  EXPECT_EQ(detail::normalize(*nfc, "e\xCC\x81"), "\xC3\xA9");  // e + U+0301 -> é
  auto d = detail::parse_decoder(
      nlohmann::json::parse(R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme":
                                "always"})"));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(detail::decode_tokens(*d, {"▁Hi", "▁there"}), "Hi there");
}

}  // namespace
}  // namespace ib
