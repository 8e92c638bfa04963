// Block-sparse attention with a local + strided ("vertical stride") pattern, as vLLM's
// blocksparse attention and Phi-3-small's config define it (blocksparse_block_size,
// blocksparse_num_local_blocks, blocksparse_vert_stride), with one pattern for every head.
// Positions are cut into blocks of block_size tokens; a query in block qb sees key block kb
// (kb <= qb) when qb - kb < local_blocks (the local band, its own block included) or when
// (kb + 1) % vert_stride == 0 (every vert_stride-th block, the strided columns); inside that,
// causality holds per token (key <= query). Shared by the CPU op, the CUDA kernels and the
// engine's traffic model, on the host and on the device.
#pragma once

#include <cstdint>

#include "core/rng.h"  // IB_HOST_DEVICE

namespace ib {

struct BlockSparse {
  int block_size = 0;    // tokens per block; 0: dense attention (the pattern is off)
  int local_blocks = 0;  // the local band, in blocks (>= 1: a query's own block)
  int vert_stride = 0;   // every vert_stride-th block is a strided column (>= 1)
  IB_HOST_DEVICE bool enabled() const { return block_size > 0; }
};

// Whether a query at q_pos sees the key at k_pos (k_pos <= q_pos; causality is the caller's).
IB_HOST_DEVICE inline bool block_sparse_keeps(const BlockSparse& b, int q_pos, int k_pos) {
  const int qb = q_pos / b.block_size;
  const int kb = k_pos / b.block_size;
  return qb - kb < b.local_blocks || (kb + 1) % b.vert_stride == 0;
}

// The first block of q_pos's local band.
IB_HOST_DEVICE inline int block_sparse_local_begin(const BlockSparse& b, int q_pos) {
  const int lb = q_pos / b.block_size - b.local_blocks + 1;
  return lb > 0 ? lb : 0;
}

// How many keys a query at q_pos sees: the strided blocks before its local band (whole), then
// every key from the band's first block to q_pos.
IB_HOST_DEVICE inline int block_sparse_num_keys(const BlockSparse& b, int q_pos) {
  const int lb = block_sparse_local_begin(b, q_pos);
  return (lb / b.vert_stride) * b.block_size + (q_pos + 1 - lb * b.block_size);
}

// The i-th key (0 <= i < block_sparse_num_keys) a query at q_pos sees, in ascending order: the
// strided blocks vert_stride - 1, 2 vert_stride - 1, ... below the local band, then the band.
IB_HOST_DEVICE inline int block_sparse_key(const BlockSparse& b, int q_pos, int i) {
  const int lb = block_sparse_local_begin(b, q_pos);
  const int strided_keys = (lb / b.vert_stride) * b.block_size;
  if (i >= strided_keys) return lb * b.block_size + (i - strided_keys);
  const int block = (i / b.block_size + 1) * b.vert_stride - 1;
  return block * b.block_size + i % b.block_size;
}

}  // namespace ib
