// Paged attention with one query token per work item (decode, and the fp32 / fallback path for
// prefill): the launch side of detail/split_kv_kernel.cuh — partition sizing, workspace and the
// configuration the H200 measurements chose.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/kernels.h"
#include "backend/cuda/detail/pdl.cuh"
#include "backend/cuda/detail/split_kv_kernel.cuh"
#include "backend/cuda_attention_sizes.h"

namespace ib::cuda {
namespace {

// Configurations measured on the H200 (bench/NOTES.md, run 4; all variants agree with each
// other to rel L2 <= 3e-5 in bf16): 8 warps with one 32-key chunk each win when the grid is
// small (latency-bound decode at small batch), 4 warps win once the grid has several blocks per
// SM. Value loads go out 8 keys at a time; prefetching them with the keys did not pay.
constexpr int kGroup = 8;
constexpr bool kPrefetch = false;

// TC: the cache's element (T, or uint8_t for E4M3).
template <typename T, typename TC, int HD, int GC, int kWarps>
void launch_config(const SplitParams& p, int tokens, cudaStream_t stream, bool pdl) {
  launch_kernel("attention(split_kv)", pdl,
                split_kv_kernel<T, HD, GC, kWarps, kGroup, kPrefetch, TC>,
                split_kv_grid(p, tokens, GC), dim3(kWarps * 32), 0, stream, p);
}

// The lean form (IB_ATTN_LEAN) where it exists: 2-byte caches of T, head_dim 64 or 128, groups of
// at most 4 query heads a block (groups of 8, Llama-3-70B's and Qwen2-72B's, keep the earlier
// form: their accumulators would double, and that form is neither compiled nor measured).
template <typename T, typename TC, int HD, int GC>
constexpr bool kHasLean =
    !std::is_same_v<T, float> && std::is_same_v<T, TC> && (HD == 64 || HD == 128) && GC <= 4;

// The lean kernel of kWarps warps, with p.lora's shares where it has them (p.lora.rank > 0).
template <typename T, int HD, int GC, int kWarps>
void launch_lean(const SplitParams& p, dim3 grid, cudaStream_t stream, bool pdl) {
  if (p.lora.rank > 0) {
    launch_kernel("attention(split_kv lean, LoRA)", pdl,
                  split_kv_lean_kernel<T, HD, GC, kWarps, true>, grid, dim3(kWarps * 32), 0, stream,
                  p);
  } else {
    launch_kernel("attention(split_kv lean)", pdl, split_kv_lean_kernel<T, HD, GC, kWarps>, grid,
                  dim3(kWarps * 32), 0, stream, p);
  }
}

// Returns whether the lean form ran (and with it p.lora's shares, where p.lora.rank > 0).
template <typename T, typename TC, int HD, int GC>
bool launch_split(const SplitParams& p, int tokens, int num_sms, cudaStream_t stream, bool pdl,
                  [[maybe_unused]] int lean) {
  bool ran_lean = false;
  // The choice counts (token, KV head chunk) pairs, not partitions: a captured decode graph has
  // the partitions of its longest context (8,192 tokens), of which a short context uses one, so
  // counting them picked the 4-warp kernel for batch 8 at context 160 (18.2 µs against 10.6;
  // bench/NOTES.md, phase 4). Eager calls with long contexts lose at most ~10 % (8 x 2048).
  const dim3 grid = split_kv_grid(p, tokens, GC);
  [[maybe_unused]] const int64_t blocks = int64_t{grid.x} * grid.y;
  // The 8-warp kernel's static shared memory at head_dim 256 with 8 heads a block (the warps'
  // merge buffer alone is 64 KiB) is past the 48 KiB limit: that configuration runs 4 warps.
  if constexpr (HD == 256 && GC == 8) {
    launch_config<T, TC, HD, GC, 4>(p, tokens, stream, pdl);
  } else if (std::is_same_v<T, float> || blocks <= 2 * int64_t{num_sms}) {
    // fp32 is the correctness mode: one configuration keeps its compile time down.
    if constexpr (kHasLean<T, TC, HD, GC>) {
      // IB_ATTN_LEAN=1: 8 warps where every block fits an SM alone (its registers allow one),
      // else 4; 2: 4 warps.
      if (lean == 1 && blocks <= num_sms) {
        launch_lean<T, HD, GC, 8>(p, grid, stream, pdl);
        ran_lean = true;
      } else if (lean != 0) {
        launch_lean<T, HD, GC, 4>(p, grid, stream, pdl);
        ran_lean = true;
      }
    }
    if (!ran_lean) launch_config<T, TC, HD, GC, 8>(p, tokens, stream, pdl);
  } else if constexpr (!std::is_same_v<T, float>) {
    launch_config<T, TC, HD, GC, 4>(p, tokens, stream, pdl);
  }
  if (p.num_partitions > 1 && p.counters == nullptr) {
    merge_kernel<T, HD><<<merge_grid(p, tokens), HD, 0, stream>>>(p);
    IB_CUDA_CHECK_LAUNCH("attention(split_kv merge)");
  }
  return ran_lean;
}

template <typename T, typename TC, int HD>
bool launch_for_group(const SplitParams& p, int tokens, int num_sms, cudaStream_t stream, bool pdl,
                      int lean) {
  if (p.group == 1) {
    return launch_split<T, TC, HD, 1>(p, tokens, num_sms, stream, pdl, lean);
  } else if (p.group <= 4) {
    return launch_split<T, TC, HD, 4>(p, tokens, num_sms, stream, pdl, lean);
  } else {
    return launch_split<T, TC, HD, 8>(p, tokens, num_sms, stream, pdl, lean);
  }
}

template <typename T, typename TC>
bool launch_for_head_dim(const SplitParams& p, int head_dim, int tokens, int num_sms,
                         cudaStream_t stream, bool pdl, int lean) {
  switch (head_dim) {
    case 64:
      return launch_for_group<T, TC, 64>(p, tokens, num_sms, stream, pdl, lean);
    case 96:
      return launch_for_group<T, TC, 96>(p, tokens, num_sms, stream, pdl, lean);
    case 256:
      return launch_for_group<T, TC, 256>(p, tokens, num_sms, stream, pdl, lean);
    default:
      return launch_for_group<T, TC, 128>(p, tokens, num_sms, stream, pdl, lean);
  }
}

}  // namespace

bool split_kv_supports(const AttentionShape& shape) {
  return cuda_attention_supports_head_dim(shape.head_dim);
}

size_t split_kv_workspace_bytes(int num_tokens, const AttentionShape& shape, int num_splits) {
  return static_cast<size_t>(num_tokens) * static_cast<size_t>(shape.num_heads) *
         static_cast<size_t>(num_splits) * static_cast<size_t>(shape.head_dim + 2) * sizeof(float);
}

int split_kv_partition_size(const AttentionMetadata& meta, const AttentionShape& shape,
                            size_t workspace_bytes, int num_sms) {
  const int max_ctx = std::max(meta.max_context_len, 1);
  const int group = shape.num_heads / shape.num_kv_heads;
  const int chunks = group == 1 ? 1 : (group <= 4 ? (group + 3) / 4 : (group + 7) / 8);
  const int64_t blocks = int64_t{meta.num_tokens} * shape.num_kv_heads * chunks;
  int splits = static_cast<int>(std::max<int64_t>(1, (2 * int64_t{num_sms} + blocks - 1) / blocks));
  splits = std::min(splits, (max_ctx + kSplitMinPartition - 1) / kSplitMinPartition);
  const size_t per_split = split_kv_workspace_bytes(meta.num_tokens, shape, 1);
  const int fit =
      static_cast<int>(std::min<size_t>(workspace_bytes / std::max<size_t>(per_split, 1), 1 << 20));
  splits = std::max(1, std::min(splits, fit));
  if (splits == 1) return max_ctx;
  const int size = (max_ctx + splits - 1) / splits;
  return (size + 31) / 32 * 32;
}

SplitKvRan launch_attention_split_kv(const Tensor& qkv, const KvCacheLayer& kv,
                                     const AttentionMetadata& meta, const AttentionShape& shape,
                                     int partition_size, void* workspace, size_t workspace_bytes,
                                     unsigned* counters, size_t num_counters, int num_sms,
                                     Tensor out, cudaStream_t stream, bool pdl, bool prefetch_kv,
                                     bool pdl_trigger_early, int lean, const AttnLora* lora) {
  IB_ASSERT(split_kv_supports(shape), "attention: head_dim must be 64, 96, 128 or 256 on CUDA");
  IB_ASSERT(partition_size > 0, "attention: partition size must be positive");
  if (meta.num_tokens == 0) return {};
  SplitParams p = make_split_params(qkv, kv, meta, shape, partition_size, workspace,
                                    workspace_bytes, out, nullptr, prefetch_kv);
  p.trigger_early = pdl_trigger_early ? 1 : 0;
  // The merge runs inside the kernel when every (token, KV head chunk) has a counter.
  const int group = shape.num_heads / shape.num_kv_heads;
  const int gc = group == 1 ? 1 : (group <= 4 ? 4 : 8);
  const dim3 grid = split_kv_grid(p, meta.num_tokens, gc);
  if (size_t{grid.x} * grid.y <= num_counters) p.counters = counters;
  IB_ASSERT(p.num_partitions == 1 || split_kv_workspace_bytes(meta.num_tokens, shape,
                                                              p.num_partitions) <= workspace_bytes,
            "attention: split-KV workspace too small");
  const int tokens = meta.num_tokens;
  // The LoRA shares need every chunk finished in this launch (the merge in the kernel, or one
  // partition), a's rows whole (out (T, num_heads x head_dim)) and the lean form (below).
  const int64_t lora_rows =
      lora != nullptr ? int64_t{lora->cur.count + lora->next_m.count} * lora->rank : 0;
  const bool lora_fits = lora != nullptr && lora->rank > 0 && tokens <= 8 &&
                         (p.num_partitions == 1 || p.counters != nullptr) &&
                         out.row_size() == int64_t{shape.num_heads} * shape.head_dim &&
                         kv.k.dtype == qkv.dtype &&
                         int64_t{tokens} * grid.y * lora_rows <= lora->partial_floats;
  if (lora_fits) p.lora = *lora;
  bool ran_lean = false;
  IB_DISPATCH_FLOAT(qkv.dtype, T, {
    if (kv.k.dtype == DType::kF8E4M3) {
      ran_lean =
          launch_for_head_dim<T, uint8_t>(p, shape.head_dim, tokens, num_sms, stream, pdl, lean);
    } else {
      ran_lean = launch_for_head_dim<T, T>(p, shape.head_dim, tokens, num_sms, stream, pdl, lean);
    }
  });
  return SplitKvRan{ran_lean, ran_lean && lora_fits};
}

}  // namespace ib::cuda
