#include "targets/native_target.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>

#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "model/presets.h"

namespace ib {
namespace {

// 2 layers, hidden 64, 4 heads (2 KV heads), vocab 101: runs in milliseconds on the CPU.
ModelConfig small_model() {
  ModelConfig c;
  c.name = "native-test";
  c.family = "llama";
  c.hf_architecture = "LlamaForCausalLM";
  c.vocab_size = 101;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 256;
  c.eos_token_ids = {100};
  return c;
}

NativeTargetOptions options(ModelConfig model = small_model()) {
  NativeTargetOptions o;
  o.model = std::move(model);
  o.weights.format = LoadFormat::kDummy;
  o.backend.num_threads = 1;
  o.engine.cpu_kv_cache_bytes = 4 << 20;
  return o;
}

RequestSpec request(uint64_t id, int input_len, int output_len) {
  RequestSpec r;
  r.id = id;
  for (int i = 0; i < input_len; ++i)
    r.prompt_tokens.push_back(3 + (i * 7 + static_cast<int>(id)) % 90);
  r.input_len = input_len;
  r.output_len = output_len;
  return r;
}

// Collects callbacks as they arrive from the engine thread.
struct Recorder {
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, std::vector<int64_t>> token_times;
  std::map<uint64_t, RequestOutcome> done;
  int tokens_after_done = 0;

