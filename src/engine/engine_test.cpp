// The paged, batched engine's logits against the naive double-precision reference, within 1e-5:
// several prompt lengths, chunked prefill, block boundaries, QKV bias, tied/untied lm_head,
// Llama-3 and linear rope scaling, sliding window, block-sparse attention, recompute preemption.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <cmath>

#include "engine/detail/engine_test_support.h"

namespace ib {
namespace {

using testing::Completion;
using testing::tiny_config;

// fp32 against double: 1e-5, relative to the row's largest logit when that exceeds 1 (tied
// embeddings give logits around 10).
constexpr double kTolerance = 1e-5;

struct Scenario {
  ModelConfig model = tiny_config();
  EngineConfig engine;
  std::vector<int> prompt_lengths = {1, 3, 4, 5, 9, 17, 30};
  int max_tokens = 6;
};

// Runs every prompt through one engine and compares each sampled row's logits with the
// reference at the same position; stores the engine stats in *stats.
void check_against_reference(const Scenario& s, uint64_t seed, EngineStats* stats = nullptr) {
  EngineConfig config = s.engine;
  config.capture_logits = true;
  auto e = testing::make_engine(s.model, config, seed);
  Rng rng(seed);
  std::map<uint64_t, std::vector<int32_t>> prompts;
  for (size_t i = 0; i < s.prompt_lengths.size(); ++i) {
    prompts[i] = testing::random_prompt(rng, s.prompt_lengths[i], s.model.vocab_size);
    const Status added =
        e.engine->add_request(testing::greedy_request(i, prompts[i], s.max_tokens));
    EXPECT_TRUE(added.ok()) << added.error().message;
  }
  const auto done = testing::run_to_completion(*e.engine);
  EXPECT_EQ(done.size(), prompts.size());
  double worst = 0;
  for (const auto& [id, c] : done) {
    EXPECT_EQ(c.finish, FinishReason::kLength);
    ASSERT_EQ(static_cast<int>(c.tokens.size()), s.max_tokens);
    std::vector<int32_t> all = prompts[id];
    all.insert(all.end(), c.tokens.begin(), c.tokens.end());
    const BlockSparse sparse = parse_block_sparse(s.engine.block_sparse_attention).value();
    const auto ref = testing::reference_logits(s.model, e.host, all, {}, {}, sparse);
    const size_t p = prompts[id].size();
    for (size_t i = 0; i < c.tokens.size(); ++i) {
      const auto& r = ref[p - 1 + i];
      ASSERT_EQ(c.logits[i].size(), r.size());
      double scale = 1.0;
      for (double x : r) scale = std::max(scale, std::fabs(x));
      size_t argmax = 0;
      for (size_t v = 0; v < r.size(); ++v) {
        worst = std::max(worst, std::fabs(c.logits[i][v] - r[v]) / scale);
        ASSERT_NEAR(c.logits[i][v], r[v], kTolerance * scale)
            << "request " << id << " output " << i << " token " << v;
        if (r[v] > r[argmax]) argmax = v;
      }
      EXPECT_EQ(c.tokens[i], static_cast<int32_t>(argmax))
          << "greedy token differs from the reference";
    }
  }
  std::cout << "max |logit - reference| / max(1, |logits|) = " << worst << "\n";
  const EngineStats st = e.engine->stats();
  EXPECT_EQ(st.kv_blocks_used, 0);
  if (stats != nullptr) *stats = st;
}

TEST(EngineVsReference, ChunkedPrefillAcrossBlockBoundaries) {
  Scenario s;
  s.engine.block_size = 4;
  s.engine.max_num_batched_tokens = 7;  // chunks every prompt longer than the budget
  s.engine.max_num_seqs = 3;
  check_against_reference(s, 1);
}

TEST(EngineVsReference, LargeBudgetOneBlockSize16) {
  Scenario s;
  s.engine.block_size = 16;
  check_against_reference(s, 2);
}

TEST(EngineVsReference, QkvBiasAndTiedLmHead) {
  Scenario s;
  s.model.attention_bias = true;
  s.model.tie_word_embeddings = true;
  s.engine.block_size = 8;
  s.engine.max_num_batched_tokens = 13;
  check_against_reference(s, 3);
}

TEST(EngineVsReference, Llama3RopeScaling) {
  Scenario s;
  // Wavelengths of head_dim 16 at theta 10000 span 6 to 20,000 positions: with an original
  // context of 64 some frequencies are kept, some divided by 8 and some smoothly interpolated.
  s.model.rope_scaling = {"llama3", 8.0, 1.0, 4.0, 64};
  s.model.rope_theta = 10000;
  s.engine.block_size = 4;
  s.engine.max_num_batched_tokens = 11;
  check_against_reference(s, 4);
}

TEST(EngineVsReference, LinearRopeScalingAndMultiHeadAttention) {
  Scenario s;
  s.model.rope_scaling = {"linear", 2.0, 1.0, 4.0, 0};
  s.model.num_kv_heads = 4;
  s.engine.block_size = 2;
  check_against_reference(s, 5);
}

TEST(EngineVsReference, SlidingWindow) {
  Scenario s;
  s.model.sliding_window = 5;
  s.engine.block_size = 4;
  s.engine.max_num_batched_tokens = 9;
  check_against_reference(s, 6);
}

// Local + strided block-sparse attention on every layer, in blocks of 4 tokens so that the
// prompts cross many of them, with chunked prefill (chunks that start mid-block) and decode.
TEST(EngineVsReference, BlockSparseAttention) {
  Scenario s;
  s.engine.block_sparse_attention = "local_blocks=2,vert_stride=3,block_size=4";
  s.engine.block_size = 4;
  s.engine.max_num_batched_tokens = 9;
  s.prompt_lengths = {1, 5, 13, 30, 41};
  check_against_reference(s, 12);
  s.engine.block_sparse_attention = "block_size=3,local_blocks=1,vert_stride=4";
  s.engine.block_size = 16;
  s.engine.max_num_batched_tokens = 64;
  check_against_reference(s, 13);
}

// Every layer windowed: the blocks behind each sequence's window go back to the pool after each
// step and other sequences reuse them, the logits still the reference's; the peak is lower than
// the same traffic without a window, and with a pool too small for it without freeing, recompute
// preemption releases only the blocks still held.
TEST(EngineVsReference, SlidingWindowFreesTheBlocksBehindTheWindow) {
  Scenario s;
  s.model.sliding_window = 5;
  s.engine.block_size = 2;
  s.engine.max_num_batched_tokens = 9;
  s.prompt_lengths = {3, 17, 30, 12};
  s.max_tokens = 12;
  EngineStats windowed;
  check_against_reference(s, 9, &windowed);
  Scenario full = s;
  full.model.sliding_window = 0;
  EngineStats unwindowed;
  check_against_reference(full, 9, &unwindowed);
  EXPECT_LT(windowed.kv_blocks_peak, unwindowed.kv_blocks_peak);
  // A pool of 10 blocks, under the 21 the longest request's 41 cached tokens would take whole:
  // admitted, since it never holds more than its window and a chunk (8 blocks); the four
  // requests reuse each other's freed blocks, or preempt.
  s.engine.num_kv_blocks = 10;
  s.engine.max_model_len = 64;  // the default would be the pool's 20 tokens
  EngineStats tight;
  check_against_reference(s, 10, &tight);
  EXPECT_LE(tight.kv_blocks_peak, 10);
}

// 48 tokens of KV for 4 sequences of up to 24: forces recompute preemption.
Scenario preempting() {
  Scenario s;
  s.prompt_lengths = {9, 12, 7, 14};
  s.max_tokens = 10;
  s.engine.block_size = 4;
  s.engine.num_kv_blocks = 12;
  return s;
}

TEST(EngineVsReference, RecomputePreemptionKeepsLogitsExact) {
  EngineStats st;
  check_against_reference(preempting(), 7, &st);
  EXPECT_GT(st.preemptions, 0);
  EXPECT_EQ(st.kv_blocks_peak, 12);
}

// Prompt logits (GenerationRequest::prompt_logits_from): every position from `from` to the end of
// the prompt arrives once, in order, whatever the chunking and preemption, and each row is the
// reference's logits after that position.
void check_prompt_logits(const Scenario& s, uint64_t seed, EngineStats* stats = nullptr) {
  auto e = testing::make_engine(s.model, s.engine, seed);
  Rng rng(seed);
  std::map<uint64_t, std::vector<int32_t>> prompts;
  std::map<uint64_t, int> next;  // the next position each request must deliver
  for (size_t i = 0; i < s.prompt_lengths.size(); ++i) {
    prompts[i] = testing::random_prompt(rng, s.prompt_lengths[i], s.model.vocab_size);
    GenerationRequest r = testing::greedy_request(i, prompts[i], s.max_tokens);
    r.prompt_logits_from = std::min(static_cast<int>(i % 3), s.prompt_lengths[i] - 1);
    next[i] = r.prompt_logits_from;
    ASSERT_TRUE(e.engine->add_request(r).ok());
  }
  const auto vocab = static_cast<size_t>(s.model.vocab_size);
  while (e.engine->has_unfinished()) {
    auto out = e.engine->step();
    ASSERT_TRUE(out.ok());
    for (const PromptLogits& p : out->prompt_logits) {
      ASSERT_EQ(p.start_pos, next[p.request_id]) << "request " << p.request_id;
      ASSERT_GT(p.num_positions, 0);
      ASSERT_EQ(p.logits.size(), static_cast<size_t>(p.num_positions) * vocab);
      const auto ref = testing::reference_logits(s.model, e.host, prompts[p.request_id]);
      for (int i = 0; i < p.num_positions; ++i) {
        const auto& r = ref[static_cast<size_t>(p.start_pos + i)];
        for (size_t v = 0; v < vocab; ++v) {
          ASSERT_NEAR(p.logits[static_cast<size_t>(i) * vocab + v], r[v], kTolerance)
              << "request " << p.request_id << " position " << p.start_pos + i << " token " << v;
        }
      }
      next[p.request_id] += p.num_positions;
    }
  }
  for (const auto& [id, prompt] : prompts) {
    EXPECT_EQ(next[id], static_cast<int>(prompt.size())) << "request " << id;
  }
  if (stats != nullptr) *stats = e.engine->stats();
}

TEST(EnginePromptLogits, EveryPositionOnceAcrossChunks) {
  Scenario s;
  s.engine.block_size = 4;
  s.engine.max_num_batched_tokens = 7;  // prompts above 7 tokens prefill in chunks
  s.engine.max_num_seqs = 3;            // 3 sampled rows: the logits come 3 rows at a time
  s.max_tokens = 3;
  check_prompt_logits(s, 11);
}

TEST(EnginePromptLogits, NotRepeatedAfterPreemption) {
  EngineStats st;
  check_prompt_logits(preempting(), 7, &st);
  EXPECT_GT(st.preemptions, 0);
}

TEST(EnginePromptLogits, FromOutsideThePromptIsAUserError) {
  auto e = testing::make_engine(tiny_config(), EngineConfig{}, 1);
  GenerationRequest r = testing::greedy_request(1, {5, 6, 7}, 2);
  r.prompt_logits_from = 3;
  const Status st = e.engine->add_request(r);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("prompt_logits_from"), std::string::npos);
}

}  // namespace
}  // namespace ib
