// The head sizes the CUDA attention kernels are built for (split-KV decode and flash prefill), in
// a CUDA-free header: the CUDA backend checks shapes against it and `inferbench models` marks
// which models the CUDA path runs.
#pragma once

namespace ib {

inline constexpr int kCudaAttentionHeadDims[] = {64, 96, 128, 256};
// "64, 96, 128 or 256", for error messages.
inline constexpr const char* kCudaAttentionHeadDimsText = "64, 96, 128 or 256";

constexpr bool cuda_attention_supports_head_dim(int head_dim) {
  for (const int d : kCudaAttentionHeadDims) {
    if (d == head_dim) return true;
  }
  return false;
}

}  // namespace ib
