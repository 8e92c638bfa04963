// Internal to engine/: sizing and allocation of the paged KV cache. plan_kv_pool() is the one
// place the pool size is decided, for every backend:
//  - EngineConfig::num_kv_blocks > 0: exactly that many blocks;
//  - CPU: cpu_kv_cache_bytes, capped at max_num_seqs sequences of max_model_len and at the host's
//    available memory;
//  - CUDA: total_bytes * gpu_memory_utilization minus what the engine already holds (weights,
//    activations, workspace: engine_allocated_bytes), capped at the device's free memory;
//  - and always under the memory tracker's limit.
// max_model_len 0 (auto) becomes the model's context, shortened to what the pool holds; an
// explicit max_model_len the pool cannot hold is a user error naming both numbers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "engine/engine.h"

namespace ib::detail {

struct KvPoolInputs {
  const ModelConfig* model = nullptr;
  const EngineConfig* config = nullptr;
  DeviceInfo device;
  DType kv_dtype = DType::kF32;
  int64_t engine_allocated_bytes = 0;         // weights + activations already allocated
  std::optional<int64_t> memory_limit_bytes;  // the tracker's cap
  // KvGrowth::kOnDemand: plan the capacity the pool may grow to, not bounded by the memory
  // limit nor by --gpu-memory-utilization (only by the device's total memory): the allocator's
  // refusal is the limit.
  bool on_demand = false;
};

struct KvPoolPlan {
  int num_blocks = 0;
  int64_t block_bytes = 0;  // one block, all layers, K and V
  int max_model_len = 0;    // resolved
  int initial_blocks = 0;   // blocks allocated at startup (= num_blocks unless on demand)
};

Result<KvPoolPlan> plan_kv_pool(const KvPoolInputs& in);

// The cache's element type and, for fp8_e4m3, each layer's scales (backend/ops.h, KvCacheLayer).
struct KvCacheFormat {
  DType dtype = DType::kF32;
  std::vector<float> k_scales, v_scales;  // (num_layers), or empty: 1.0
};

// The pool: per-layer K and V views into one allocation (tag kKvCache), in the model's entry
// shape (ModelConfig::kv_entry). Layout (num_layers, 2, num_blocks, num_kv_heads, block_size,
// head_dim), format.dtype; under MLA (num_layers, num_blocks, 1, block_size, kv_lora_rank +
// qk_rope_head_dim) in K, V empty.
struct KvCache {
  Buffer storage;
  std::vector<KvCacheLayer> layers;
  KvCacheFormat format;
};
Result<KvCache> allocate_kv_cache(const ModelConfig& model, int num_blocks, int block_size,
                                  const KvCacheFormat& format, Backend& backend);

// Host memory the staged growth path copies the old pool through, kept across growths so its
// pages are faulted once: a staged growth sizes it to the pool after the growth, which is what
// the next staged growth copies. Large sizes ask for transparent huge pages.
class HostStaging {
 public:
  // At least min_bytes of staging: the current buffer when it is large enough, else a fresh one
  // of want_bytes (>= min_bytes). A runtime error when the host cannot allocate it.
  Result<std::byte*> reserve(size_t min_bytes, size_t want_bytes);
  size_t bytes() const { return bytes_; }

 private:
  struct Free {
    void operator()(std::byte* p) const;
  };
  std::unique_ptr<std::byte, Free> data_;  // (bytes_) host bytes, not zero-filled
  size_t bytes_ = 0;
};

enum class KvGrowthPath {
  kDeviceCopy,  // new storage allocated beside the old, copied device to device
  kHostStaged,  // old storage copied to the host and freed before the new one was allocated
};

// Reallocates kv to new_num_blocks blocks (in kv.format), keeping the contents of the existing
// blocks, in the
// cheapest way the tracker's cap allows:
//  1. when the new pool cannot fit under the cap even with the old one freed, it is refused at
//     once (counted by the tracker, the same error as the allocator's), before any copy;
//  2. when old and new fit together, the new storage is allocated first and each layer's K and
//     V copied device to device (the tracked peak holds both, as the process really does);
//  3. otherwise (or when the device refuses the new storage beside the old) the old contents
//     are staged in `staging`, the old storage freed, the new one allocated and filled, so the
//     tracked peak never holds both. If that allocation is refused, kv is restored to its old
//     size (contents included) and the allocator's error returned.
// On any error kv holds exactly the blocks and contents it held before.
Result<KvGrowthPath> grow_kv_cache(KvCache& kv, const ModelConfig& model, int new_num_blocks,
                                   int block_size, Backend& backend, HostStaging& staging);

}  // namespace ib::detail
