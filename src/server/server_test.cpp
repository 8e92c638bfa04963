// The server on a loopback port, driven over real sockets: completions and chat, streamed and
// not, the bad-input table, a disconnect that frees KV blocks, drain, Prometheus text.
#include "server/server.h"

#include <future>
#include <thread>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/detail/test_support.h"

namespace ib {
namespace {

using nlohmann::json;
using testing::http_call;
using testing::RunningServer;

// The "data:" payloads of an SSE body.
std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    out.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end;
  }
  return out;
}

class EngineServer : public ::testing::Test {
 protected:
  RunningServer server_{make_engine_generator(testing::tiny_engine())};
};

TEST_F(EngineServer, CompletionWithExactUsage) {
  const auto r = http_call(server_.port(), "POST", "/v1/completions",
                           R"({"model": "tiny-15m", "prompt": "Hello", "max_tokens": 6,
                               "temperature": 0})");
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = json::parse(r.body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "tiny-15m");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 5);  // byte tokenizer: one token per byte
  EXPECT_EQ(j["usage"]["completion_tokens"], 6);
  EXPECT_EQ(j["usage"]["total_tokens"], 11);
  // Greedy decoding is deterministic: the same request gives the same text.
  const auto again = http_call(server_.port(), "POST", "/v1/completions",
                               R"({"prompt": "Hello", "max_tokens": 6, "temperature": 0})");
  EXPECT_EQ(json::parse(again.body)["choices"][0]["text"], j["choices"][0]["text"]);
}

TEST_F(EngineServer, StreamedCompletionWithTokenIdsAndUsage) {
  const auto r = http_call(server_.port(), "POST", "/v1/completions",
                           R"({"prompt": [10, 20, 30, 40], "max_tokens": 5, "stream": true,
                               "stream_options": {"include_usage": true,
                                                  "continuous_usage_stats": true}})");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.headers.at("Content-Type"), "text/event-stream");
  const auto events = sse_events(r.body);
  ASSERT_EQ(events.size(), 5u + 2u);  // one per token, the usage chunk, [DONE]
  for (int k = 0; k < 5; ++k) {
    const json c = json::parse(events[static_cast<size_t>(k)]);
    EXPECT_EQ(c["usage"]["completion_tokens"], k + 1);  // continuous usage: cumulative
    EXPECT_EQ(c["choices"][0]["finish_reason"], k == 4 ? json("length") : json(nullptr));
  }
  const json usage = json::parse(events[5]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(usage["usage"]["completion_tokens"], 5);
  EXPECT_EQ(events[6], "[DONE]");
}

