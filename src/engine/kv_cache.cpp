// KV pool sizing (one function for every backend) and allocation.
#include "engine/detail/kv_cache.h"

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "engine/detail/scheduler.h"

namespace ib::detail {
namespace {

constexpr size_t kHugePageBytes = size_t{2} << 20;

std::string mib(int64_t bytes) {
  return std::to_string(bytes >> 20) + " MiB";
}

}  // namespace

Result<KvPoolPlan> plan_kv_pool(const KvPoolInputs& in) {
  const ModelConfig& m = *in.model;
  const EngineConfig& c = *in.config;
  KvPoolPlan plan;
  plan.block_bytes = int64_t{c.block_size} * m.kv_bytes_per_token(in.kv_dtype);
  if (c.max_model_len > m.max_position_embeddings) {
    return user_error("--max-model-len " + std::to_string(c.max_model_len) + " exceeds model '" +
                      m.name + "' context of " + std::to_string(m.max_position_embeddings) +
                      " tokens; use at most " + std::to_string(m.max_position_embeddings));
  }
  const int max_len = c.max_model_len > 0 ? c.max_model_len : m.max_position_embeddings;
  const int64_t blocks_per_seq = (max_len + c.block_size - 1) / c.block_size;

  int64_t blocks = 0;
  std::string source;
  if (c.num_kv_blocks > 0) {
    blocks = c.num_kv_blocks;
    source = "num_kv_blocks " + std::to_string(c.num_kv_blocks);
  } else if (in.device.kind == "cpu") {
    blocks =
        std::min(c.cpu_kv_cache_bytes / plan.block_bytes, int64_t{c.max_num_seqs} * blocks_per_seq);
    if (in.device.free_bytes > 0)
      blocks = std::min(blocks, in.device.free_bytes / plan.block_bytes);
    source = "--kv-cache-memory " + mib(c.cpu_kv_cache_bytes);
  } else if (in.on_demand) {
    blocks = std::min(in.device.total_bytes / plan.block_bytes,
                      int64_t{c.max_num_seqs} * blocks_per_seq);
    source = "the device's " + mib(in.device.total_bytes);
  } else {
    const auto target =
        static_cast<int64_t>(static_cast<double>(in.device.total_bytes) * c.gpu_memory_utilization);
    const int64_t budget = std::min(target - in.engine_allocated_bytes, in.device.free_bytes);
    blocks = std::max<int64_t>(0, budget) / plan.block_bytes;
    char fraction[16];
    std::snprintf(fraction, sizeof(fraction), "%.2f", c.gpu_memory_utilization);
    source = std::string("--gpu-memory-utilization ") + fraction + " of " +
             mib(in.device.total_bytes) + " with " + mib(in.engine_allocated_bytes) +
             " already used";
  }
  if (in.memory_limit_bytes && !in.on_demand) {
    const int64_t room = std::max<int64_t>(0, *in.memory_limit_bytes - in.engine_allocated_bytes);
    if (room / plan.block_bytes < blocks) {
      blocks = room / plan.block_bytes;
      source = "the memory limit (" + mib(room) + " left)";
    }
  }
  blocks = std::min<int64_t>(blocks, 1 << 30);
  if (blocks <= 0) {
    return user_error("no memory left for the KV cache (" + source + ", " + mib(plan.block_bytes) +
                      " per block of " + std::to_string(c.block_size) +
                      " tokens); lower --max-num-batched-tokens, or raise " +
                      (in.device.kind == "cpu" ? std::string("--kv-cache-memory")
                                               : std::string("--gpu-memory-utilization")));
  }
  plan.num_blocks = static_cast<int>(blocks);
  plan.initial_blocks = plan.num_blocks;
  if (in.on_demand) {
    const int chunk = c.kv_growth_min_blocks > 0
                          ? c.kv_growth_min_blocks
                          : static_cast<int>(std::max<int64_t>(16, blocks / 64));
    plan.initial_blocks = std::min(plan.num_blocks, chunk);
  }
  const int64_t capacity_tokens = blocks * c.block_size;
  // A sequence of max_len tokens holds at most this many at once (a sliding window on every
  // layer frees the blocks behind it: Scheduler).
  const int64_t held_tokens =
      max_blocks_held(max_len, c.block_size, every_layer_window(m), c.max_num_batched_tokens) *
      c.block_size;
  if (capacity_tokens < held_tokens) {
    if (c.max_model_len > 0) {
      return user_error("the KV cache holds " + std::to_string(capacity_tokens) + " tokens (" +
                        std::to_string(blocks) + " blocks, from " + source +
                        ") but --max-model-len is " + std::to_string(c.max_model_len) +
                        "; lower --max-model-len or raise " +
                        (in.device.kind == "cpu" ? std::string("--kv-cache-memory")
                                                 : std::string("--gpu-memory-utilization")));
    }
    plan.max_model_len = static_cast<int>(capacity_tokens);
  } else {
    plan.max_model_len = max_len;
  }
  return plan;
}

Result<KvCache> allocate_kv_cache(const ModelConfig& m, int num_blocks, int block_size,
                                  const KvCacheFormat& format, Backend& backend) {
  const DType dt = format.dtype;
  const auto scale = [&](const std::vector<float>& scales, int layer) {
    return scales.empty() ? 1.0f : scales.at(static_cast<size_t>(layer));
  };
  // The architecture's entry per token and layer (ModelConfig::kv_entry): K and V of heads x
  // width values, or one latent (MLA) in K with V empty.
  const KvEntryShape entry = m.kv_entry();
  const int halves = entry.separate_v ? 2 : 1;
  const int64_t per_layer = int64_t{num_blocks} * entry.heads * block_size * entry.width;
  KvCache kv;
  kv.format = format;
  IB_ASSIGN_OR_RETURN(
      kv.storage,
      backend.alloc(static_cast<size_t>(halves * m.num_layers * per_layer) * dtype_size(dt),
                    MemoryTag::kKvCache));
  const size_t half_bytes = static_cast<size_t>(per_layer) * dtype_size(dt);
  for (int l = 0; l < m.num_layers; ++l) {
    const size_t base = static_cast<size_t>(halves) * static_cast<size_t>(l) * half_bytes;
    KvCacheLayer layer;
    layer.k = kv.storage.view(dt, {num_blocks, entry.heads, block_size, entry.width}, base);
    if (entry.separate_v) {
      layer.v = kv.storage.view(dt, {num_blocks, entry.heads, block_size, entry.width},
                                base + half_bytes);
    }
    layer.block_size = block_size;
    layer.k_scale = scale(format.k_scales, l);
    layer.v_scale = scale(format.v_scales, l);
    kv.layers.push_back(layer);
  }
  return kv;
}

void HostStaging::Free::operator()(std::byte* p) const {
  std::free(p);
}

Result<std::byte*> HostStaging::reserve(size_t min_bytes, size_t want_bytes) {
  IB_ASSERT(want_bytes >= min_bytes, "HostStaging::reserve: want_bytes < min_bytes");
  if (bytes_ >= min_bytes) return data_.get();
  data_.reset();
  bytes_ = 0;
  auto round_up = [](size_t b) {
    return std::max(kHugePageBytes, (b + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes);
  };
  size_t size = round_up(want_bytes);
  void* ptr = std::aligned_alloc(kHugePageBytes, size);
  if (ptr == nullptr && want_bytes > min_bytes) {  // the headroom for later growths is optional
    size = round_up(min_bytes);
    ptr = std::aligned_alloc(kHugePageBytes, size);
  }
  if (ptr == nullptr) {
    return runtime_error("out of host memory: staging " + mib(static_cast<int64_t>(size)) +
                         " of KV cache for its growth failed; lower --memory-limit or use "
                         "--kv-cache-growth preallocated");
  }
#if defined(__linux__)
  madvise(ptr, size, MADV_HUGEPAGE);  // a hint: 2 MiB faults instead of 4 KiB ones
#endif
  data_.reset(static_cast<std::byte*>(ptr));
  bytes_ = size;
  return data_.get();
}

Result<KvGrowthPath> grow_kv_cache(KvCache& kv, const ModelConfig& m, int new_num_blocks,
                                   int block_size, Backend& backend, HostStaging& staging) {
  IB_TRY(backend.device_status());  // a faulted device copies nothing; leave the pool alone
  const KvCacheFormat format = kv.format;
  const DType dt = format.dtype;
  const size_t elem_bytes = dtype_size(dt);
  const int old_blocks = kv.layers.empty() ? 0 : static_cast<int>(kv.layers[0].k.dim(0));
  IB_ASSERT(new_num_blocks >= old_blocks, "grow_kv_cache: cannot shrink");
  // Elements of one layer's K (or V) half, old and new; halves: K and V, or the MLA latent alone.
  const KvEntryShape entry = m.kv_entry();
  const int64_t halves = entry.separate_v ? 2 : 1;
  const int64_t entry_values = int64_t{entry.heads} * entry.width;
  const int64_t old_half = int64_t{old_blocks} * block_size * entry_values;
  const int64_t new_half = int64_t{new_num_blocks} * block_size * entry_values;
  const size_t new_bytes =
      Backend::alloc_bytes(static_cast<size_t>(halves * m.num_layers * new_half) * elem_bytes);
  const auto old_bytes = static_cast<int64_t>(kv.storage.bytes());

  // 1. Refused even with the old pool freed: refuse before copying anything.
  MemoryTracker& memory = backend.memory();
  if (!memory.admit_after_free(old_bytes, static_cast<int64_t>(new_bytes))) {
    return backend.cap_refusal(new_bytes, MemoryTag::kKvCache);
  }

  // 2. Old and new fit together: device to device. Per layer, K then V: the old blocks are the
  // leading rows of each half, (old_half) contiguous elements = (old_blocks, heads, bs, d).
  if (memory.fits(static_cast<int64_t>(new_bytes))) {
    auto grown = allocate_kv_cache(m, new_num_blocks, block_size, format, backend);
    if (grown.ok()) {
      for (size_t l = 0; l < kv.layers.size() && old_half > 0; ++l) {
        const KvCacheLayer& from = kv.layers[l];
        const KvCacheLayer& to = grown->layers[l];
        backend.copy_on_device(Tensor(to.k.data, dt, {old_half}),
                               Tensor(from.k.data, dt, {old_half}));
        if (entry.separate_v) {
          backend.copy_on_device(Tensor(to.v.data, dt, {old_half}),
                                 Tensor(from.v.data, dt, {old_half}));
        }
      }
      backend.synchronize();  // the copies have read the old storage before it is freed
      IB_TRY(backend.device_status());
      kv = std::move(grown).value();
      return KvGrowthPath::kDeviceCopy;
    }
    // The device refused the new storage beside the old (the tracker did not): stage instead.
    IB_TRY(backend.device_status());
  }

  // 3. Through host staging: the old storage is freed before the new one is allocated.
  const int64_t old_elems = halves * m.num_layers * old_half;
  const auto old_used_bytes = static_cast<size_t>(old_elems) * elem_bytes;
  std::byte* host = nullptr;
  if (old_elems > 0) {
    IB_ASSIGN_OR_RETURN(host, staging.reserve(old_used_bytes, new_bytes));
    backend.copy_to_host(kv.storage.view(dt, {old_elems}), host);
  }
  IB_TRY(backend.device_status());
  kv = KvCache{};  // frees the old storage
  auto restore = [&](const Error& e) -> Error {
    auto back = allocate_kv_cache(m, old_blocks, block_size, format, backend);
    IB_ASSERT(back.ok(), "grow_kv_cache: cannot re-allocate the KV cache it just freed");
    kv = std::move(back).value();
    if (old_elems > 0) backend.copy_from_host(kv.storage.view(dt, {old_elems}), host, dt);
    backend.synchronize();
    return e;
  };
  auto grown = allocate_kv_cache(m, new_num_blocks, block_size, format, backend);
  if (!grown.ok()) return restore(grown.error());
  kv = std::move(grown).value();
  for (int64_t h = 0; h < halves * m.num_layers && old_half > 0; ++h) {
    const auto dst = static_cast<size_t>(h * new_half) * elem_bytes;
    const auto src = static_cast<size_t>(h * old_half) * elem_bytes;
    backend.copy_from_host(kv.storage.view(dt, {old_half}, dst), host + src, dt);
  }
  backend.synchronize();
  IB_TRY(backend.device_status());
  return KvGrowthPath::kHostStaged;
}

}  // namespace ib::detail
