// The openai target against the real server on loopback, driven by the real runner: neither
// side is mocked. Includes the soak of 1,024 concurrent streams.
#include "targets/openai_target.h"

#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <map>
#include <mutex>

#include "runner/runner.h"
#include "server/detail/test_support.h"

namespace ib {
namespace {

using nlohmann::json;
using testing::RunningServer;

struct Outcome {
  std::vector<RequestRecord> records;
  json description;
  std::map<uint64_t, std::string> texts;
};

std::vector<RequestSpec> token_requests(int n, int input_len, int output_len) {
  std::vector<RequestSpec> out;
  for (int i = 0; i < n; ++i) {
    RequestSpec r;
    r.id = static_cast<uint64_t>(i);
    for (int k = 0; k < input_len; ++k) r.prompt_tokens.push_back(10 + (i * 7 + k) % 200);
    r.input_len = input_len;
    r.output_len = output_len;
    out.push_back(r);
  }
  return out;
}

Outcome run_benchmark(OpenAITargetOptions options, const std::vector<RequestSpec>& requests,
                      RunnerOptions runner_options) {
  Outcome out;
  std::mutex mu;
  options.on_text = [&](uint64_t id, const std::string& text) {
    std::lock_guard lock(mu);
    out.texts[id] = text;
  };
  auto target = make_openai_target(options);
  EXPECT_TRUE(target.ok()) << (target.ok() ? "" : target.error().message);
  SteadyRunnerClock clock;
  runner_options.runs = 1;
  Runner runner(**target, runner_options, clock);
  EXPECT_TRUE((*target)->setup(runner.callbacks()).ok());
  RunnerHooks hooks;
  auto records = runner.run(requests, hooks);
  EXPECT_TRUE(records.ok());
  if (records.ok() && !records->runs.empty()) out.records = records->runs[0];
  out.description = json::parse((*target)->describe_json());
  (*target)->teardown();
  return out;
}

RunnerOptions static_batches(int batch) {
  RunnerOptions r;
  r.mode = LoadMode::kStatic;
  r.batch_size = batch;
  return r;
}

TEST(OpenAiTarget, CompletionsAgainstTheEngineServer) {
  RunningServer server(make_engine_generator(testing::tiny_engine()));
  OpenAITargetOptions o;
  o.base_url = server.base_url();
  o.model = "tiny-15m";
  const auto out = run_benchmark(o, token_requests(8, 8, 6), static_batches(4));
  ASSERT_EQ(out.records.size(), 8u);
  for (const RequestRecord& r : out.records) {
    EXPECT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.n_in, 8);  // from usage
    EXPECT_EQ(r.n_out, 6);
    EXPECT_EQ(r.chunks, 6);  // one token per chunk, counted exactly through continuous usage
    ASSERT_EQ(r.token_times_ns.size(), 6u);
    EXPECT_GT(r.t_first_ns, r.t_send_ns);
    EXPECT_TRUE(std::is_sorted(r.token_times_ns.begin(), r.token_times_ns.end()));
    EXPECT_EQ(r.finish_reason, "length");
  }
  EXPECT_EQ(out.description["dialect"], "vllm");
  EXPECT_EQ(out.description["token_counts"]["output_len_mismatch"], 0);
  EXPECT_EQ(out.description["token_counts"]["requests_with_usage"], 8);
  EXPECT_GT(out.description["client"]["sse_events"].get<int>(), 8 * 6);
}

TEST(OpenAiTarget, ChatSkipsTheRoleChunkAndCountsFromUsage) {
  RunningServer server(make_null_generator(500));
  OpenAITargetOptions o;
  o.base_url = server.base_url();
  o.model = "null";
  o.chat = true;
  o.dialect = "openai";  // no per-chunk usage: counts come from the final usage chunk
  const auto out = run_benchmark(o, token_requests(4, 5, 7), static_batches(4));
  ASSERT_EQ(out.records.size(), 4u);
  for (const RequestRecord& r : out.records) {
    EXPECT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.n_out, 7);
    EXPECT_EQ(r.chunks, 7);  // the role chunk (empty content) is not a token
    // The role chunk comes at once, the first token 2 ms later: TTFT latched on the role chunk
    // would be far below that.
    EXPECT_GT(r.ttft_ns(), 1'500'000);
  }
  // Text prompts for a text-only dialect: one word per token id; the server saw that many bytes.
  EXPECT_GT(out.records[0].n_in, 5);
  EXPECT_EQ(out.description["token_counts"]["input_len_mismatch"], 4);
}

