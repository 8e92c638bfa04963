// Pieces both attention kernels share: the packed-batch lookup (which sequence a query token
// belongs to, and its absolute position) and the paged-cache addressing.
#pragma once

#include <cstdint>

namespace ib::cuda {

// The batch as the kernels read it (AttentionMetadata in device pointers).
struct PagedBatch {
  const int32_t* query_start;   // (num_seqs + 1)
  const int32_t* context_lens;  // (num_seqs)
  const int32_t* block_tables;  // (num_seqs, max_blocks_per_seq)
  int num_seqs;
  int max_blocks_per_seq;
  int block_size;
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

// Element offset of (token position pos, kv_head, d = 0) of sequence seq in a cache laid out
// (num_blocks, num_kv_heads, block_size, head_dim).
__device__ __forceinline__ int64_t cache_row(const PagedBatch& b, int seq, int pos, int kv_head,
                                             int num_kv_heads, int head_dim) {
  const int64_t block = b.block_tables[int64_t{seq} * b.max_blocks_per_seq + pos / b.block_size];
  return ((block * num_kv_heads + kv_head) * b.block_size + pos % b.block_size) * int64_t{head_dim};
}

// Gemma-2's logit soft-capping on a score in log2 units (score * scale * log2 e): cap *
// tanh(score / cap) in the same units, with cap_log2 = cap * log2 e (AttentionShape's
// logit_softcap); cap_log2 <= 0: the score as it is.
__device__ __forceinline__ float softcap_log2(float s, float cap_log2) {
  return cap_log2 > 0.0f ? cap_log2 * tanhf(s / cap_log2) : s;
}

}  // namespace ib::cuda
