// Pieces the paged-attention kernels share (split-KV, flash, the tensor-core decode kernel): the
// packed-batch lookup (which sequence a query token belongs to, and its absolute position), the
// paged-cache addressing and the parameters every one of them reads.
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "core/fast_div.h"

namespace ib::cuda {

inline constexpr float kAttentionLog2e = 1.4426950408889634f;

// The batch as the kernels read it (AttentionMetadata in device pointers).
struct PagedBatch {
  const int32_t* query_start;   // (num_seqs + 1)
  const int32_t* context_lens;  // (num_seqs)
  const int32_t* block_tables;  // (num_seqs, max_blocks_per_seq)
  int num_seqs;
  int max_blocks_per_seq;
  int block_size;
  FastDiv block_div;  // n / block_size as a multiply-high and a shift
};

// The sequence owning flattened query token t: the largest i with query_start[i] <= t.
__device__ __forceinline__ int find_sequence(const PagedBatch& b, int t) {
  int lo = 0, hi = b.num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (b.query_start[mid] <= t) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// The cache rows of one sequence's KV head in a cache laid out (num_blocks, num_kv_heads,
// block_size, head_dim): the block table's row and the head's offset taken once, a position's
// block and offset by FastDiv (no integer division).
struct SeqCacheRows {
  const int32_t* table;  // the sequence's block table row
  int64_t block_stride;  // elements a cache block: num_kv_heads * block_size * head_dim
  int head_offset;       // kv_head * block_size * head_dim
  int head_dim;
  FastDiv block_div;

  // Element offset of (position pos, d = 0).
  __device__ __forceinline__ int64_t row(int pos) const {
    const int block = block_div.div(pos);
    return int64_t{table[block]} * block_stride + head_offset +
           block_div.mod(pos, block) * head_dim;
  }
};

__device__ __forceinline__ SeqCacheRows seq_cache_rows(const PagedBatch& b, int seq, int kv_head,
                                                       int num_kv_heads, int head_dim) {
  return {b.block_tables + int64_t{seq} * b.max_blocks_per_seq,
          int64_t{num_kv_heads} * b.block_size * head_dim, kv_head * b.block_size * head_dim,
          head_dim, b.block_div};
}

// Element offset of (token position pos, kv_head, d = 0) of sequence seq.
__device__ __forceinline__ int64_t cache_row(const PagedBatch& b, int seq, int pos, int kv_head,
                                             int num_kv_heads, int head_dim) {
  return seq_cache_rows(b, seq, kv_head, num_kv_heads, head_dim).row(pos);
}

// The parameters every paged-attention kernel reads (the split-KV kernel's add its partitions).
struct PagedAttentionParams {
  const void* qkv;
  const void* k_cache;
  const void* v_cache;
  void* out;
  PagedBatch batch;
  int num_heads, num_kv_heads, group, window;
  float scale_log2;    // softmax scale * log2(e) * the cache's k_scale (1 unless E4M3)
  float v_scale;       // the cache's v_scale (1 unless E4M3)
  float softcap_log2;  // the logit soft-cap * log2(e) (softcap_log2()), 0: none
  BlockSparse sparse;  // enabled: the local + strided pattern (never with a window)
};

// Those parameters for one attention call.
inline PagedAttentionParams paged_attention_params(const Tensor& qkv, const KvCacheLayer& kv,
                                                   const AttentionMetadata& meta,
                                                   const AttentionShape& shape, Tensor out) {
  PagedAttentionParams p{};
  p.qkv = qkv.data;
  p.k_cache = kv.k.data;
  p.v_cache = kv.v.data;
  p.out = out.data;
  p.batch = PagedBatch{meta.query_start.as<int32_t>(),
                       meta.context_lens.as<int32_t>(),
                       meta.block_tables.as<int32_t>(),
                       meta.num_seqs,
                       static_cast<int>(meta.block_tables.dim(1)),
                       kv.block_size,
                       FastDiv::of(kv.block_size)};
  p.num_heads = shape.num_heads;
  p.num_kv_heads = shape.num_kv_heads;
  p.group = shape.num_heads / shape.num_kv_heads;
  p.window = shape.sliding_window;
  p.scale_log2 = shape.scale * kAttentionLog2e * kv.k_scale;
  p.v_scale = kv.v_scale;
  p.softcap_log2 = shape.logit_softcap * kAttentionLog2e;
  p.sparse = shape.block_sparse;
  return p;
}

// Gemma-2's logit soft-capping on a score in log2 units (score * scale * log2 e): cap *
// tanh(score / cap) in the same units, with cap_log2 = cap * log2 e (AttentionShape's
// logit_softcap); cap_log2 <= 0: the score as it is.
__device__ __forceinline__ float softcap_log2(float s, float cap_log2) {
  return cap_log2 > 0.0f ? cap_log2 * tanhf(s / cap_log2) : s;
}

}  // namespace ib::cuda