  TargetCallbacks callbacks() {
    TargetCallbacks cb;
    cb.on_tokens = [this](uint64_t id, int n, int64_t t) {
      std::lock_guard lock(mu);
      if (done.count(id)) ++tokens_after_done;
      for (int i = 0; i < n; ++i) token_times[id].push_back(t);
    };
    cb.on_done = [this](uint64_t id, const RequestOutcome& o) {
      std::lock_guard lock(mu);
      EXPECT_EQ(done.count(id), 0u) << "on_done twice for " << id;
      done[id] = o;
      cv.notify_all();
    };
    return cb;
  }
};

TEST(NativeTarget, GeneratesExactlyTheRequestedTokensWithEngineTimestamps) {
  Recorder rec;
  auto target = make_native_target(options());
  ASSERT_TRUE(target->setup(rec.callbacks()).ok());
  const int64_t before = now_ns();
  for (uint64_t id = 0; id < 3; ++id) {
    ASSERT_TRUE(
        target->submit(request(id, 5 + static_cast<int>(id), 4 + static_cast<int>(id))).ok());
  }
  target->drain();
  const int64_t after = now_ns();
  std::lock_guard lock(rec.mu);
  ASSERT_EQ(rec.done.size(), 3u);
  for (uint64_t id = 0; id < 3; ++id) {
    const RequestOutcome& o = rec.done[id];
    EXPECT_TRUE(o.ok) << o.error;
    EXPECT_EQ(o.finish_reason, "length");
    EXPECT_EQ(o.prompt_tokens, 5 + static_cast<int>(id));
    EXPECT_EQ(o.output_tokens, 4 + static_cast<int>(id));
    const auto& times = rec.token_times[id];
    ASSERT_EQ(times.size(), 4u + id);
    for (size_t k = 0; k < times.size(); ++k) {
      EXPECT_GE(times[k], before);
      EXPECT_LE(times[k], after);
      if (k > 0) {
        EXPECT_GE(times[k], times[k - 1]);
      }
    }
    EXPECT_EQ(o.time_ns, times.back());
  }
  EXPECT_EQ(rec.tokens_after_done, 0);
  target->teardown();
}

TEST(NativeTarget, ABatchStartsTogether) {
  Recorder rec;
  auto target = make_native_target(options());
  ASSERT_TRUE(target->setup(rec.callbacks()).ok());
  std::vector<RequestSpec> batch;
  for (uint64_t id = 0; id < 4; ++id) batch.push_back(request(id, 6, 3));
  ASSERT_TRUE(target->submit_batch(batch).ok());
  target->drain();
  std::lock_guard lock(rec.mu);
  ASSERT_EQ(rec.token_times.size(), 4u);
  // One prefill step for all four: their first tokens share its timestamp, as do the last.
  for (uint64_t id = 1; id < 4; ++id) {
    EXPECT_EQ(rec.token_times[id].front(), rec.token_times[0].front());
    EXPECT_EQ(rec.token_times[id].back(), rec.token_times[0].back());
  }
}

TEST(NativeTarget, DescribesItselfAndReportsPools) {
  Recorder rec;
  auto target = make_native_target(options());
  ASSERT_TRUE(target->setup(rec.callbacks()).ok());
  const auto j = nlohmann::json::parse(target->describe_json());
  EXPECT_EQ(j["model"]["name"], "native-test");
  EXPECT_EQ(j["dtype"], "fp32");
  EXPECT_EQ(j["device"]["kind"], "cpu");
  EXPECT_EQ(j["weights"], "dummy (seed 0)");
  EXPECT_GT(j["engine"]["num_kv_blocks"].get<int>(), 0);
  const auto m = target->memory();
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->weights_bytes, small_model().parameter_count() * 4);
  EXPECT_EQ(m->kv_pool_bytes, j["engine"]["kv_pool_bytes"].get<int64_t>());
  EXPECT_GT(m->allocated_bytes, m->weights_bytes);
  ASSERT_TRUE(target->submit(request(1, 40, 8)).ok());
  target->drain();
  // 48 tokens of context in blocks of 16: the peak held at least 3 blocks.
  EXPECT_GE(target->memory()->kv_peak_used_bytes, 3 * j["engine"]["kv_block_bytes"].get<int64_t>());
}

TEST(NativeTarget, CancelAllFinishesEveryRequest) {
  Recorder rec;
  auto target = make_native_target(options());
  ASSERT_TRUE(target->setup(rec.callbacks()).ok());
  for (uint64_t id = 0; id < 6; ++id) ASSERT_TRUE(target->submit(request(id, 8, 200)).ok());
  target->cancel_all();
  target->drain();
  std::lock_guard lock(rec.mu);
  ASSERT_EQ(rec.done.size(), 6u);
  int aborted = 0;
  for (const auto& [id, o] : rec.done) {
    if (o.finish_reason == "aborted") {
      ++aborted;
      EXPECT_FALSE(o.ok);
      EXPECT_EQ(o.output_tokens, static_cast<int>(rec.token_times[id].size()));
    }
  }
  EXPECT_EQ(aborted, 6);  // 200 tokens each: none can finish before the cancel lands
}

TEST(NativeTarget, RequestTheEngineRefusesFailsAlone) {
  Recorder rec;
  auto target = make_native_target(options());
  ASSERT_TRUE(target->setup(rec.callbacks()).ok());
  ASSERT_TRUE(target->submit(request(1, 250, 50)).ok());  // beyond max_model_len 256
  ASSERT_TRUE(target->submit(request(2, 4, 2)).ok());
  target->drain();
  std::lock_guard lock(rec.mu);
  EXPECT_FALSE(rec.done[1].ok);
  EXPECT_EQ(rec.done[1].finish_reason, "error");
  EXPECT_NE(rec.done[1].error.find("max_model_len"), std::string::npos) << rec.done[1].error;
  EXPECT_TRUE(rec.done[2].ok);
}

TEST(NativeTarget, UnsupportedModelFailsSetupWithAUserError) {
  auto deepseek = find_preset("deepseek-v2-lite");
  ASSERT_TRUE(deepseek.ok()) << deepseek.error().message;
  deepseek->moe.scoring_func = "sigmoid";  // a router the engine does not run
  Recorder rec;
  auto target = make_native_target(options(*deepseek));
  const Status st = target->setup(rec.callbacks());
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().kind, ErrorKind::kUser);
  EXPECT_FALSE(target->submit(request(1, 4, 2)).ok());
  target->teardown();
}

TEST(NativeTarget, TeardownWithWorkLeftStillReportsEveryRequest) {
  Recorder rec;
  auto target = make_native_target(options());
  ASSERT_TRUE(target->setup(rec.callbacks()).ok());
  for (uint64_t id = 0; id < 4; ++id) ASSERT_TRUE(target->submit(request(id, 8, 200)).ok());
  target->teardown();
  std::lock_guard lock(rec.mu);
  EXPECT_EQ(rec.done.size(), 4u);
}

}  // namespace
}  // namespace ib
