// Qwen2-VL's vision tower on a backend's ops (transformers' Qwen2VisionTransformerPretrainedModel):
// the Conv3d patch embedding as a matmul over the preprocessor's patch rows, pre-norm ViT blocks
// (LayerNorm eps 1e-6, fused qkv with bias, 2-D rotary embeddings over each patch's (h, w),
// attention within each image's frame, quick_gelu MLP), then the PatchMerger (LayerNorm, each
// 2 x 2 window's four rows concatenated, Linear, GELU (erf), Linear) into the language model's
// hidden size. Images of different sizes are batched: every matmul runs over all their rows.
// The rotary angles are computed on the host once per call and applied on the backend
// (VisionOps::rotary_rows). One thread drives the backend (the engine's); the weights live as
// long as the object.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/result.h"
#include "model/safetensors.h"
#include "vision/clip_vision_tower.h"
#include "vision/qwen2vl_config.h"
#include "vision/vision_scratch.h"

namespace ib {

// One block (D embed_dim, F mlp hidden), in act.
struct Qwen2VlBlock {
  Tensor norm1_weight, norm1_bias;  // (D)
  Tensor qkv, qkv_bias;             // (3D, D), (3D)
  Tensor proj, proj_bias;           // (D, D), (D)
  Tensor norm2_weight, norm2_bias;  // (D)
  Tensor fc1, fc1_bias;             // (F, D), (F)
  Tensor fc2, fc2_bias;             // (D, F), (D)
};

// K = 3 T p p patch values, M = merge units (4), Dt the text hidden size.
struct Qwen2VlVisionWeights {
  Tensor patch;                      // (D, K): Conv3d's (D, 3, T, p, p), no bias
  std::vector<Qwen2VlBlock> blocks;  // depth
  Tensor ln_q_weight, ln_q_bias;     // (D) merger.ln_q
  Tensor mlp0, mlp0_bias;            // (M D, M D), (M D) merger.mlp.0
  Tensor mlp2, mlp2_bias;            // (Dt, M D), (Dt) merger.mlp.2
  std::vector<Buffer> storage;       // owns the tensors above
  int64_t bytes = 0;
};

// Where a checkpoint keeps the tower: transformers 5's Qwen2VLForConditionalGeneration
// ("model.visual.") or the published Qwen2-VL files' ("visual.").
enum class Qwen2VlTensorLayout { kTransformers5, kPublished };

// Every tensor the tower reads, in load order ("model.visual.patch_embed.proj.weight", ...,
// "model.visual.merger.mlp.2.bias").
std::vector<VisionTensorName> qwen2vl_vision_schema(
    const Qwen2VlConfig& config, Qwen2VlTensorLayout layout = Qwen2VlTensorLayout::kTransformers5);

// Loads the tower from a checkpoint in either layout (the one whose patch embedding it holds):
// every schema tensor must be there with its shape, and no other name under the layout's
// visual. prefix. Errors name the tensor and the fix.
Result<Qwen2VlVisionWeights> load_qwen2vl_vision_weights(Backend& backend,
                                                         const SafetensorsCheckpoint& checkpoint,
                                                         const Qwen2VlConfig& config);

// Seeded weights, uniform in [-scale, scale] (LayerNorm gains around 1), for tests.
Result<Qwen2VlVisionWeights> random_qwen2vl_vision_weights(Backend& backend,
                                                           const Qwen2VlConfig& config,
                                                           uint64_t seed, float scale);

// The (h, w) patch coordinates of an image's rows in the preprocessor's merge-window order, as
// rot_pos_emb pairs them: (t h w) pairs, frame after frame.
std::vector<std::array<int64_t, 2>> qwen2vl_patch_coordinates(const std::array<int64_t, 3>& grid,
                                                              int64_t merge_size);

// Encodes images: pixel_values host, each image's (t h w, K) rows one after the other, grids
// their (t, h, w) (h and w multiples of the merge size); out (sum of t h w / M, Dt) in act on the
// backend, enqueued (not waited for). Scratch (the uploaded patches among it) from `scratch`,
// kept there for the next call; without one, made for the call and freed after it. An allocation
// failure is returned. The backend must have vision_ops() (checked by the caller: IB_ASSERT).
Status encode_qwen2vl_images(Backend& backend, const Qwen2VlVisionWeights& weights,
                             const Qwen2VlConfig& config, std::span<const float> pixel_values,
                             std::span<const std::array<int64_t, 3>> grids, Tensor out,
                             VisionScratch* scratch = nullptr);

}  // namespace ib