TEST_F(EngineServer, ChatStreamedAndWhole) {
  const std::string body =
      R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "stream": true})";
  const auto r = http_call(server_.port(), "POST", "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200);
  const auto events = sse_events(r.body);
  ASSERT_EQ(events.size(), 1u + 4u + 1u);  // role chunk, 4 tokens, [DONE] (no usage asked)
  const json role = json::parse(events[0]);
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(role["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(role["choices"][0]["delta"]["content"], "");
  EXPECT_TRUE(json::parse(events[1])["choices"][0]["delta"].contains("content"));
  EXPECT_EQ(json::parse(events[4])["choices"][0]["finish_reason"], "length");

  const auto whole = http_call(server_.port(), "POST", "/v1/chat/completions",
                               R"({"messages": [{"role": "user", "content": "Hi"}],
                                   "max_tokens": 4})");
  ASSERT_EQ(whole.status, 200);
  const json j = json::parse(whole.body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["usage"]["completion_tokens"], 4);
  EXPECT_EQ(j["usage"]["prompt_tokens"],
            static_cast<int>(render_chat({{"user", "Hi", {}}}).size()));
}

TEST_F(EngineServer, BadInputTable) {
  struct Case {
    const char* method;
    const char* path;
    std::string body;
    int status;
    const char* param;  // nullptr: not checked
  };
  const std::string too_long = R"({"prompt": "x", "max_tokens": 5000})";
  const Case cases[] = {
      {"POST", "/v1/completions", "{not json", 400, ""},
      {"POST", "/v1/completions", R"({"prompt": 1})", 400, "prompt"},
      {"POST", "/v1/completions", R"({"max_tokens": 2})", 400, "prompt"},
      {"POST", "/v1/completions", R"({"prompt": "x", "model": "gpt-4"})", 404, "model"},
      {"POST", "/v1/completions", too_long, 400, "max_tokens"},
      {"POST", "/v1/completions", R"({"prompt": "x", "temperature": -1})", 400, "temperature"},
      {"POST", "/v1/completions", R"({"prompt": "x", "top_p": -0.5})", 400, "top_p"},
      {"POST", "/v1/completions", R"({"prompt": [99999999]})", 400, "prompt"},
      {"POST", "/v1/completions", R"({"prompt": ""})", 400, "prompt"},
      {"POST", "/v1/chat/completions", R"({"messages": "hi"})", 400, "messages"},
      {"GET", "/v1/completions", "", 405, nullptr},
      {"POST", "/v1/models", "", 405, nullptr},
      {"DELETE", "/health", "", 405, nullptr},
      {"GET", "/v2/everything", "", 404, nullptr},
      {"GET", "/", "", 404, nullptr},
  };
  for (const Case& c : cases) {
    const auto r = http_call(server_.port(), c.method, c.path, c.body);
    EXPECT_EQ(r.status, c.status) << c.method << " " << c.path << " " << c.body;
    const json j = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r.body;
    for (const char* key : {"message", "type", "param", "code"}) {
      EXPECT_TRUE(j["error"].contains(key)) << key << " missing in " << r.body;
    }
    if (c.param != nullptr && *c.param != '\0') {
      EXPECT_EQ(j["error"]["param"], c.param) << r.body;
    }
    if (c.status == 405) {
      EXPECT_TRUE(r.headers.count("Allow") == 1 && !r.headers.at("Allow").empty());
    }
  }
  // The server is still healthy after all of that.
  EXPECT_EQ(http_call(server_.port(), "GET", "/health").status, 200);
}

TEST(Server, ApiKeyAndBodyLimit) {
  ServerOptions o;
  o.api_key = "sekret";
  o.max_body_bytes = 1024;
  RunningServer server(make_null_generator(0), o);
  const std::string body = R"({"prompt": "abc", "max_tokens": 2})";
  EXPECT_EQ(http_call(server.port(), "POST", "/v1/completions", body).status, 401);
  EXPECT_EQ(
      http_call(server.port(), "POST", "/v1/completions", body, {{"Authorization", "Bearer wrong"}})
          .status,
      401);
  EXPECT_EQ(http_call(server.port(), "GET", "/v1/models").status, 401);
  EXPECT_EQ(http_call(server.port(), "POST", "/v1/completions", body,
                      {{"Authorization", "Bearer sekret"}})
                .status,
            200);
  EXPECT_EQ(http_call(server.port(), "GET", "/health").status, 200);  // open, like vLLM's
  const std::string big = R"({"prompt": ")" + std::string(4096, 'a') + R"("})";
  const auto r = http_call(server.port(), "POST", "/v1/completions", big,
                           {{"Authorization", "Bearer sekret"}});
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(json::parse(r.body)["error"]["code"], "request_too_large");
}

TEST(Server, NullModelEchoesThePromptAndHonoursStopStrings) {
  RunningServer server(make_null_generator(0));
  auto text = [&](const std::string& body) {
    const auto r = http_call(server.port(), "POST", "/v1/completions", body);
    EXPECT_EQ(r.status, 200) << r.body;
    return json::parse(r.body)["choices"][0];
  };
  EXPECT_EQ(text(R"({"prompt": "abc", "max_tokens": 7})")["text"], "abcabca");
  const json stopped = text(R"({"prompt": "abcXYdef", "max_tokens": 20, "stop": ["XY", "zz"]})");
  EXPECT_EQ(stopped["text"], "abc");
  EXPECT_EQ(stopped["finish_reason"], "stop");
  // Streamed: the held-back text never leaks past the stop string.
  const auto r = http_call(server.port(), "POST", "/v1/completions",
                           R"({"prompt": "hello world", "max_tokens": 30, "stop": "wor",
                               "stream": true})");
  std::string streamed;
  for (const auto& e : sse_events(r.body)) {
    if (e == "[DONE]") continue;
    streamed += json::parse(e)["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(streamed, "hello ");
}

TEST(Server, DisconnectAbortsTheRequestAndFreesItsKvBlocks) {
  RunningServer server(make_engine_generator(testing::tiny_engine()));
  namespace net = boost::asio;
  net::io_context io;
  net::ip::tcp::socket socket(io);
  socket.connect({net::ip::make_address("127.0.0.1"), server.port()});
  const std::string body = R"({"prompt": "a long story", "max_tokens": 900, "stream": true,
                               "ignore_eos": true})";
  const std::string req =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\n\r\n" + body;
  net::write(socket, net::buffer(req));
  std::string got;
  char buf[4096];
  while (got.find("\"text\"") == std::string::npos) {  // the first token event
    got.append(buf, socket.read_some(net::buffer(buf)));
  }
  EXPECT_GT(testing::prometheus_value(http_call(server.port(), "GET", "/metrics").body,
                                      "inferbench_kv_blocks_used"),
            0);
  socket.close();
  EXPECT_EQ(testing::wait_for_metric(server.port(), "inferbench_kv_blocks_used", 0), 0);
  EXPECT_EQ(testing::wait_for_metric(server.port(), "inferbench_requests_running", 0), 0);
  EXPECT_EQ(testing::wait_for_metric(server.port(),
                                     "inferbench_requests_finished_total{model_name=\"tiny-15m\","
                                     "finished_reason=\"abort\"}",
                                     1),
            1);
  EXPECT_EQ(testing::wait_for_metric(server.port(), "inferbench_http_streams_open", 0), 0);
}

