// Scheduler: continuous and static batching with chunked prefill and recompute preemption
// (detail/scheduler.h states the policy).
#include "engine/detail/scheduler.h"

#include <algorithm>

namespace ib::detail {

Scheduler::Scheduler(const SchedulerConfig& config, BlockPool& pool)
    : config_(config), pool_(pool) {
  IB_ASSERT(config.block_size > 0 && config.max_num_seqs > 0 && config.max_num_batched_tokens > 0 &&
                config.static_batch_size > 0,
            "Scheduler: sizes must be positive");
}

void Scheduler::add(std::unique_ptr<Sequence> seq) {
  waiting_.push_back(std::move(seq));
}

std::unique_ptr<Sequence> Scheduler::remove(uint64_t id) {
  auto take = [&](auto& queue) -> std::unique_ptr<Sequence> {
    auto it = std::find_if(queue.begin(), queue.end(), [&](const auto& s) { return s->id == id; });
    if (it == queue.end()) return nullptr;
    std::unique_ptr<Sequence> seq = std::move(*it);
    queue.erase(it);
    release_all(*seq);
    return seq;
  };
  if (auto seq = take(running_)) return seq;
  return take(waiting_);
}

int64_t max_blocks_held(int64_t num_tokens, int block_size, int sliding_window,
                        int max_num_batched_tokens) {
  const auto blocks = [&](int64_t tokens) { return (tokens + block_size - 1) / block_size; };
  if (sliding_window <= 0) return blocks(num_tokens);
  return std::min(blocks(num_tokens),
                  blocks(int64_t{sliding_window} - 1 + max_num_batched_tokens) + 1);
}

void Scheduler::release_all(Sequence& seq) {
  pool_.release(seq.block_table, static_cast<size_t>(seq.num_window_freed));
  seq.num_window_freed = 0;
}

void Scheduler::release_behind_window(Sequence& seq) {
  if (config_.sliding_window <= 0) return;
  // The next query sits at position num_computed and reads keys from num_computed - W + 1 on.
  const int first_read = seq.num_computed - config_.sliding_window + 1;
  const int behind = std::min(first_read > 0 ? first_read / config_.block_size : 0,
                              static_cast<int>(seq.block_table.size()));
  if (behind <= seq.num_window_freed) return;
  pool_.release_range(seq.block_table, static_cast<size_t>(seq.num_window_freed),
                      static_cast<size_t>(behind));
  seq.num_window_freed = behind;
}

bool Scheduler::reserve(Sequence& seq, int n) {
  const int needed = blocks_for(seq.num_computed + n) - static_cast<int>(seq.block_table.size());
  if (needed <= 0 || pool_.allocate(needed, seq.block_table)) return true;
  return grow_ && grow_(needed - pool_.num_free()) && pool_.allocate(needed, seq.block_table);
}

void Scheduler::preempt_last_running() {
  std::unique_ptr<Sequence> victim = std::move(running_.back());
  running_.pop_back();
  release_all(*victim);
  victim->num_computed = 0;
  ++victim->num_preemptions;
  waiting_.push_front(std::move(victim));
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int budget = config_.max_num_batched_tokens;
  auto emit = [&](Sequence& seq, int n) {
    const bool decode = n == 1 && seq.num_computed >= seq.num_prompt_tokens;
    (decode ? out.num_decode_tokens : out.num_prefill_tokens) += n;
    out.seqs.push_back({&seq, n, seq.num_computed + n == seq.num_tokens()});
    budget -= n;
  };

  if (config_.batching == BatchingMode::kStatic && running_.empty()) {
    const int batch = std::min(config_.static_batch_size, config_.max_num_seqs);
    while (!waiting_.empty() && static_cast<int>(running_.size()) < batch) {
      running_.push_back(std::move(waiting_.front()));
      waiting_.pop_front();
    }
  }

  // 1. Running sequences, oldest first.
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence& seq = *running_[i];
    const int n = std::min(seq.num_uncomputed(), budget);
    bool preempted_self = false;
    while (!reserve(seq, n)) {
      const bool self = running_.back().get() == &seq;
      preempt_last_running();
      ++out.num_preempted;
      if (self) {
        preempted_self = true;
        break;
      }
    }
    if (preempted_self) break;
    emit(seq, n);
  }

  // 2. Admission of waiting sequences (continuous batching).
  if (config_.batching == BatchingMode::kContinuous && out.num_preempted == 0) {
    while (!waiting_.empty() && budget > 0 &&
           static_cast<int>(running_.size()) < config_.max_num_seqs) {
      Sequence& seq = *waiting_.front();
      const int n = std::min(seq.num_uncomputed(), budget);
      if (!reserve(seq, n)) break;
      running_.push_back(std::move(waiting_.front()));
      waiting_.pop_front();
      emit(seq, n);
    }
  }
  return out;
}

std::vector<std::unique_ptr<Sequence>> Scheduler::update(const SchedulerOutput& out,
                                                         const std::vector<int32_t>& sampled) {
  size_t next = 0;
  for (const ScheduledSeq& s : out.seqs) {
    s.seq->num_computed += s.num_tokens;
    if (!s.sample) continue;
    IB_ASSERT(next < sampled.size(), "Scheduler::update: fewer sampled tokens than sampling rows");
    s.seq->append(sampled[next++]);
  }
  IB_ASSERT(next == sampled.size(), "Scheduler::update: more sampled tokens than sampling rows");
  std::vector<std::unique_ptr<Sequence>> finished;
  for (auto it = running_.begin(); it != running_.end();) {
    if ((*it)->finish == FinishReason::kNone) {
      release_behind_window(**it);
      ++it;
      continue;
    }
    release_all(**it);
    finished.push_back(std::move(*it));
    it = running_.erase(it);
  }
  return finished;
}

}  // namespace ib::detail
