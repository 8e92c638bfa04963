#include "server/protocol.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace ib {
namespace {

GenerationCall parse_ok(std::string_view body, ApiKind kind = ApiKind::kCompletions) {
  auto r = parse_generation_call(body, kind);
  if (auto* e = std::get_if<ApiError>(&r)) ADD_FAILURE() << body << " -> " << e->message;
  return std::holds_alternative<GenerationCall>(r) ? std::get<GenerationCall>(r) : GenerationCall{};
}

ApiError parse_err(std::string_view body, ApiKind kind = ApiKind::kCompletions) {
  auto r = parse_generation_call(body, kind);
  if (std::holds_alternative<GenerationCall>(r)) ADD_FAILURE() << body << " was accepted";
  return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
}

TEST(Protocol, ParsesCompletionFields) {
  const auto c = parse_ok(
      R"({"model": "m", "prompt": "hi", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9,
          "top_k": 40, "seed": -3, "stop": ["x", ""], "ignore_eos": true, "stream": true,
          "stream_options": {"include_usage": true, "continuous_usage_stats": true}})");
  EXPECT_EQ(c.model, "m");
  EXPECT_EQ(c.prompt_text, "hi");
  EXPECT_EQ(c.max_tokens, 7);
  EXPECT_FLOAT_EQ(c.temperature, 0.5f);
  EXPECT_FLOAT_EQ(c.top_p, 0.9f);
  EXPECT_EQ(c.top_k, 40);
  EXPECT_EQ(c.seed, static_cast<uint64_t>(-3));
  EXPECT_EQ(c.stop, std::vector<std::string>{"x"});  // empty stop strings are dropped
  EXPECT_TRUE(c.ignore_eos && c.stream && c.include_usage && c.continuous_usage);
  EXPECT_EQ(parse_ok(R"({"prompt": [1, 2, 30000]})").prompt_tokens,
            (std::vector<int32_t>{1, 2, 30000}));
  EXPECT_EQ(parse_ok(R"({"prompt": [[5, 6]]})").prompt_tokens, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(parse_ok(R"({"prompt": ["one"]})").prompt_text, "one");
  EXPECT_FALSE(parse_ok(R"({"prompt": "x"})").max_tokens.has_value());
}

TEST(Protocol, ParsesChatMessages) {
  const auto c = parse_ok(
      R"({"messages": [{"role": "system", "content": "be brief"},
                       {"role": "user", "content": [{"type": "text", "text": "a"},
                                                    {"type": "text", "text": "b"}]},
                       {"role": "assistant", "content": null}],
          "max_completion_tokens": 3})",
      ApiKind::kChat);
  ASSERT_EQ(c.messages.size(), 3u);
  EXPECT_EQ(c.messages[1].content, "ab");
  EXPECT_EQ(c.max_tokens, 3);
  EXPECT_EQ(render_chat(c.messages),
            "<|system|>\nbe brief\n<|user|>\nab\n<|assistant|>\n\n<|assistant|>\n");
}

