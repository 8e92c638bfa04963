// Paged attention with one query token per work item (decode, and the fp32 / fallback path for
// prefill): the launch side of detail/split_kv_kernel.cuh — partition sizing, workspace and the
// configuration the H200 measurements chose.
#include <algorithm>
#include <cmath>

#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/kernels.h"
#include "backend/cuda/detail/split_kv_kernel.cuh"

namespace ib::cuda {
namespace {

// Measured on the H200 (bench/NOTES.md, run 4).
constexpr int kWarps = 8;
constexpr bool kPrefetchValues = true;

template <typename T, int HD, int GC>
void launch_split(const SplitParams& p, int tokens, cudaStream_t stream) {
  constexpr int kGroup = sizeof(T) * (HD / 32) <= 8 ? 16 : 8;
  split_kv_kernel<T, HD, GC, kWarps, kGroup, kPrefetchValues>
      <<<split_kv_grid(p, tokens, GC), kWarps * 32, 0, stream>>>(p);
  IB_CUDA_CHECK_LAUNCH("attention(split_kv)");
  if (p.num_partitions > 1) {
    merge_kernel<T, HD><<<merge_grid(p, tokens), HD, 0, stream>>>(p);
    IB_CUDA_CHECK_LAUNCH("attention(split_kv merge)");
  }
}

template <typename T, int HD>
void launch_for_group(const SplitParams& p, int tokens, cudaStream_t stream) {
  if (p.group == 1) {
    launch_split<T, HD, 1>(p, tokens, stream);
  } else if (p.group <= 4) {
    launch_split<T, HD, 4>(p, tokens, stream);
  } else {
    launch_split<T, HD, 8>(p, tokens, stream);
  }
}

}  // namespace

bool split_kv_supports(const AttentionShape& shape) {
  return shape.head_dim == 64 || shape.head_dim == 96 || shape.head_dim == 128;
}

size_t split_kv_workspace_bytes(int num_tokens, const AttentionShape& shape, int num_splits) {
  return static_cast<size_t>(num_tokens) * static_cast<size_t>(shape.num_heads) *
         static_cast<size_t>(num_splits) * static_cast<size_t>(shape.head_dim + 2) * sizeof(float);
}

int split_kv_partition_size(const AttentionMetadata& meta, const AttentionShape& shape,
                            size_t workspace_bytes, int num_sms) {
  constexpr int kMinPartition = 256;
  const int max_ctx = std::max(meta.max_context_len, 1);
  const int group = shape.num_heads / shape.num_kv_heads;
  const int chunks = group == 1 ? 1 : (group <= 4 ? (group + 3) / 4 : (group + 7) / 8);
  const int64_t blocks = int64_t{meta.num_tokens} * shape.num_kv_heads * chunks;
  int splits = static_cast<int>(std::max<int64_t>(1, (2 * int64_t{num_sms} + blocks - 1) / blocks));
  splits = std::min(splits, (max_ctx + kMinPartition - 1) / kMinPartition);
  const size_t per_split = split_kv_workspace_bytes(meta.num_tokens, shape, 1);
  const int fit =
      static_cast<int>(std::min<size_t>(workspace_bytes / std::max<size_t>(per_split, 1), 1 << 20));
  splits = std::max(1, std::min(splits, fit));
  if (splits == 1) return max_ctx;
  const int size = (max_ctx + splits - 1) / splits;
  return (size + 31) / 32 * 32;
}

void launch_attention_split_kv(const Tensor& qkv, const KvCacheLayer& kv,
                               const AttentionMetadata& meta, const AttentionShape& shape,
                               int partition_size, void* workspace, size_t workspace_bytes,
                               Tensor out, cudaStream_t stream) {
  IB_ASSERT(split_kv_supports(shape), "attention: head_dim must be 64, 96 or 128 on CUDA");
  IB_ASSERT(partition_size > 0, "attention: partition size must be positive");
  if (meta.num_tokens == 0) return;
  const SplitParams p =
      make_split_params(qkv, kv, meta, shape, partition_size, workspace, workspace_bytes, out);
  IB_ASSERT(p.num_partitions == 1 || split_kv_workspace_bytes(meta.num_tokens, shape,
                                                              p.num_partitions) <= workspace_bytes,
            "attention: split-KV workspace too small");
  const int tokens = meta.num_tokens;
  IB_DISPATCH_FLOAT(qkv.dtype, T, {
    switch (shape.head_dim) {
      case 64:
        launch_for_group<T, 64>(p, tokens, stream);
        break;
      case 96:
        launch_for_group<T, 96>(p, tokens, stream);
        break;
      default:
        launch_for_group<T, 128>(p, tokens, stream);
        break;
    }
  });
}

}  // namespace ib::cuda
