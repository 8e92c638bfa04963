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
};

struct KvPoolPlan {
  int num_blocks = 0;
  int64_t block_bytes = 0;  // one block, all layers, K and V
  int max_model_len = 0;    // resolved
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

}  // namespace ib::detail
