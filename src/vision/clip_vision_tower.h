// LLaVA's vision path on a backend's ops: the CLIP ViT (the patch convolution as a matmul over
// unfolded patches, the class token, position embeddings, pre_layrnorm, pre-norm encoder layers
// with quick_gelu MLPs) up to vision_feature_layer, the class token dropped (strategy "default"),
// then the two-layer MLP projector (gelu) into the language model's hidden size. Weights by
// their names in a transformers 5 LlavaForConditionalGeneration checkpoint. Images are batched:
// every matmul runs over all images' tokens at once; attention stays within each image.
// One thread drives the backend (the engine's); the weights live as long as the object.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/result.h"
#include "model/safetensors.h"
#include "vision/llava_config.h"
#include "vision/vision_scratch.h"

namespace ib {

// One encoder layer (D hidden, F intermediate), in act.
struct ClipEncoderLayer {
  Tensor ln1_weight, ln1_bias;  // (D)
  Tensor qkv, qkv_bias;         // (3D, D), (3D): q_proj, k_proj, v_proj stacked
  Tensor o, o_bias;             // (D, D), (D): out_proj
  Tensor ln2_weight, ln2_bias;  // (D)
  Tensor fc1, fc1_bias;         // (F, D), (F)
  Tensor fc2, fc2_bias;         // (D, F), (D)
};

// P patches per image of C = 3 channels and p x p pixels, Dt the text hidden size.
struct LlavaVisionWeights {
  Tensor patch;                          // (D, 3 p p): the convolution's (D, 3, p, p), no bias
  Tensor class_embedding;                // (D)
  Tensor position;                       // (P + 1, D)
  Tensor pre_ln_weight, pre_ln_bias;     // (D)
  std::vector<ClipEncoderLayer> layers;  // the layers that run (LlavaConfig::layers_to_run)
  Tensor proj1, proj1_bias;              // (Dt, D), (Dt); the biases empty without projector_bias
  Tensor proj2, proj2_bias;              // (Dt, Dt), (Dt)
  std::vector<Buffer> storage;           // owns the tensors above
  int64_t bytes = 0;
};

// Where a checkpoint keeps the vision path: transformers 5's LlavaForConditionalGeneration
// (model.vision_tower.vision_model., model.multi_modal_projector.); the layout the llava-hf
// checkpoints were converted to and transformers still reads (vision_tower.vision_model.,
// multi_modal_projector.); and the two without CLIP's vision_model level, as transformers 5.17's
// save_pretrained writes a LLaVA (vision_tower.embeddings..., multi_modal_projector.; seen on
// the H200, bench/results/h200/vlm/) and as its modules name them (model.vision_tower.).
enum class LlavaTensorLayout { kTransformers5, kLegacy, kSaved517, kModules517 };
inline constexpr LlavaTensorLayout kLlavaTensorLayouts[] = {
    LlavaTensorLayout::kTransformers5, LlavaTensorLayout::kLegacy, LlavaTensorLayout::kSaved517,
    LlavaTensorLayout::kModules517};

// One checkpoint tensor the vision path reads: its name and the shape it must have.
struct VisionTensorName {
  std::string name;
  std::vector<int64_t> shape;
};
// Every tensor the vision path reads, in load order ("model.vision_tower.vision_model.
// embeddings.patch_embedding.weight", ..., "model.multi_modal_projector.linear_2.bias").
std::vector<VisionTensorName> llava_vision_schema(
    const LlavaConfig& config, LlavaTensorLayout layout = LlavaTensorLayout::kTransformers5);

// Loads the vision path from a checkpoint in either layout (the one whose class_embedding it
// holds): every schema tensor must be there with its shape; another name under the layout's
// vision_tower. or multi_modal_projector. than the schema's, the post_layernorm's and the layers
// after the feature layer is refused (a different model). Errors name the tensor and the fix.
Result<LlavaVisionWeights> load_llava_vision_weights(Backend& backend,
                                                     const SafetensorsCheckpoint& checkpoint,
                                                     const LlavaConfig& config);

// Seeded weights, uniform in [-scale, scale] (LayerNorm gains around 1), for tests.
Result<LlavaVisionWeights> random_llava_vision_weights(Backend& backend, const LlavaConfig& config,
                                                       uint64_t seed, float scale);

// Encodes num_images preprocessed images already on the backend: pixels (N 3 S, S) in act
// (N images (3, S, S), S = image_size); out (N * tokens_per_image, Dt) in act. The patches are
// unfolded on the device (VisionOps::unfold_patches). Enqueued, not waited for. Scratch from
// `scratch` (begun here); an allocation failure is returned. The backend must have vision_ops()
// (checked by the caller before loading: IB_ASSERT here).
Status encode_llava_pixels(Backend& backend, const LlavaVisionWeights& weights,
                           const LlavaConfig& config, const Tensor& pixels, Tensor out,
                           VisionScratch& scratch);

// The same from host pixel values (N, 3, S, S) f32, uploaded (converted to act on the device)
// into scratch first; without a scratch, one is made for the call and freed after it.
Status encode_llava_images(Backend& backend, const LlavaVisionWeights& weights,
                           const LlavaConfig& config, std::span<const float> pixel_values,
                           int64_t num_images, Tensor out, VisionScratch* scratch = nullptr);

}  // namespace ib
