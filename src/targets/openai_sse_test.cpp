// The client's stream reading, request bodies per dialect, base URLs: no sockets.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "targets/detail/http_body.h"
#include "targets/detail/openai_sse.h"
#include "targets/openai_target.h"

namespace ib {
namespace {

using nlohmann::json;

TEST(SseParser, SameEventsWhereverTheBytesSplit) {
  const std::string stream =
      ": keep-alive comment\r\n\r\n"
      "data: {\"a\":1}\r\n\r\n"
      "event: message\ndata: first line\ndata: second\n\n"
      "data:[DONE]\n\n"
      "data: tail-without-blank-line\n";
  const std::vector<std::string> expected = {"{\"a\":1}", "first line\nsecond", "[DONE]"};
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    detail::SseParser parser;
    std::vector<std::string> got;
    auto sink = [&](std::string_view d) { got.emplace_back(d); };
    parser.feed(std::string_view(stream).substr(0, cut), sink);
    parser.feed(std::string_view(stream).substr(cut), sink);
    EXPECT_EQ(got, expected) << "cut at " << cut;
    EXPECT_FALSE(parser.idle());  // the last event never ended
  }
  detail::SseParser one_by_one;
  std::vector<std::string> got;
  for (char c : stream)
    one_by_one.feed(std::string_view(&c, 1), [&](auto d) { got.emplace_back(d); });
  EXPECT_EQ(got, expected);
}

TEST(ReadChunk, KindsOfStreamedChunks) {
  using detail::ChunkKind;
  using detail::read_chunk;
  const auto role = read_chunk(
      R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]})",
      false);
  EXPECT_EQ(role.kind, ChunkKind::kEmpty);  // role-only: not a token, never TTFT
  const auto content = read_chunk(
      R"({"choices":[{"delta":{"content":"Hé"},"finish_reason":"stop"}],
          "usage":{"prompt_tokens":3,"completion_tokens":7}})",
      true);
  EXPECT_EQ(content.kind, ChunkKind::kContent);
  EXPECT_EQ(content.text_bytes, 3u);
  EXPECT_EQ(content.text, "Hé");
  EXPECT_EQ(content.finish_reason, "stop");
  EXPECT_EQ(content.prompt_tokens, 3);
  EXPECT_EQ(content.completion_tokens, 7);
  EXPECT_EQ(read_chunk(R"({"choices":[{"text":"x","finish_reason":null}]})", false).kind,
            ChunkKind::kContent);
  EXPECT_EQ(read_chunk(R"({"choices":[{"delta":{"content":null}}]})", false).kind,
            ChunkKind::kEmpty);
  const auto usage = read_chunk(R"({"choices":[],"usage":{"completion_tokens":4}})", false);
  EXPECT_EQ(usage.kind, ChunkKind::kUsageOnly);
  EXPECT_EQ(usage.completion_tokens, 4);
  EXPECT_EQ(read_chunk("[DONE]", false).kind, ChunkKind::kDone);
  const auto err = read_chunk(R"({"error":{"message":"boom","type":"x"}})", false);
  EXPECT_EQ(err.kind, ChunkKind::kError);
  EXPECT_EQ(err.error, "boom");
  EXPECT_EQ(read_chunk("{oops", false).kind, ChunkKind::kUnreadable);
  EXPECT_EQ(read_chunk("[1]", false).kind, ChunkKind::kUnreadable);
}

