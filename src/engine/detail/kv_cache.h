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

#include <cstdint>
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

// The pool: per-layer K and V views into one allocation (tag kKvCache).
// Layout (num_layers, 2, num_blocks, num_kv_heads, block_size, head_dim).
struct KvCache {
  Buffer storage;
  std::vector<KvCacheLayer> layers;
};
Result<KvCache> allocate_kv_cache(const ModelConfig& model, int num_blocks, int block_size,
                                  Backend& backend);

// Reallocates kv to new_num_blocks blocks, keeping the contents of the existing blocks. The old
// contents are staged in host memory and the old storage is freed before the new one is
// allocated, so the tracked peak never holds both. On a refused allocation kv is restored to its
// old size (contents included) and the allocator's error returned.
Status grow_kv_cache(KvCache& kv, const ModelConfig& model, int new_num_blocks, int block_size,
                     Backend& backend);

}  // namespace ib::detail