TEST(Protocol, RejectsBadInputNamingTheField) {
  struct Case {
    const char* body;
    ApiKind kind;
    const char* param;
    const char* code;
  };
  const Case cases[] = {
      {"{", ApiKind::kCompletions, "", "invalid_json"},
      {"", ApiKind::kCompletions, "", "invalid_json"},
      {"[1]", ApiKind::kCompletions, "body", "invalid_type"},
      {R"({"max_tokens": 3})", ApiKind::kCompletions, "prompt", "missing_required_parameter"},
      {R"({"prompt": 3})", ApiKind::kCompletions, "prompt", "invalid_type"},
      {R"({"prompt": [1, "a"]})", ApiKind::kCompletions, "prompt", "invalid_type"},
      {R"({"prompt": [-1]})", ApiKind::kCompletions, "prompt", "invalid_value"},
      {R"({"prompt": ["a", "b"]})", ApiKind::kCompletions, "prompt", "unsupported"},
      {R"({"prompt": "x", "model": 1})", ApiKind::kCompletions, "model", "invalid_type"},
      {R"({"prompt": "x", "max_tokens": "5"})", ApiKind::kCompletions, "max_tokens",
       "invalid_type"},
      {R"({"prompt": "x", "max_tokens": 0})", ApiKind::kCompletions, "max_tokens", "invalid_value"},
      {R"({"prompt": "x", "max_tokens": 1.5})", ApiKind::kCompletions, "max_tokens",
       "invalid_type"},
      {R"({"prompt": "x", "max_tokens": 99999999999999999999})", ApiKind::kCompletions,
       "max_tokens", "invalid_type"},
      {R"({"prompt": "x", "temperature": -0.1})", ApiKind::kCompletions, "temperature",
       "invalid_value"},
      {R"({"prompt": "x", "temperature": "NaN"})", ApiKind::kCompletions, "temperature",
       "invalid_type"},
      {R"({"prompt": "x", "temperature": 1e999})", ApiKind::kCompletions, "",
       "invalid_json"},  // the JSON reader refuses numbers beyond double
      {R"({"prompt": "x", "top_p": 0})", ApiKind::kCompletions, "top_p", "invalid_value"},
      {R"({"prompt": "x", "top_p": 1.5})", ApiKind::kCompletions, "top_p", "invalid_value"},
      {R"({"prompt": "x", "top_k": -2})", ApiKind::kCompletions, "top_k", "invalid_value"},
      {R"({"prompt": "x", "seed": "1"})", ApiKind::kCompletions, "seed", "invalid_type"},
      {R"({"prompt": "x", "stop": 5})", ApiKind::kCompletions, "stop", "invalid_type"},
      {R"({"prompt": "x", "stream": "yes"})", ApiKind::kCompletions, "stream", "invalid_type"},
      {R"({"prompt": "x", "ignore_eos": 1})", ApiKind::kCompletions, "ignore_eos", "invalid_type"},
      {R"({"prompt": "x", "stream_options": []})", ApiKind::kCompletions, "stream_options",
       "invalid_type"},
      {R"({"prompt": "x", "n": 2})", ApiKind::kCompletions, "n", "invalid_value"},
      {R"({"prompt": "x"})", ApiKind::kChat, "messages", "missing_required_parameter"},
      {R"({"messages": []})", ApiKind::kChat, "messages", "invalid_value"},
      {R"({"messages": {}})", ApiKind::kChat, "messages", "invalid_type"},
      {R"({"messages": [{"content": "x"}]})", ApiKind::kChat, "messages[0].role",
       "missing_required_parameter"},
      {R"({"messages": [{"role": "wizard", "content": "x"}]})", ApiKind::kChat, "messages[0].role",
       "invalid_value"},
      {R"({"messages": [{"role": "user", "content": 7}]})", ApiKind::kChat, "messages[0].content",
       "invalid_type"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", ApiKind::kChat,
       "messages[0].content[0].image_url.url", "missing_required_parameter"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url",
          "image_url": {"url": 3}}]}]})",
       ApiKind::kChat, "messages[0].content[0].image_url.url", "invalid_type"},
      {R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
          {"type": "input_audio"}]}]})",
       ApiKind::kChat, "messages[0].content[1]", "unsupported"},
  };
  for (const Case& c : cases) {
    const ApiError e = parse_err(c.body, c.kind);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_EQ(e.code, c.code) << c.body << ": " << e.message;
    EXPECT_FALSE(e.message.empty());
  }
}

// Image parts are kept, in order, with the part that named them; the text holds a placeholder
// where each was (the server loads them, or refuses them for a model without a vision tower).
TEST(Protocol, ImagePartsAreKeptWithTheirPartNames) {
  auto parsed = parse_generation_call(R"({"messages": [{"role": "system", "content": "s"},
      {"role": "user", "content": [
      {"type": "text", "text": "what is "},
      {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
      {"type": "text", "text": " and "},
      {"type": "image_url", "image_url": {"url": "file:///tmp/b.png"}}]}]})",
                                      ApiKind::kChat);
  ASSERT_TRUE(std::holds_alternative<GenerationCall>(parsed));
  const auto& m = std::get<GenerationCall>(parsed).messages;
  ASSERT_EQ(m.size(), 2u);
  EXPECT_TRUE(m[0].images.empty());
  EXPECT_EQ(m[1].content, "what is <image> and <image>");
  ASSERT_EQ(m[1].images.size(), 2u);
  EXPECT_EQ(m[1].images[0].param, "messages[1].content[1]");
  EXPECT_EQ(m[1].images[0].url, "data:image/png;base64,AAAA");
  EXPECT_EQ(m[1].images[1].param, "messages[1].content[3]");
  EXPECT_EQ(m[1].images[1].url, "file:///tmp/b.png");
}