// The byte tokenizer, except that encoding a text containing "<gate>" says so (entered) and
// then waits for the gate (a prompt that takes long to tokenize).
class GatedTokenizer final : public Tokenizer {
 public:
  GatedTokenizer(std::shared_future<void> gate, std::promise<void>* entered)
      : gate_(std::move(gate)), entered_(entered) {}
  std::string name() const override { return "gated"; }
  std::vector<int32_t> encode(std::string_view text) const override {
    if (text.find("<gate>") != std::string_view::npos) {
      entered_->set_value();
      gate_.wait();
    }
    return bytes_->encode(text);
  }
  std::string decode(const std::vector<int32_t>& ids) const override { return bytes_->decode(ids); }

 private:
  std::shared_future<void> gate_;
  std::promise<void>* entered_;
  std::unique_ptr<Tokenizer> bytes_ = make_byte_tokenizer();
};

TEST(Server, PromptsAreTokenizedOffTheIoThread) {
  std::promise<void> gate, entered;
  RunningServer server(make_null_generator(0), {},
                       std::make_unique<GatedTokenizer>(gate.get_future().share(), &entered));
  std::future<testing::HttpReply> slow = std::async(std::launch::async, [&] {
    return http_call(server.port(), "POST", "/v1/completions",
                     R"({"prompt": "<gate>slow", "max_tokens": 3})");
  });
  entered.get_future().wait();  // the slow prompt is being tokenized
  // While it is, other connections are served: text and chat prompts and /metrics.
  const auto fast = http_call(server.port(), "POST", "/v1/completions",
                              R"({"prompt": "quick", "max_tokens": 5})");
  EXPECT_EQ(fast.status, 200) << fast.body;
  EXPECT_EQ(json::parse(fast.body)["choices"][0]["text"], "quick");
  EXPECT_EQ(slow.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  EXPECT_EQ(testing::prometheus_value(http_call(server.port(), "GET", "/metrics").body,
                                      "inferbench_http_streams_open"),
            1);  // the tokenizing request counts as open: a drain waits for it
  gate.set_value();
  const auto r = slow.get();
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["choices"][0]["text"], "<ga");
  EXPECT_EQ(testing::wait_for_metric(server.port(), "inferbench_http_streams_open", 0), 0);
}

