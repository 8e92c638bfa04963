// On-demand KV growth: the paged attention stays correct across pool reallocations, a refused
// growth is an OOM event the engine survives without leaking, and a preallocated pool records
// where preemption begins.
#include <gtest/gtest.h>

#include <algorithm>
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

// Runs the same requests on a preallocated engine and on an on-demand one (its tracker capped at
// fixed bytes + cap_blocks KV blocks when cap_blocks > 0); the on-demand engine's stats.
EngineStats expect_on_demand_logits_equal_preallocated(int cap_blocks) {
  auto pre = testing::make_engine(tiny_config(), growth_config(KvGrowth::kPreallocated));
  auto dyn = testing::make_engine(tiny_config(), growth_config(KvGrowth::kOnDemand));
  const EngineStats start = dyn.engine->stats();
  EXPECT_LT(start.kv_blocks_total, pre.engine->stats().kv_blocks_total);
  if (cap_blocks > 0) {
    dyn.backend->memory().set_limit_bytes(
        start.memory.allocated_bytes + (cap_blocks - start.kv_blocks_total) * start.kv_block_bytes);
  }
  for (const auto& r : requests(6, 9, 12)) {
    EXPECT_TRUE(pre.engine->add_request(r).ok());
    EXPECT_TRUE(dyn.engine->add_request(r).ok());
  }
  const auto a = testing::run_to_completion(*pre.engine);
  const auto b = testing::run_to_completion(*dyn.engine);
  EXPECT_EQ(a.size(), b.size());
  for (const auto& [id, ca] : a) {
    const auto& cb = b.at(id);
    EXPECT_EQ(ca.tokens, cb.tokens) << "request " << id;
    EXPECT_EQ(ca.logits.size(), cb.logits.size());
    for (size_t t = 0; t < std::min(ca.logits.size(), cb.logits.size()); ++t) {
      EXPECT_EQ(ca.logits[t].size(), cb.logits[t].size());
      float worst = 0;
      for (size_t v = 0; v < std::min(ca.logits[t].size(), cb.logits[t].size()); ++v)
        worst = std::max(worst, std::fabs(ca.logits[t][v] - cb.logits[t][v]));
      EXPECT_LE(worst, 1e-5) << "request " << id << " token " << t;
    }
  }
  const EngineStats s = dyn.engine->stats();
  EXPECT_GT(s.kv_growths, 2);
  EXPECT_GT(s.kv_growth_s, 0.0);
  EXPECT_GT(s.kv_blocks_total, start.kv_blocks_total);
  EXPECT_LE(s.kv_blocks_total, s.kv_blocks_capacity);
  EXPECT_FALSE(s.oom);
  EXPECT_EQ(s.memory.bytes_by_tag[static_cast<size_t>(MemoryTag::kKvCache)],
            s.kv_block_bytes * s.kv_blocks_total);
  if (cap_blocks > 0) {
    EXPECT_LE(s.memory.peak_allocated_bytes, *dyn.backend->memory().limit_bytes());
  }
  return s;
}

TEST(EngineGrowth, OnDemandLogitsEqualPreallocatedGrowingDeviceToDevice) {
  // No cap: every growth allocates the new pool beside the old one and copies on the device.
  const EngineStats s = expect_on_demand_logits_equal_preallocated(0);
  EXPECT_EQ(s.kv_growths_staged, 0);
  EXPECT_EQ(s.memory.num_refused, 0);
}

TEST(EngineGrowth, OnDemandLogitsEqualPreallocatedGrowingThroughHostStaging) {
  // The six requests need 43 blocks at most at once; a cap of 48 lets the pool reach them, but
  // its last growths cannot hold the old pool beside the new one and stage through the host.
  const EngineStats s = expect_on_demand_logits_equal_preallocated(48);
  EXPECT_GT(s.kv_growths_staged, 0);
  EXPECT_LT(s.kv_growths_staged, s.kv_growths);  // the small early growths fit side by side
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
  dyn.backend->memory().set_tracing(true);
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
  // Refused growths were refused before any copy: the KV cache was allocated once per
  // successful growth and never re-allocated to restore its old size.
  int kv_allocs = 0;
  for (const MemoryEvent& ev : dyn.backend->memory().take_trace())
    kv_allocs += ev.tag == MemoryTag::kKvCache && ev.bytes > 0 ? 1 : 0;
  EXPECT_EQ(kv_allocs, s.kv_growths);
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
