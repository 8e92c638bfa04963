// MemoryTracker: the one place every backend allocation is accounted. Bytes per tag (weights,
// KV cache, activations, workspace, CUDA graphs), current and peak, an optional cap that refuses
// allocations beyond it (--memory-limit), and an optional trace of every alloc/free.
// Threading: safe to call from any thread (a mutex guards the counters).
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace ib {

enum class MemoryTag : uint8_t { kWeights, kKvCache, kActivations, kWorkspace, kGraph, kOther };
inline constexpr int kNumMemoryTags = 6;
const char* memory_tag_name(MemoryTag tag);

struct MemoryEvent {
  int64_t time_ns = 0;
  uint64_t address = 0;
  int64_t bytes = 0;  // positive: alloc, negative: free
  MemoryTag tag = MemoryTag::kOther;
};

struct MemorySnapshot {
  std::array<int64_t, kNumMemoryTags> bytes_by_tag{};
  int64_t allocated_bytes = 0;  // sum over tags
  int64_t peak_allocated_bytes = 0;
  std::array<int64_t, kNumMemoryTags> peak_bytes_by_tag{};
  int64_t num_allocs = 0;
  int64_t num_frees = 0;
  int64_t num_refused = 0;  // allocations refused by the cap
};

class MemoryTracker {
 public:
  void set_limit_bytes(std::optional<int64_t> limit) {
    std::lock_guard lock(mu_);
    limit_bytes_ = limit;
  }
  std::optional<int64_t> limit_bytes() const {
    std::lock_guard lock(mu_);
    return limit_bytes_;
  }
  void set_tracing(bool on) {
    std::lock_guard lock(mu_);
    tracing_ = on;
  }

  // True if an allocation of bytes fits under the cap; counts a refusal otherwise.
  bool admit(int64_t bytes) { return admit_after_free(0, bytes); }
  // As admit(), for an allocation that would replace free_bytes of what is allocated now (a
  // reallocation refused up front, before anything is freed or copied).
  bool admit_after_free(int64_t free_bytes, int64_t bytes);
  // Whether bytes more would fit under the cap now (always without one); counts nothing.
  bool fits(int64_t bytes) const;
  void on_alloc(uint64_t address, int64_t bytes, MemoryTag tag);
  void on_free(uint64_t address, int64_t bytes, MemoryTag tag);

  MemorySnapshot snapshot() const;
  // Restarts the peaks at the current bytes (per-probe peaks of the OOM search).
  void reset_peak() {
    std::lock_guard lock(mu_);
    s_.peak_allocated_bytes = s_.allocated_bytes;
    s_.peak_bytes_by_tag = s_.bytes_by_tag;
  }
  std::vector<MemoryEvent> take_trace();

 private:
  mutable std::mutex mu_;
  MemorySnapshot s_;
  std::optional<int64_t> limit_bytes_;
  bool tracing_ = false;
  std::vector<MemoryEvent> trace_;
};

}  // namespace ib
