// Internal to engine/: the scheduler. Each call to schedule() picks one batch under the token
// budget (max_num_batched_tokens) and the sequence cap (max_num_seqs):
//  1. running sequences, oldest first: each gets its uncomputed tokens (1 when decoding; the rest
//     of its prompt when its prefill was chunked), up to the remaining budget. When the pool has
//     too few blocks, the most recently admitted running sequence is preempted (recompute: its
//     blocks are freed, it goes back to the front of the waiting queue with its tokens kept),
//     repeatedly, until the allocation fits or the sequence itself is the victim;
//  2. continuous mode, only if nothing was preempted in this step: waiting sequences, in order,
//     while budget, max_num_seqs and free blocks allow; a prompt longer than the remaining budget
//     is chunked. Static mode: up to static_batch_size waiting sequences join, all at once, only
//     when nothing is running; they then proceed as running sequences.
// With a sliding window on every layer (sliding_window > 0), after each step the blocks of a
// running sequence that lie wholly before the window of its next query (position num_computed)
// go back to the pool: no later step reads them (a preempted sequence recomputes from 0).
// A scheduled sequence samples a token when its chunk reaches the end of its known tokens.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "engine/detail/block_pool.h"
#include "engine/detail/sequence.h"

namespace ib::detail {

struct SchedulerConfig {
  int block_size = 16;
  int max_num_seqs = 256;
  int max_num_batched_tokens = 8192;
  BatchingMode batching = BatchingMode::kContinuous;
  int static_batch_size = 8;
  int sliding_window = 0;  // every layer's window in tokens; 0: none (or not on every layer)
};

// The sliding window every layer of the model has (Gemma-2's alternate with global layers: 0).
inline int every_layer_window(const ModelConfig& m) {
  return m.alternating_sliding_window ? 0 : m.sliding_window;
}

// The most KV blocks a sequence of num_tokens cached tokens holds at once: all of them, or with a
// sliding window of W > 0 tokens on every layer those from its next query's window start to the
// end of a largest chunk (W - 1 + max_num_batched_tokens positions, plus one block for the
// alignment of the two ends), which the scheduler's freeing keeps it to.
int64_t max_blocks_held(int64_t num_tokens, int block_size, int sliding_window,
                        int max_num_batched_tokens);

struct ScheduledSeq {
  Sequence* seq = nullptr;
  int num_tokens = 0;   // tokens computed this step, from seq->num_computed on
  bool sample = false;  // the chunk ends at the last known token: sample the next one
};

struct SchedulerOutput {
  std::vector<ScheduledSeq> seqs;  // running order
  int num_prefill_tokens = 0;
  int num_decode_tokens = 0;  // sequences computing exactly their one newest generated token
  int num_preempted = 0;
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, BlockPool& pool);

  void add(std::unique_ptr<Sequence> seq);
  // Removes a waiting or running sequence and frees its blocks; nullptr if the id is not live.
  std::unique_ptr<Sequence> remove(uint64_t id);
  SchedulerOutput schedule();
  // On-demand KV growth: called with the number of missing blocks when the pool is short; true
  // when the pool grew by at least that many (the allocation is then retried).
  void set_grow(std::function<bool(int missing_blocks)> grow) { grow_ = std::move(grow); }
  // After the forward pass: advances each scheduled sequence by its tokens and appends the
  // sampled tokens (one per sampling sequence, in order). Finished sequences leave, their blocks
  // freed, and are returned.
  std::vector<std::unique_ptr<Sequence>> update(const SchedulerOutput& out,
                                                const std::vector<int32_t>& sampled);

  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  int num_running() const { return static_cast<int>(running_.size()); }
  bool has_unfinished() const { return !waiting_.empty() || !running_.empty(); }
  int blocks_for(int num_tokens) const {
    return (num_tokens + config_.block_size - 1) / config_.block_size;
  }
  // detail::max_blocks_held under this configuration.
  int64_t max_blocks_held(int64_t num_tokens) const {
    return detail::max_blocks_held(num_tokens, config_.block_size, config_.sliding_window,
                                   config_.max_num_batched_tokens);
  }

 private:
  // Allocates blocks so seq can hold n more tokens; false when the pool is short.
  bool reserve(Sequence& seq, int n);
  void preempt_last_running();
  // Returns all of seq's blocks still held (those behind the window already went) and clears
  // its table.
  void release_all(Sequence& seq);
  // The sliding window's freeing (see the top of this file).
  void release_behind_window(Sequence& seq);

  SchedulerConfig config_;
  BlockPool& pool_;
  std::function<bool(int)> grow_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;  // admission order
};

}  // namespace ib::detail
