// Host-side launchers of the vision encoder's kernels (backend/ops.h, VisionOps): vision.cu's
// LayerNorm, residual add, activations and per-row rotary embedding, attention_vision.cu's
// bidirectional attention. Like kernels.h's: they enqueue on `stream`, never synchronize and
// never allocate. Shapes are checked by the caller (vision_ops.cpp); tensors are f32, bf16 or f16
// (act) unless stated, with fp32 arithmetic.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/backend.h"

namespace ib::cuda {

// ---- vision.cu ----
// The widest row layer_norm takes (its row is staged in shared memory as fp32).
inline constexpr int64_t kLayerNormMaxDim = 12288;
// out (T, D) = (x - mean) / sqrt(var + eps) * weight + bias per row, mean and biased variance in
// two passes over the row; weight, bias (D) in act.
void launch_layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                       Tensor out, cudaStream_t stream);
// x += y elementwise (same dtype and element count), rounded once.
void launch_add(Tensor x, const Tensor& y, cudaStream_t stream);
// x = act(x) in place.
void launch_vision_activation(Tensor x, VisionActivation act, cudaStream_t stream);
// Rotate-half rotary embedding on the q and k heads of qkv (T, 3 H hd) in place; cos, sin f32
// (T, hd / 2) (VisionOps::rotary_rows).
void launch_rotary_rows(Tensor qkv, const Tensor& cos, const Tensor& sin, int num_heads,
                        cudaStream_t stream);
// pixels (N 3 S, S) -> out (N (S/p)^2, 3 p p), the patches as matmul rows
// (VisionOps::unfold_patches).
void launch_unfold_patches(const Tensor& pixels, int64_t patch, Tensor out, cudaStream_t stream);

// ---- attention_vision.cu ----
// out (B S, H hd) = softmax(q k^T * scale) v within each run of seq_len rows of qkv (B S, 3 H hd)
// (rows [q | k | v]). bf16/f16 with hd 64 or 80 and 16-byte aligned rows: the tensor-core flash
// kernel (vision_flash_supported); otherwise (fp32, other head dims up to kVisionMaxHeadDim) a
// warp per query row and head.
inline constexpr int kVisionMaxHeadDim = 256;
bool vision_flash_supported(const Tensor& qkv, int head_dim, const Tensor& out);
void launch_bidirectional_attention(const Tensor& qkv, int64_t seq_len, int num_heads, float scale,
                                    Tensor out, cudaStream_t stream);

}  // namespace ib::cuda