TEST(ReadChunk, DecodesEscapesAndSkipsWhatItDoesNotNeed) {
  using detail::ChunkKind;
  const auto c = detail::read_chunk(
      R"({"id":"x","extra":{"deep":[1,{"a":[true,false,null,-1.5e3]}]},)"
      R"("choices":[{"text":"a\"b\\c\n\u00e9\ud83d\ude00","finish_reason":null},{"text":"ignored"}],)"
      R"("usage":{"prompt_tokens":2,"completion_tokens":3.5}})",
      true);
  EXPECT_EQ(c.kind, ChunkKind::kContent);
  EXPECT_EQ(c.text, "a\"b\\c\n\xC3\xA9\xF0\x9F\x98\x80");
  EXPECT_EQ(c.text_bytes, c.text.size());
  EXPECT_EQ(c.prompt_tokens, 2);
  EXPECT_FALSE(c.completion_tokens.has_value());  // not an integer: ignored
  for (const char* bad : {R"({"choices":[{"text":"x"})", R"({"a":1}x)", R"({"a":"\)", "", "{",
                          R"({"choices":[{"text":"\u12"}]})"}) {
    EXPECT_EQ(detail::read_chunk(bad, false).kind, ChunkKind::kUnreadable) << bad;
  }
  std::string deep(100, '[');
  EXPECT_EQ(detail::read_chunk(R"({"a":)" + deep, false).kind, ChunkKind::kUnreadable);
  EXPECT_EQ(detail::read_chunk(R"({"error":null,"choices":[]})", false).kind,
            ChunkKind::kUsageOnly);
}

TEST(BodyDecoder, ChunkedLengthAndCloseDelimitedBodies) {
  using detail::BodyDecoder;
  const std::string chunked = "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nTrailer: x\r\n\r\n";
  for (size_t cut = 0; cut <= chunked.size(); ++cut) {
    BodyDecoder d(BodyDecoder::Framing::kChunked, 0);
    std::string body;
    auto sink = [&](std::string_view s) { body.append(s); };
    ASSERT_TRUE(d.feed(std::string_view(chunked).substr(0, cut), sink));
    EXPECT_EQ(d.done(), cut == chunked.size()) << cut;
    ASSERT_TRUE(d.feed(std::string_view(chunked).substr(cut), sink));
    EXPECT_TRUE(d.done());
    EXPECT_EQ(body, "hello world");
  }
  BodyDecoder bad(BodyDecoder::Framing::kChunked, 0);
  EXPECT_FALSE(bad.feed("zz\r\n", [](std::string_view) {}));
  EXPECT_FALSE(bad.error().empty());
  BodyDecoder no_crlf(BodyDecoder::Framing::kChunked, 0);
  EXPECT_FALSE(no_crlf.feed("2\r\nabXY", [](std::string_view) {}));

  BodyDecoder length(BodyDecoder::Framing::kLength, 4);
  std::string body;
  ASSERT_TRUE(length.feed("abcdef", [&](std::string_view s) { body.append(s); }));
  EXPECT_EQ(body, "abcd");  // bytes past the body are not body
  EXPECT_TRUE(length.done());
  BodyDecoder close(BodyDecoder::Framing::kUntilClose, 0);
  ASSERT_TRUE(close.feed("xyz", [&](std::string_view s) { body.append(s); }));
  EXPECT_FALSE(close.done());
}

TEST(ApportionTokens, ExactFromUsageElseByTextLength) {
  using detail::apportion_tokens;
  EXPECT_EQ(apportion_tokens({3, 1, 1}, {2, 1, 1}, 4), (std::vector<int>{2, 1, 1}));
  // Usage deltas that do not add up are not trusted.
  EXPECT_EQ(apportion_tokens({1, 1}, {1, 1}, 5), (std::vector<int>{3, 2}));
  // 10 tokens over chunks of 1, 1 and 8 bytes: one each, the 7 extra by length.
  EXPECT_EQ(apportion_tokens({1, 1, 8}, {-1, -1, -1}, 10), (std::vector<int>{1, 1, 8}));
  EXPECT_EQ(apportion_tokens({2, 2}, {}, 2), (std::vector<int>{1, 1}));
  EXPECT_EQ(apportion_tokens({2, 2, 2}, {}, 1), (std::vector<int>{1, 1, 1}));  // fewer: kept 1
  const auto even = apportion_tokens({0, 0, 0}, {}, 7);
  EXPECT_EQ(even[0] + even[1] + even[2], 7);
  EXPECT_TRUE(apportion_tokens({}, {}, 3).empty());
}