TEST(Server, DrainWaitsForAPromptStillBeingTokenized) {
  std::promise<void> gate, entered;
  RunningServer server(make_null_generator(0), {},
                       std::make_unique<GatedTokenizer>(gate.get_future().share(), &entered));
  std::future<testing::HttpReply> slow = std::async(std::launch::async, [&] {
    return http_call(server.port(), "POST", "/v1/completions",
                     R"({"prompt": "<gate>", "max_tokens": 40, "stream": true})");
  });
  entered.get_future().wait();
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    gate.set_value();
  });
  server.drain_and_join();  // returns only once the accepted request has been answered in full
  opener.join();
  const auto r = slow.get();
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(sse_events(r.body).size(), 41u);  // 40 tokens and [DONE]
}

TEST(Server, DrainFinishesInFlightStreamsThenStops) {
  RunningServer server(make_null_generator(200));  // 20 tokens take about 0.1 s
  std::thread client([&] {
    const auto r = http_call(server.port(), "POST", "/v1/completions",
                             R"({"prompt": "abcd", "max_tokens": 20, "stream": true})");
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(sse_events(r.body).size(), 21u);  // all 20 tokens and [DONE]: nothing cut
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  server.drain_and_join();
  client.join();
}

TEST(Server, PrometheusText) {
  RunningServer server(make_null_generator(0));
  for (int i = 0; i < 3; ++i) {
    http_call(server.port(), "POST", "/v1/completions", R"({"prompt": "abc", "max_tokens": 4})");
  }
  const auto r = http_call(server.port(), "GET", "/metrics");
  ASSERT_EQ(r.status, 200);
  EXPECT_NE(r.headers.at("Content-Type").find("text/plain"), std::string::npos);
  const std::string& m = r.body;
  using testing::prometheus_value;
  EXPECT_EQ(prometheus_value(m, "inferbench_tokens_total{model_name=\"null\",phase=\"prefill\"}"),
            9);
  EXPECT_EQ(prometheus_value(m, "inferbench_tokens_total{model_name=\"null\",phase=\"decode\"}"),
            12);
  EXPECT_EQ(prometheus_value(m, "inferbench_time_to_first_token_seconds_count"), 3);
  EXPECT_EQ(prometheus_value(m, "inferbench_inter_token_latency_seconds_count"), 9);
  EXPECT_EQ(
      prometheus_value(
          m, "inferbench_time_to_first_token_seconds_bucket{model_name=\"null\",le=\"+Inf\"}"),
      3);
  EXPECT_EQ(
      prometheus_value(m, "inferbench_http_responses_total{model_name=\"null\",code=\"200\"}"), 3);
  EXPECT_NE(m.find("# TYPE inferbench_inter_token_latency_seconds histogram"), std::string::npos);
  EXPECT_NE(m.find("inferbench_device_memory_bytes{model_name=\"null\",kind=\"allocated\"}"),
            std::string::npos);
}

// --metrics-names vllm: vLLM's core set under its names and model_name label, from the same
// measurements as inferbench's names (which stay).
TEST(Server, PrometheusTextUnderVllmNames) {
  ServerOptions options;
  options.vllm_metric_names = true;
  RunningServer server(make_null_generator(0), options);
  for (int i = 0; i < 3; ++i) {
    http_call(server.port(), "POST", "/v1/completions", R"({"prompt": "abc", "max_tokens": 4})");
  }
  const std::string m = http_call(server.port(), "GET", "/metrics").body;
  using testing::prometheus_value;
  const auto v = [&](const std::string& series) {
    return prometheus_value(m, series + "{model_name=\"null\"}");
  };
  EXPECT_EQ(v("vllm:prompt_tokens_total"), 9);
  EXPECT_EQ(v("vllm:generation_tokens_total"), 12);
  EXPECT_EQ(v("vllm:num_requests_running"), 0);
  EXPECT_EQ(v("vllm:num_requests_waiting"), 0);
  EXPECT_GE(v("vllm:gpu_cache_usage_perc"), 0);
  EXPECT_LE(v("vllm:gpu_cache_usage_perc"), 1);
  EXPECT_EQ(v("vllm:time_to_first_token_seconds_count"), 3);
  EXPECT_EQ(v("vllm:time_per_output_token_seconds_count"), 9);
  EXPECT_EQ(v("vllm:inter_token_latency_seconds_count"), 9);
  EXPECT_EQ(v("vllm:e2e_request_latency_seconds_count"), 3);
  EXPECT_EQ(v("vllm:request_decode_time_seconds_count"), 3);
  EXPECT_EQ(v("vllm:request_prompt_tokens_sum"), 9);
  EXPECT_EQ(v("vllm:request_generation_tokens_sum"), 12);
  EXPECT_EQ(v("vllm:request_max_num_generation_tokens_sum"), 12);
  EXPECT_EQ(v("vllm:request_params_max_tokens_sum"), 12);
  EXPECT_EQ(v("vllm:num_preemptions_total"), 0);
  // The phases add up: waiting + prefill is TTFT, prefill + decode the time running.
  for (const char* phase : {"queue", "prefill", "inference"}) {
    EXPECT_EQ(v(std::string("vllm:request_") + phase + "_time_seconds_count"), 3) << phase;
  }
  EXPECT_NEAR(v("vllm:request_queue_time_seconds_sum") + v("vllm:request_prefill_time_seconds_sum"),
              v("vllm:time_to_first_token_seconds_sum"), 1e-6);
  EXPECT_NEAR(
      v("vllm:request_inference_time_seconds_sum"),
      v("vllm:request_prefill_time_seconds_sum") + v("vllm:request_decode_time_seconds_sum"), 1e-6);
  EXPECT_EQ(prometheus_value(m,
                             "vllm:request_generation_tokens_bucket{model_name=\"null\","
                             "le=\"2\"}"),
            0);
  EXPECT_EQ(prometheus_value(m,
                             "vllm:request_generation_tokens_bucket{model_name=\"null\","
                             "le=\"5\"}"),
            3);
  EXPECT_EQ(prometheus_value(m,
                             "vllm:request_success_total{model_name=\"null\","
                             "finished_reason=\"length\"}"),
            3);
  EXPECT_NE(m.find("# TYPE vllm:time_to_first_token_seconds histogram"), std::string::npos);
  EXPECT_EQ(prometheus_value(m, "inferbench_tokens_total{model_name=\"null\",phase=\"decode\"}"),
            12);
  // Without the option, none of vLLM's names.
  RunningServer plain(make_null_generator(0));
  EXPECT_EQ(http_call(plain.port(), "GET", "/metrics").body.find("vllm:"), std::string::npos);
}

// vLLM's /tokenize and /detokenize: the tokenizer as the generation endpoints apply it.
TEST(Server, TokenizeAndDetokenizeAsVllm) {
  RunningServer server(make_null_generator(0));
  const auto t = http_call(server.port(), "POST", "/tokenize", R"({"prompt": "abc"})");
  ASSERT_EQ(t.status, 200) << t.body;
  const auto doc = nlohmann::json::parse(t.body);
  EXPECT_EQ(doc["count"], 3);
  EXPECT_EQ(doc["tokens"], nlohmann::json::parse("[100, 101, 102]"));  // byte b -> id b + 3
  EXPECT_GT(doc["max_model_len"].get<int>(), 0);
  // Chat messages are counted as /v1/chat/completions renders them.
  const auto chat =
      nlohmann::json::parse(http_call(server.port(), "POST", "/tokenize",
                                      R"({"messages": [{"role": "user", "content": "hi"}]})")
                                .body);
  EXPECT_EQ(chat["count"], std::string("<|user|>\nhi\n<|assistant|>\n").size());
  const auto d = http_call(server.port(), "POST", "/detokenize", R"({"tokens": [100, 101, 102]})");
  ASSERT_EQ(d.status, 200) << d.body;
  EXPECT_EQ(nlohmann::json::parse(d.body)["prompt"], "abc");
  // Another model: 404 model_not_found, as vLLM; bad ids and bodies: 400; GET: 405.
  const auto other =
      http_call(server.port(), "POST", "/tokenize", R"({"model": "x", "prompt": "a"})");
  EXPECT_EQ(other.status, 404);
  EXPECT_NE(other.body.find("model_not_found"), std::string::npos);
  EXPECT_EQ(http_call(server.port(), "POST", "/detokenize", R"({"tokens": [-1]})").status, 400);
  EXPECT_EQ(http_call(server.port(), "POST", "/detokenize", R"({"tokens": "abc"})").status, 400);
  EXPECT_EQ(http_call(server.port(), "POST", "/tokenize", R"({})").status, 400);
  EXPECT_EQ(http_call(server.port(), "POST", "/tokenize", "not json").status, 400);
  EXPECT_EQ(http_call(server.port(), "GET", "/tokenize").status, 405);
}

TEST(Server, ChatUsesTheModelsTemplateAndRejectionsAre400) {
  // Gemma-2's published template: no system role, roles must alternate.
  auto t = ChatTemplate::parse(
      "{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
      "{{ raise_exception('System role not supported') }}{% endif %}"
      "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
      "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
      "{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}"
      "{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\\n' + "
      "message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}"
      "{{'<start_of_turn>model\\n'}}{% endif %}");
  ASSERT_TRUE(t.ok()) << t.error().message;
  ServerOptions options;
  options.chat_format = std::make_shared<const ChatFormat>(
      ChatFormat::from(std::move(t).value(), "test", {{"bos_token", "<bos>"}}));
  RunningServer server(make_null_generator(0), std::move(options));
  const std::string rendered = "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n";
  // The null model echoes its prompt: the reply starts with the rendered template.
  const auto r = http_call(server.port(), "POST", "/v1/chat/completions",
                           R"({"messages": [{"role": "user", "content": " Hi "}],
                               "max_tokens": 200})");
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = json::parse(r.body);
  EXPECT_EQ(j["usage"]["prompt_tokens"], static_cast<int>(rendered.size()));
  EXPECT_EQ(j["choices"][0]["message"]["content"].get<std::string>().substr(0, rendered.size()),
            rendered);
  const auto count = json::parse(http_call(server.port(), "POST", "/tokenize",
                                           R"({"messages": [{"role": "user", "content": "Hi"}]})")
                                     .body);
  EXPECT_EQ(count["count"], rendered.size());
  // A system message, which the template rejects: an OpenAI-style 400 with its message.
  for (const char* path : {"/v1/chat/completions", "/tokenize"}) {
    const auto bad = http_call(server.port(), "POST", path,
                               R"({"messages": [{"role": "system", "content": "Be brief."},
                                                {"role": "user", "content": "Hi"}]})");
    EXPECT_EQ(bad.status, 400) << path;
    const json e = json::parse(bad.body)["error"];
    EXPECT_EQ(e["param"], "messages");
    EXPECT_EQ(e["type"], "invalid_request_error");
    EXPECT_NE(e["message"].get<std::string>().find("System role not supported"), std::string::npos)
        << e;
  }
}

}  // namespace
}  // namespace ib
