// Engine behaviour across batches: batch invariance of greedy tokens, seeded sampling, static
// batching, stop tokens and EOS, aborts, block accounting under random add/abort, request
// validation, KV pool sizing and stats.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "engine/detail/engine_test_support.h"
#include "engine/engine.h"

namespace ib {
namespace {

using testing::greedy_request;
using testing::tiny_config;

EngineConfig small_config() {
  EngineConfig c;
  c.block_size = 4;
  c.max_num_batched_tokens = 16;
  c.max_num_seqs = 4;
  c.capture_logits = true;
  return c;
}

TEST(EngineBatching, GreedyTokensAreTheSameAloneAndInAMixedBatch) {
  const ModelConfig model = tiny_config();
  Rng rng(3);
  const auto prompt = testing::random_prompt(rng, 11, model.vocab_size);
  auto alone = testing::make_engine(model, small_config());
  ASSERT_TRUE(alone.engine->add_request(greedy_request(0, prompt, 12)).ok());
  const auto solo = testing::run_to_completion(*alone.engine).at(0);

  auto mixed = testing::make_engine(model, small_config());
  for (uint64_t id = 1; id <= 6; ++id) {  // other prompts before and after, of other lengths
    const auto other = testing::random_prompt(rng, static_cast<int>(3 * id), model.vocab_size);
    ASSERT_TRUE(
        mixed.engine->add_request(greedy_request(id, other, static_cast<int>(2 + id))).ok());
    if (id == 3) {
      ASSERT_TRUE(mixed.engine->add_request(greedy_request(0, prompt, 12)).ok());
    }
  }
  const auto batched = testing::run_to_completion(*mixed.engine).at(0);
  EXPECT_EQ(batched.tokens, solo.tokens);
  // The CPU backend is batch-invariant: every row is computed in the same order whatever the batch.
  EXPECT_EQ(batched.logits, solo.logits);
}

TEST(EngineBatching, SeededSamplingIsReproducibleAcrossBatches) {
  const ModelConfig model = tiny_config();
  auto request = [](uint64_t id, uint64_t seed) {
    GenerationRequest r = greedy_request(id, {4, 8, 15, 16, 23, 42}, 20);
    r.sampling = {0.9f, 40, 0.95f, seed};
    return r;
  };
  auto a = testing::make_engine(model, small_config());
  ASSERT_TRUE(a.engine->add_request(request(0, 5)).ok());
  const auto solo = testing::run_to_completion(*a.engine).at(0).tokens;

  auto b = testing::make_engine(model, small_config());
  ASSERT_TRUE(b.engine->add_request(request(1, 6)).ok());
  ASSERT_TRUE(b.engine->add_request(greedy_request(2, {1, 2, 3}, 7)).ok());
  ASSERT_TRUE(b.engine->add_request(request(0, 5)).ok());
  const auto done = testing::run_to_completion(*b.engine);
  EXPECT_EQ(done.at(0).tokens, solo);
  EXPECT_NE(done.at(1).tokens, solo);  // another seed, another sample path
}

TEST(EngineBatching, StaticBatchingRunsOneBatchAtATime) {
  EngineConfig config = small_config();
  config.batching = BatchingMode::kStatic;
  config.static_batch_size = 2;
  auto e = testing::make_engine(tiny_config(), config);
  for (uint64_t id = 0; id < 5; ++id) {
    ASSERT_TRUE(
        e.engine->add_request(greedy_request(id, {1, 2, 3}, static_cast<int>(2 + id))).ok());
  }
  std::vector<std::vector<uint64_t>> batches;  // request ids seen in each step
  while (e.engine->has_unfinished()) {
    auto out = e.engine->step();
    ASSERT_TRUE(out.ok());
    EXPECT_LE(out->stats.num_seqs, 2);
    std::vector<uint64_t> ids;
    for (const auto& ev : out->events) ids.push_back(ev.request_id);
    batches.push_back(ids);
  }
  // Batch {0, 1} for 3 steps (1 runs one step alone), then {2, 3} for 5, then {4} for 6.
  const std::vector<std::vector<uint64_t>> want = {
      {0, 1}, {0, 1}, {1}, {2, 3}, {2, 3}, {2, 3}, {2, 3}, {3}, {4}, {4}, {4}, {4}, {4}, {4}};
  EXPECT_EQ(batches, want);
}

TEST(EngineBatching, StopTokensAndEosEndARequest) {
  ModelConfig model = tiny_config();
  auto probe = testing::make_engine(model, small_config());
  ASSERT_TRUE(probe.engine->add_request(greedy_request(0, {9, 9, 7}, 8)).ok());
  const auto tokens = testing::run_to_completion(*probe.engine).at(0).tokens;
  const int32_t third = tokens[2];
  const auto first_at =
      static_cast<size_t>(std::find(tokens.begin(), tokens.end(), third) - tokens.begin());

  auto e = testing::make_engine(model, small_config());
  GenerationRequest r = greedy_request(0, {9, 9, 7}, 8);
  r.stop_token_ids = {third};
  ASSERT_TRUE(e.engine->add_request(r).ok());
  const auto stopped = testing::run_to_completion(*e.engine).at(0);
  EXPECT_EQ(stopped.finish, FinishReason::kStop);
  EXPECT_EQ(stopped.tokens.size(), first_at + 1);

  model.eos_token_ids = {third};
  auto eos = testing::make_engine(model, small_config());
  r.stop_token_ids.clear();
  ASSERT_TRUE(eos.engine->add_request(r).ok());  // ignore_eos is on by default
  EXPECT_EQ(testing::run_to_completion(*eos.engine).at(0).tokens.size(), 8u);
  r.ignore_eos = false;
  r.id = 1;
  ASSERT_TRUE(eos.engine->add_request(r).ok());
  const auto at_eos = testing::run_to_completion(*eos.engine).at(1);
  EXPECT_EQ(at_eos.finish, FinishReason::kStop);
  EXPECT_EQ(at_eos.tokens.size(), first_at + 1);
}

TEST(EngineBatching, RandomAddAbortFinishNeverLeaksBlocks) {
  EngineConfig config = small_config();
  config.num_kv_blocks = 20;  // small: preemptions happen
  config.capture_logits = false;
  auto e = testing::make_engine(tiny_config(), config);
  Rng rng(77);
  std::map<uint64_t, int> max_tokens;
  std::set<uint64_t> aborted;
  std::map<uint64_t, int> generated;
  std::map<uint64_t, FinishReason> finish;
  uint64_t next_id = 0;
  for (int step = 0; step < 400 && (step < 150 || e.engine->has_unfinished()); ++step) {
    if (step < 150 && rng.uniform() < 0.4) {
      const int len = static_cast<int>(rng.uniform_int(1, 30));
      const int out = static_cast<int>(rng.uniform_int(1, 20));
      ASSERT_TRUE(
          e.engine->add_request(greedy_request(next_id, testing::random_prompt(rng, len, 101), out))
              .ok());
      max_tokens[next_id++] = out;
    }
    if (next_id > 0 && rng.uniform() < 0.1) {
      const auto id = static_cast<uint64_t>(rng.uniform_int(0, static_cast<int64_t>(next_id) - 1));
      if (!finish.count(id) && !aborted.count(id)) {
        e.engine->abort_request(id);
        aborted.insert(id);
      }
    }
    auto out = e.engine->step();
    ASSERT_TRUE(out.ok());
    for (const auto& ev : out->events) {
      ASSERT_FALSE(finish.count(ev.request_id)) << "event after finish";
      if (ev.finish == FinishReason::kAborted) {
        EXPECT_TRUE(aborted.count(ev.request_id));
        EXPECT_EQ(ev.output_index, generated[ev.request_id]);
      } else {
        ++generated[ev.request_id];
      }
      if (ev.finish != FinishReason::kNone) finish[ev.request_id] = ev.finish;
    }
    const EngineStats st = e.engine->stats();
    ASSERT_LE(st.kv_blocks_used, st.kv_blocks_total);
  }
  EXPECT_FALSE(e.engine->has_unfinished());
  EXPECT_EQ(finish.size(), next_id);
  for (const auto& [id, reason] : finish) {
    if (aborted.count(id)) {
      EXPECT_EQ(reason, FinishReason::kAborted);
    } else {
      EXPECT_EQ(reason, FinishReason::kLength);
      EXPECT_EQ(generated[id], max_tokens[id]);
    }
  }
  const EngineStats st = e.engine->stats();
  EXPECT_EQ(st.kv_blocks_used, 0);
  EXPECT_EQ(st.kv_blocks_peak, 20);
  EXPECT_GT(st.preemptions, 0);
  EXPECT_GT(aborted.size(), 0u);
}

}  // namespace
}  // namespace ib