TEST(OpenAiTarget, FailedRequestsAreRecordedAndTheRunGoesOn) {
  RunningServer server(make_null_generator(0));
  OpenAITargetOptions o;
  o.base_url = server.base_url();
  o.model = "not-the-served-model";
  const auto out = run_benchmark(o, token_requests(6, 4, 3), static_batches(3));
  ASSERT_EQ(out.records.size(), 6u);
  for (const RequestRecord& r : out.records) {
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.error.rfind("HTTP 404: ", 0), 0u) << r.error;
    EXPECT_NE(r.error.find("model_not_found"), std::string::npos) << r.error;
  }
}

TEST(OpenAiTarget, TimeoutsRefusedConnectionsAndTlsFailuresAreFailures) {
  RunningServer server(make_null_generator(5));  // 5 tokens/s: 20 tokens take 4 s
  OpenAITargetOptions o;
  o.base_url = server.base_url();
  o.model = "null";
  o.request_timeout_s = 0.3;
  auto out = run_benchmark(o, token_requests(2, 4, 20), static_batches(2));
  ASSERT_EQ(out.records.size(), 2u);
  for (const RequestRecord& r : out.records) EXPECT_EQ(r.error, "timeout after 0.3 s");

  o.request_timeout_s = 10;
  o.base_url = "https://127.0.0.1:" + std::to_string(server.port());  // TLS to a plain server
  out = run_benchmark(o, token_requests(1, 4, 2), static_batches(1));
  ASSERT_EQ(out.records.size(), 1u);
  EXPECT_EQ(out.records[0].error.rfind("TLS handshake", 0), 0u) << out.records[0].error;

  server.stop();
  o.base_url = "http://127.0.0.1:" + std::to_string(server.port());
  out = run_benchmark(o, token_requests(1, 4, 2), static_batches(1));
  ASSERT_EQ(out.records.size(), 1u);
  EXPECT_EQ(out.records[0].error.rfind("connect: ", 0), 0u) << out.records[0].error;
}

TEST(OpenAiTarget, SoakOf1024ConcurrentStreamsLosesAndCorruptsNothing) {
  RunningServer server(make_null_generator(100));  // each stream lasts at least 0.15 s
  constexpr int kStreams = 1024;
  constexpr int kTokens = 16;
  std::vector<RequestSpec> requests;
  for (int i = 0; i < kStreams; ++i) {
    RequestSpec r;
    r.id = static_cast<uint64_t>(i);
    r.prompt_text = fmt::format("req{:04d}-", i);  // the null model echoes it
    r.input_len = static_cast<int>(r.prompt_text.size());
    r.output_len = kTokens;
    requests.push_back(r);
  }
  OpenAITargetOptions o;
  o.base_url = server.base_url();
  o.model = "null";
  RunnerOptions closed;
  closed.mode = LoadMode::kClosed;
  closed.max_concurrency = kStreams;
  const auto out = run_benchmark(o, requests, closed);
  ASSERT_EQ(out.records.size(), static_cast<size_t>(kStreams));
  int ok = 0;
  for (const RequestRecord& r : out.records) {
    ok += r.ok ? 1 : 0;
    EXPECT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.n_out, kTokens);
    EXPECT_EQ(r.token_times_ns.size(), static_cast<size_t>(kTokens));
    const std::string& prompt = requests[r.prompt_index].prompt_text;
    EXPECT_EQ(out.texts.at(r.id), (prompt + prompt + prompt).substr(0, kTokens)) << r.id;
  }
  EXPECT_EQ(ok, kStreams);
  // Every stream had its own connection at once: none could be reused while all were open.
  EXPECT_EQ(out.description["client"]["connections_opened"], kStreams);
}

}  // namespace
}  // namespace ib
