#include "backend/memory_tracker.h"

#include <algorithm>

#include "core/clock.h"

namespace ib {

const char* memory_tag_name(MemoryTag tag) {
  switch (tag) {
    case MemoryTag::kWeights:
      return "weights";
    case MemoryTag::kKvCache:
      return "kv_cache";
    case MemoryTag::kActivations:
      return "activations";
    case MemoryTag::kWorkspace:
      return "workspace";
    case MemoryTag::kGraph:
      return "cuda_graphs";
    case MemoryTag::kOther:
      return "other";
  }
  return "?";
}

bool MemoryTracker::admit_after_free(int64_t free_bytes, int64_t bytes) {
  std::lock_guard lock(mu_);
  if (limit_bytes_ && s_.allocated_bytes - free_bytes + bytes > *limit_bytes_) {
    ++s_.num_refused;
    return false;
  }
  return true;
}

bool MemoryTracker::fits(int64_t bytes) const {
  std::lock_guard lock(mu_);
  return !limit_bytes_ || s_.allocated_bytes + bytes <= *limit_bytes_;
}

void MemoryTracker::on_alloc(uint64_t address, int64_t bytes, MemoryTag tag) {
  std::lock_guard lock(mu_);
  const auto t = static_cast<size_t>(tag);
  s_.bytes_by_tag[t] += bytes;
  s_.allocated_bytes += bytes;
  s_.peak_allocated_bytes = std::max(s_.peak_allocated_bytes, s_.allocated_bytes);
  s_.peak_bytes_by_tag[t] = std::max(s_.peak_bytes_by_tag[t], s_.bytes_by_tag[t]);
  ++s_.num_allocs;
  if (tracing_) trace_.push_back({now_ns(), address, bytes, tag});
}

void MemoryTracker::on_free(uint64_t address, int64_t bytes, MemoryTag tag) {
  std::lock_guard lock(mu_);
  s_.bytes_by_tag[static_cast<size_t>(tag)] -= bytes;
  s_.allocated_bytes -= bytes;
  ++s_.num_frees;
  if (tracing_) trace_.push_back({now_ns(), address, -bytes, tag});
}

MemorySnapshot MemoryTracker::snapshot() const {
  std::lock_guard lock(mu_);
  return s_;
}

std::vector<MemoryEvent> MemoryTracker::take_trace() {
  std::lock_guard lock(mu_);
  std::vector<MemoryEvent> out;
  out.swap(trace_);
  return out;
}

}  // namespace ib
