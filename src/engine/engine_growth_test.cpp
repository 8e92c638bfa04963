// On-demand KV growth: the paged attention stays correct across pool reallocations, a refused
// growth is an OOM event the engine survives without leaking, and a preallocated pool records
// where preemption begins.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/detail/engine_test_support.h"

namespace ib {
namespace {

using testing::greedy_request;
using testing::tiny_config;

EngineConfig growth_config(KvGrowth growth) {
  EngineConfig c;
  c.block_size = 4;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 64;
  c.capture_logits = true;
  c.use_graphs = false;
  c.kv_growth = growth;
  c.kv_growth_min_blocks = 1;  // grow as often as possible
  return c;
}

std::vector<GenerationRequest> requests(int n, int prompt_len, int max_tokens) {
  Rng rng(5);
  std::vector<GenerationRequest> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(greedy_request(static_cast<uint64_t>(i),
                                 testing::random_prompt(rng, prompt_len + 3 * i, 101), max_tokens));
  }
  return out;
}

TEST(EngineGrowth, OnDemandLogitsEqualPreallocated) {
  auto pre = testing::make_engine(tiny_config(), growth_config(KvGrowth::kPreallocated));
  auto dyn = testing::make_engine(tiny_config(), growth_config(KvGrowth::kOnDemand));
  const int initial_blocks = dyn.engine->stats().kv_blocks_total;
  EXPECT_LT(initial_blocks, pre.engine->stats().kv_blocks_total);
  for (const auto& r : requests(6, 9, 12)) {
    ASSERT_TRUE(pre.engine->add_request(r).ok());
    ASSERT_TRUE(dyn.engine->add_request(r).ok());
  }
  const auto a = testing::run_to_completion(*pre.engine);
  const auto b = testing::run_to_completion(*dyn.engine);
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [id, ca] : a) {
    const auto& cb = b.at(id);
    EXPECT_EQ(ca.tokens, cb.tokens) << "request " << id;
    ASSERT_EQ(ca.logits.size(), cb.logits.size());
    for (size_t t = 0; t < ca.logits.size(); ++t) {
      ASSERT_EQ(ca.logits[t].size(), cb.logits[t].size());
      for (size_t v = 0; v < ca.logits[t].size(); ++v) {
        ASSERT_NEAR(ca.logits[t][v], cb.logits[t][v], 1e-5) << "request " << id << " token " << t;
      }
    }
  }
  const EngineStats s = dyn.engine->stats();
  EXPECT_GT(s.kv_growths, 2);
  EXPECT_GT(s.kv_blocks_total, initial_blocks);
  EXPECT_LE(s.kv_blocks_total, s.kv_blocks_capacity);
  EXPECT_FALSE(s.oom);
  EXPECT_EQ(s.memory.bytes_by_tag[static_cast<size_t>(MemoryTag::kKvCache)],
            s.kv_block_bytes * s.kv_blocks_total);
}

TEST(EngineGrowth, RefusedGrowthIsOomTheEngineSurvives) {
  auto dyn = testing::make_engine(tiny_config(), growth_config(KvGrowth::kOnDemand));
  const EngineStats start = dyn.engine->stats();
  // Room for 10 blocks in all: two of the four requests (20 tokens = 5 blocks each) at a time.
  dyn.backend->memory().set_limit_bytes(start.memory.allocated_bytes +
                                        (10 - start.kv_blocks_total) * start.kv_block_bytes);
  for (int i = 0; i < 4; ++i) {
    Rng rng(static_cast<uint64_t>(i));
    ASSERT_TRUE(dyn.engine
                    ->add_request(greedy_request(static_cast<uint64_t>(i),
                                                 testing::random_prompt(rng, 11, 101), 10))
                    .ok());
  }
  int oom_steps = 0;
  std::map<uint64_t, int> generated;
  while (dyn.engine->has_unfinished()) {
    auto out = dyn.engine->step();
    ASSERT_TRUE(out.ok()) << out.error().message;
    oom_steps += out->stats.oom ? 1 : 0;
    for (const auto& ev : out->events) ++generated[ev.request_id];
  }
  const EngineStats s = dyn.engine->stats();
  EXPECT_EQ(oom_steps, 1);  // reported once; the pool then stops growing
  EXPECT_TRUE(s.oom);
  EXPECT_GE(s.oom_step, 0);
  EXPECT_LT(s.oom_step, s.steps);
  EXPECT_NE(s.oom_message.find("memory limit"), std::string::npos) << s.oom_message;
  EXPECT_GT(s.memory.num_refused, 0);
  // The growth that failed asked for more than the room left (a sequence's prefill is 3 blocks).
  EXPECT_LE(s.kv_blocks_total, 10);
  EXPECT_GE(s.kv_blocks_total, 8);
  EXPECT_GT(s.preemptions, 0);  // after the OOM, a full pool preempts
  for (int i = 0; i < 4; ++i) EXPECT_EQ(generated[static_cast<uint64_t>(i)], 10);
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_LE(s.memory.peak_allocated_bytes, *dyn.backend->memory().limit_bytes());
  dyn.engine.reset();
  EXPECT_EQ(dyn.backend->memory().snapshot().allocated_bytes, 0);  // nothing leaked
}

TEST(EngineGrowth, PreallocatedRecordsFirstPreemption) {
  EngineConfig c = growth_config(KvGrowth::kPreallocated);
  c.num_kv_blocks = 10;
  auto pre = testing::make_engine(tiny_config(), c);
  for (const auto& r : requests(4, 11, 10)) ASSERT_TRUE(pre.engine->add_request(r).ok());
  testing::run_to_completion(*pre.engine);
  const EngineStats s = pre.engine->stats();
  EXPECT_GT(s.preemptions, 0);
  EXPECT_GT(s.first_preemption_step, 0);
  EXPECT_LT(s.first_preemption_step, s.steps);
  EXPECT_FALSE(s.oom);
  EXPECT_EQ(s.kv_growths, 0);
}

}  // namespace
}  // namespace ib