TEST(OpenAiRequestBody, FieldsFollowTheDialect) {
  OpenAITargetOptions o;
  o.model = "m";
  o.sampling.temperature = 0;
  RequestSpec r;
  r.id = 7;
  r.prompt_tokens = {1, 2, 3};
  r.input_len = 3;
  r.output_len = 9;
  const json vllm = json::parse(*openai_request_body(o, Dialect::kVllm, r));
  EXPECT_EQ(vllm["prompt"], json::array({1, 2, 3}));
  EXPECT_EQ(vllm["max_tokens"], 9);
  EXPECT_EQ(vllm["ignore_eos"], true);
  EXPECT_EQ(vllm["stream"], true);
  EXPECT_EQ(vllm["stream_options"]["include_usage"], true);
  EXPECT_EQ(vllm["stream_options"]["continuous_usage_stats"], true);
  EXPECT_FALSE(vllm.contains("seed"));  // greedy

  const json hosted = json::parse(*openai_request_body(o, Dialect::kOpenAI, r));
  EXPECT_TRUE(hosted["prompt"].is_string());  // token ids become words
  EXPECT_EQ(hosted["prompt"], "of and to");
  EXPECT_FALSE(hosted.contains("ignore_eos"));
  EXPECT_FALSE(hosted["stream_options"].contains("continuous_usage_stats"));

  o.chat = true;
  o.sampling.temperature = 0.7f;
  o.sampling.top_k = 5;
  o.sampling.seed = 100;
  o.extra_body = R"({"max_tokens": 4, "min_tokens": 2})";
  const json chat = json::parse(*openai_request_body(o, Dialect::kTgi, r));
  EXPECT_EQ(chat["messages"][0]["role"], "user");
  EXPECT_EQ(chat["messages"][0]["content"], "of and to");
  EXPECT_EQ(chat["seed"], 107);
  EXPECT_FALSE(chat.contains("top_k"));  // TGI's OpenAI API has none
  EXPECT_EQ(chat["max_tokens"], 4);      // --extra-body wins
  EXPECT_EQ(chat["min_tokens"], 2);
  r.prompt_text = "literal";
  o.chat = false;
  EXPECT_EQ(json::parse(*openai_request_body(o, Dialect::kVllm, r))["prompt"], "literal");
  o.extra_body = "[1]";
  EXPECT_FALSE(openai_request_body(o, Dialect::kVllm, r).ok());
}

TEST(BaseUrl, ParsesAndInfersTheDialect) {
  auto u = parse_base_url("http://127.0.0.1:8000");
  ASSERT_TRUE(u.ok());
  EXPECT_FALSE(u->tls);
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, "8000");
  EXPECT_EQ(u->path_prefix, "");
  EXPECT_EQ(*resolve_dialect("auto", *u), Dialect::kVllm);
  auto h = parse_base_url("https://api.example.com/openai/");
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(h->tls);
  EXPECT_EQ(h->port, "443");
  EXPECT_EQ(h->path_prefix, "/openai");
  EXPECT_EQ(*resolve_dialect("auto", *h), Dialect::kOpenAI);
  EXPECT_EQ(*resolve_dialect("ollama", *h), Dialect::kOllama);
  EXPECT_EQ(*resolve_dialect("inferbench", *h), Dialect::kVllm);
  EXPECT_FALSE(resolve_dialect("bogus", *h).ok());
  auto v6 = parse_base_url("http://[::1]:9000/x");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, "9000");
  for (const char* bad : {"ftp://x", "127.0.0.1:8000", "http://", "http://h:99999",
                          "http://user:pw@h", "http://h:"}) {
    EXPECT_FALSE(parse_base_url(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace ib