TEST(Protocol, ChecksAgainstTheModel) {
  const ServedModel m{"tiny", 100, 1000, {}};
  GenerationCall call;
  call.max_tokens = 10;
  EXPECT_EQ(std::get<int>(check_against_model(call, 90, {}, m)), 10);
  EXPECT_EQ(std::get<ApiError>(check_against_model(call, 91, {}, m)).param, "max_tokens");
  EXPECT_EQ(std::get<ApiError>(check_against_model(call, 0, {}, m)).param, "prompt");
  EXPECT_EQ(std::get<ApiError>(check_against_model(call, 2, {5, 1000}, m)).param, "prompt");
  call.max_tokens.reset();
  EXPECT_EQ(std::get<int>(check_against_model(call, 95, {}, m)), 5);  // completions: min(16, room)
  EXPECT_EQ(std::get<int>(check_against_model(call, 10, {}, m)), 16);
  call.kind = ApiKind::kChat;
  EXPECT_EQ(std::get<int>(check_against_model(call, 10, {}, m)), 90);  // chat: the rest
  call.model = "other";
  const ApiError e = std::get<ApiError>(check_against_model(call, 10, {}, m));
  EXPECT_EQ(e.code, "model_not_found");
  EXPECT_EQ(e.status, 404);  // as vLLM
  // A loaded LoRA adapter is served under its name.
  ServedModel with_lora = m;
  with_lora.lora_adapters.push_back({"other", "/adapters/other"});
  EXPECT_EQ(std::get<int>(check_against_model(call, 10, {}, with_lora)), 90);
  call.model = "third";
  const ApiError listed = std::get<ApiError>(check_against_model(call, 10, {}, with_lora));
  EXPECT_NE(listed.message.find("'tiny', 'other' (LoRA)"), std::string::npos) << listed.message;
}

TEST(Protocol, ErrorBodyIsOpenAiShaped) {
  ApiError e;
  e.message = "bad \xFF";
  e.param = "prompt";
  const auto j = nlohmann::json::parse(error_body(e));
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "prompt");
  EXPECT_TRUE(j["error"]["code"].is_null());
  EXPECT_EQ(j["error"]["message"], "bad \xEF\xBF\xBD");
}

TEST(Protocol, JsonStringsEscapeAndRepairUtf8) {
  auto lit = [](std::string_view s) {
    std::string out;
    append_json_string(out, s);
    return out;
  };
  EXPECT_EQ(lit("a\"b\\c\n\t\x01"), R"("a\"b\\c\n\t\u0001")");
  EXPECT_EQ(lit("caf\xC3\xA9 \xE6\x97\xA5"), "\"caf\xC3\xA9 \xE6\x97\xA5\"");
  EXPECT_EQ(lit("\xC3"), R"("\ufffd")");                      // truncated sequence
  EXPECT_EQ(lit("\xED\xA0\x80"), R"("\ufffd\ufffd\ufffd")");  // a surrogate
  EXPECT_EQ(lit("\xC0\xAF"), R"("\ufffd\ufffd")");            // overlong
  EXPECT_EQ(lit("\xFF\x8D\x8D"), R"("\ufffd\ufffd\ufffd")");  // no such lead byte (fuzzer)
  // Whatever the bytes, the literal is valid JSON.
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_FALSE(nlohmann::json::parse(lit(all), nullptr, false).is_discarded());
}

TEST(Protocol, CompleteUtf8Prefix) {
  EXPECT_EQ(complete_utf8_prefix("abc"), 3u);
  EXPECT_EQ(complete_utf8_prefix(""), 0u);
  EXPECT_EQ(complete_utf8_prefix("a\xC3"), 1u);
  EXPECT_EQ(complete_utf8_prefix("a\xC3\xA9"), 3u);
  EXPECT_EQ(complete_utf8_prefix("\xE6\x97"), 0u);
  EXPECT_EQ(complete_utf8_prefix("x\xF0\x9F\x98"), 1u);
  EXPECT_EQ(complete_utf8_prefix("x\xF0\x9F\x98\x80"), 5u);
}

}  // namespace
}  // namespace ib
