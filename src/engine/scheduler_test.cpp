// Scheduler iteration tables: given requests and budgets, the exact per-step list of which
// sequence computes how many tokens (* = samples a token), with chunked prefill, max_num_seqs,
// recompute preemption when the pool is small, and static batching.
#include "engine/detail/scheduler.h"

#include <gtest/gtest.h>

#include <string>

namespace ib::detail {
namespace {

struct Harness {
  BlockPool pool;
  Scheduler scheduler;
  int64_t preemptions = 0;

  Harness(const SchedulerConfig& config, int num_blocks)
      : pool(num_blocks), scheduler(config, pool) {}

  void add(uint64_t id, int prompt_len, int max_tokens) {
    GenerationRequest r;
    r.id = id;
    r.prompt_tokens.assign(static_cast<size_t>(prompt_len), 1);
    r.max_tokens = max_tokens;
    scheduler.add(std::make_unique<Sequence>(r, std::vector<int>{}));
  }

  // One step, as "A5* B3" (sequence ids 0, 1, ... print as A, B, ...); "P" marks a preemption.
  std::string step() {
    const SchedulerOutput out = scheduler.schedule();
    std::string row;
    std::vector<int32_t> sampled;
    for (const ScheduledSeq& s : out.seqs) {
      if (!row.empty()) row += " ";
      row +=
          static_cast<char>('A' + s.seq->id) + std::to_string(s.num_tokens) + (s.sample ? "*" : "");
      if (s.sample) sampled.push_back(7);
    }
    for (int i = 0; i < out.num_preempted; ++i) row += " P";
    preemptions += out.num_preempted;
    scheduler.update(out, sampled);
    return row;
  }

