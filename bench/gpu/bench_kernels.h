// Kernels only the benchmark needs: the bandwidth ceilings (a 16-byte copy and a read-only
// stream) and the GEMV configurations compared against the one the backend ships.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "backend/backend.h"

namespace ib::bench {

void launch_copy(const void* src, void* dst, size_t bytes, int num_sms, cudaStream_t stream);
void launch_read(const void* src, size_t bytes, unsigned* sink, int num_sms, cudaStream_t stream);

int gemv_variant_count();
const char* gemv_variant_name(int variant);
// out (M <= 8, N) = x (M, K) @ w (N, K)^T, bf16 in, bf16 or f32 out, through variant v.
void launch_gemv_variant(int variant, const Tensor& x, const Tensor& w, Tensor out,
                         cudaStream_t stream);

int attention_variant_count();
const char* attention_variant_name(int variant);
// Split-KV decode attention through variant v (bf16, head_dim 128, GQA group <= 4 only).
void launch_attention_variant(int variant, const Tensor& qkv, const KvCacheLayer& kv,
                              const AttentionMetadata& meta, const AttentionShape& shape,
                              int partition_size, void* workspace, size_t workspace_bytes,
                              Tensor out, cudaStream_t stream);

}  // namespace ib::bench