  std::vector<std::string> run(int max_steps = 100) {
    std::vector<std::string> table;
    while (scheduler.has_unfinished() && static_cast<int>(table.size()) < max_steps)
      table.push_back(step());
    return table;
  }
};

using Table = std::vector<std::string>;

TEST(Scheduler, ContinuousBatchingWithChunkedPrefillAndSeqCap) {
  Harness h({4, 3, 8, BatchingMode::kContinuous, 8}, 100);
  h.add(0, 5, 3);
  h.add(1, 6, 2);
  h.add(2, 3, 2);
  h.add(3, 2, 1);
  // Step 1: A's prompt, then B's first 3 prompt tokens fill the budget of 8.
  // Step 2: A decodes, B finishes its prompt, C is admitted (3 seqs = max_num_seqs).
  // Step 3: all three decode; D waits for a free slot. A, B, C finish.
  EXPECT_EQ(h.run(), (Table{"A5* B3", "A1* B3* C3*", "A1* B1* C1*", "D2*"}));
  EXPECT_EQ(h.pool.num_free(), 100);
}

TEST(Scheduler, DecodeTokensComeBeforeNewPrefills) {
  Harness h({16, 8, 4, BatchingMode::kContinuous, 8}, 100);
  h.add(0, 3, 3);
  h.add(1, 6, 1);
  // B's 6-token prompt is chunked into the budget left after A's decode token each step.
  EXPECT_EQ(h.run(), (Table{"A3* B1", "A1* B3", "A1* B2*"}));
}

TEST(Scheduler, PreemptsItselfWhenItIsTheNewestAndRecomputesLater) {
  // 5 blocks of 2 tokens; A and B each need 4 blocks to finish.
  Harness h({2, 4, 16, BatchingMode::kContinuous, 8}, 5);
  h.add(0, 4, 4);
  h.add(1, 4, 4);
  EXPECT_EQ(h.run(), (Table{
                         "A4* B4*",  // 2 + 2 blocks
                         "A1* P",    // A takes the last block; B (newest) is preempted
                         "A1*",      // B (5 tokens, 3 blocks) does not fit in the 2 free blocks
                         "A1*",      // A finishes: all 5 blocks free
                         "B5*",      // B recomputes its prompt and its first token
                         "B1*",
                         "B1*",
                     }));
  EXPECT_EQ(h.preemptions, 1);
  EXPECT_EQ(h.pool.num_free(), 5);
  EXPECT_EQ(h.pool.peak_used(), 5);
}

TEST(Scheduler, PreemptsTheNewestOtherSequenceToLetAnOlderOneGrow) {
  Harness h({2, 4, 16, BatchingMode::kContinuous, 8}, 4);
  h.add(0, 2, 3);
  h.add(1, 2, 3);
  h.add(2, 2, 3);
  EXPECT_EQ(h.run(), (Table{
                         "A2* B2* C2*",  // one block each, one block free
                         "A1* B1* P",    // A takes the free block; B needs one: C is preempted
                         "A1* B1*",      // C (3 tokens) waits for 2 blocks; A and B finish
                         "C3*",          // C recomputes
                         "C1*",
                     }));
  EXPECT_EQ(h.preemptions, 1);
  EXPECT_EQ(h.pool.num_free(), 4);
}

TEST(Scheduler, StaticBatchingAdmitsOnlyWhenNothingRuns) {
  Harness h({16, 256, 100, BatchingMode::kStatic, 2}, 100);
  h.add(0, 3, 2);
  h.add(1, 2, 3);
  h.add(2, 4, 1);
  h.add(3, 1, 1);
  EXPECT_EQ(h.run(), (Table{"A3* B2*", "A1* B1*", "B1*", "C4* D1*"}));
}

TEST(Scheduler, StaticBatchingChunksPrefillUnderTheBudget) {
  Harness h({16, 256, 4, BatchingMode::kStatic, 2}, 100);
  h.add(0, 3, 2);
  h.add(1, 5, 1);
  h.add(2, 1, 1);
  EXPECT_EQ(h.run(), (Table{"A3* B1", "A1* B3", "B1*", "C1*"}));
}

// A window of 5 on every layer, blocks of 2: after each step the blocks wholly before position
// num_computed - 4 go back to the pool; finishing or preemption returns only the rest.
TEST(Scheduler, SlidingWindowReturnsTheBlocksBehindTheWindow) {
  SchedulerConfig config{2, 8, 8, BatchingMode::kContinuous, 8};
  config.sliding_window = 5;
  Harness h(config, 20);
  h.add(0, 8, 6);
  EXPECT_EQ(h.step(), "A8*");  // 8 computed: positions 4.. read next; blocks 0, 1 go
  EXPECT_EQ(h.pool.num_used(), 2);
  EXPECT_EQ(h.step(), "A1*");  // 9 computed: position 5 on; block 2 (4, 5) still read
  EXPECT_EQ(h.pool.num_used(), 3);
  EXPECT_EQ(h.step(), "A1*");  // 10: from 6 on, block 2 goes; 5 blocks allocated, 3 freed
  EXPECT_EQ(h.pool.num_used(), 2);
  h.run();
  EXPECT_EQ(h.pool.num_used(), 0);  // the rest returned once, no double free
}

// B frees its first block after its first chunk, then cannot grow beside A and preempts itself:
// only the blocks it still holds go back (a double free would abort).
TEST(Scheduler, SlidingWindowPreemptionReturnsOnlyTheBlocksStillHeld) {
  SchedulerConfig config{2, 8, 6, BatchingMode::kContinuous, 8};
  config.sliding_window = 3;
  Harness h(config, 5);
  h.add(0, 2, 10);
  h.add(1, 12, 2);
  EXPECT_EQ(h.step(), "A2* B4");
  EXPECT_EQ(h.pool.num_used(), 2);  // B's block 0 went behind its window
  EXPECT_EQ(h.step(), "A1* P");
  EXPECT_EQ(h.pool.num_used(), 2);  // A's two blocks
  h.run();
  EXPECT_FALSE(h.scheduler.has_unfinished());
  EXPECT_EQ(h.pool.num_used(), 0);
}

TEST(Scheduler, MaxBlocksHeldIsTheWindowAndAChunkWithAWindow) {
  SchedulerConfig config{2, 8, 6, BatchingMode::kContinuous, 8};
  BlockPool pool(4);
  EXPECT_EQ(Scheduler(config, pool).max_blocks_held(41), 21);
  config.sliding_window = 5;
  const Scheduler windowed(config, pool);
  EXPECT_EQ(windowed.max_blocks_held(41), 6);  // ceil((4 + 6) / 2) + 1
  EXPECT_EQ(windowed.max_blocks_held(7), 4);   // short: all of it
}

TEST(Scheduler, RemoveFreesBlocksOfWaitingAndRunningSequences) {
  Harness h({4, 8, 8, BatchingMode::kContinuous, 8}, 10);
  h.add(0, 8, 4);
  h.add(1, 8, 4);
  EXPECT_EQ(h.step(), "A8*");
  EXPECT_EQ(h.pool.num_used(), 2);
  auto a = h.scheduler.remove(0);
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(a->block_table.empty());
  EXPECT_EQ(h.pool.num_used(), 0);
  EXPECT_NE(h.scheduler.remove(1), nullptr);
  EXPECT_EQ(h.scheduler.remove(1), nullptr);
  EXPECT_FALSE(h.scheduler.has_unfinished());
}

}  // namespace
}  // namespace ib::detail
