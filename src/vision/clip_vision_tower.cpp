// The CLIP vision tower and LLaVA's projector: weights (schema, loading, seeded) and the forward.
#include "vision/clip_vision_tower.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <set>

#include "vision/detail/vision_weights.h"

namespace ib {

namespace {

// The prefixes of a layout.
struct Prefixes {
  std::string tower_root;  // "model.vision_tower."
  std::string tower;       // "model.vision_tower.vision_model."
  std::string projector;   // "model.multi_modal_projector."
};

Prefixes prefixes(LlavaTensorLayout layout) {
  const bool model =
      layout == LlavaTensorLayout::kTransformers5 || layout == LlavaTensorLayout::kModules517;
  const bool vision_model =
      layout == LlavaTensorLayout::kTransformers5 || layout == LlavaTensorLayout::kLegacy;
  const std::string root = model ? "model." : "";
  return {root + "vision_tower.", root + "vision_tower." + (vision_model ? "vision_model." : ""),
          root + "multi_modal_projector."};
}

using detail::WeightSlot;

// Allocates every weight and lists where each checkpoint tensor goes.
Result<std::vector<WeightSlot>> build(Backend& backend, const LlavaConfig& config,
                                      LlavaTensorLayout layout, LlavaVisionWeights& w) {
  const Prefixes names = prefixes(layout);
  const ClipVisionConfig& v = config.vision;
  const int64_t d = v.hidden_size, f = v.intermediate_size, p = v.patch_size_px;
  const int64_t dt = config.text_hidden_size, positions = v.patches_per_image() + 1;
  const std::string e = names.tower + "embeddings.";
  detail::VisionWeightBuilder b(backend, w.storage, w.bytes);
  b.add_into(w.patch, e + "patch_embedding.weight", {d, 3 * p * p}, {d, 3, p, p});
  b.add_into(w.class_embedding, e + "class_embedding", {d});
  b.add_into(w.position, e + "position_embedding.weight", {positions, d});
  b.add_into(w.pre_ln_weight, names.tower + "pre_layrnorm.weight", {d}, {}, true);
  b.add_into(w.pre_ln_bias, names.tower + "pre_layrnorm.bias", {d});
  w.layers.resize(static_cast<size_t>(config.layers_to_run()));
  for (size_t i = 0; i < w.layers.size() && b.status().ok(); ++i) {
    const std::string l = names.tower + "encoder.layers." + std::to_string(i) + ".";
    ClipEncoderLayer& layer = w.layers[i];
    b.add_into(layer.ln1_weight, l + "layer_norm1.weight", {d}, {}, true);
    b.add_into(layer.ln1_bias, l + "layer_norm1.bias", {d});
    b.add_into(layer.qkv, "", {3 * d, d});
    b.add_into(layer.qkv_bias, "", {3 * d});
    if (!b.status().ok()) break;
    const char* parts[] = {"q_proj", "k_proj", "v_proj"};
    for (int64_t j = 0; j < 3; ++j) {
      const std::string a = l + "self_attn." + parts[j];
      b.add_part(a + ".weight", {d, d}, layer.qkv.slice_rows(j * d, d));
      b.add_part(a + ".bias", {d}, layer.qkv_bias.slice_rows(j * d, d));
    }
    b.add_into(layer.o, l + "self_attn.out_proj.weight", {d, d});
    b.add_into(layer.o_bias, l + "self_attn.out_proj.bias", {d});
    b.add_into(layer.ln2_weight, l + "layer_norm2.weight", {d}, {}, true);
    b.add_into(layer.ln2_bias, l + "layer_norm2.bias", {d});
    b.add_into(layer.fc1, l + "mlp.fc1.weight", {f, d});
    b.add_into(layer.fc1_bias, l + "mlp.fc1.bias", {f});
    b.add_into(layer.fc2, l + "mlp.fc2.weight", {d, f});
    b.add_into(layer.fc2_bias, l + "mlp.fc2.bias", {d});
  }
  const std::string& pr = names.projector;
  b.add_into(w.proj1, pr + "linear_1.weight", {dt, d});
  b.add_into(w.proj2, pr + "linear_2.weight", {dt, dt});
  if (config.projector_bias) {
    b.add_into(w.proj1_bias, pr + "linear_1.bias", {dt});
    b.add_into(w.proj2_bias, pr + "linear_2.bias", {dt});
  }
  if (!b.status().ok()) return b.status().error();
  return b.slots();
}

// Whether a name under the vision prefixes is one the path may ignore: the post_layernorm and
// the layers after the feature layer.
bool ignorable(const std::string& name, const LlavaConfig& config, const Prefixes& names) {
  const std::string& tower = names.tower;
  if (name.rfind(tower + "post_layernorm.", 0) == 0) return true;
  const std::string layers = tower + "encoder.layers.";
  if (name.rfind(layers, 0) != 0) return false;
  const int layer = std::atoi(name.c_str() + layers.size());
  return layer >= config.layers_to_run() && layer < config.vision.num_hidden_layers;
}

bool under_vision_prefix(const std::string& name, const Prefixes& names) {
  return name.rfind(names.tower_root, 0) == 0 || name.rfind(names.projector, 0) == 0;
}

}  // namespace

std::vector<VisionTensorName> llava_vision_schema(const LlavaConfig& config,
                                                  LlavaTensorLayout layout) {
  const Prefixes pre = prefixes(layout);
  std::vector<VisionTensorName> names;
  const ClipVisionConfig& v = config.vision;
  const int64_t d = v.hidden_size, f = v.intermediate_size, p = v.patch_size_px;
  const int64_t dt = config.text_hidden_size;
  const std::string e = pre.tower + "embeddings.";
  names.push_back({e + "patch_embedding.weight", {d, 3, p, p}});
  names.push_back({e + "class_embedding", {d}});
  names.push_back({e + "position_embedding.weight", {v.patches_per_image() + 1, d}});
  names.push_back({pre.tower + "pre_layrnorm.weight", {d}});
  names.push_back({pre.tower + "pre_layrnorm.bias", {d}});
  for (int i = 0; i < config.layers_to_run(); ++i) {
    const std::string l = pre.tower + "encoder.layers." + std::to_string(i) + ".";
    for (const char* n : {"layer_norm1", "layer_norm2"}) {
      names.push_back({l + n + ".weight", {d}});
      names.push_back({l + n + ".bias", {d}});
    }
    for (const char* n : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
      names.push_back({l + "self_attn." + n + ".weight", {d, d}});
      names.push_back({l + "self_attn." + n + ".bias", {d}});
    }
    names.push_back({l + "mlp.fc1.weight", {f, d}});
    names.push_back({l + "mlp.fc1.bias", {f}});
    names.push_back({l + "mlp.fc2.weight", {d, f}});
    names.push_back({l + "mlp.fc2.bias", {d}});
  }
  names.push_back({pre.projector + "linear_1.weight", {dt, d}});
  names.push_back({pre.projector + "linear_2.weight", {dt, dt}});
  if (config.projector_bias) {
    names.push_back({pre.projector + "linear_1.bias", {dt}});
    names.push_back({pre.projector + "linear_2.bias", {dt}});
  }
  return names;
}

Result<LlavaVisionWeights> load_llava_vision_weights(Backend& backend,
                                                     const SafetensorsCheckpoint& checkpoint,
                                                     const LlavaConfig& config) {
  const std::string probe = "embeddings.class_embedding";
  std::optional<LlavaTensorLayout> found;
  std::string probed;
  for (const LlavaTensorLayout candidate : kLlavaTensorLayouts) {
    const std::string name = prefixes(candidate).tower + probe;
    if (checkpoint.contains(name)) {
      found = candidate;
      break;
    }
    probed += (probed.empty() ? "" : ", ") + name;
  }
  if (!found) {
    return user_error("the checkpoint has none of " + probed +
                      ": no LLaVA CLIP vision tower (is it a LlavaForConditionalGeneration "
                      "checkpoint?)");
  }
  const LlavaTensorLayout layout = *found;
  const Prefixes names = prefixes(layout);
  std::set<std::string> known;
  for (const auto& n : llava_vision_schema(config, layout)) known.insert(n.name);
  for (const std::string& name : checkpoint.names()) {
    if (under_vision_prefix(name, names) && known.count(name) == 0 &&
        !ignorable(name, config, names)) {
      return user_error("the checkpoint holds " + name +
                        ", which a LLaVA CLIP vision tower does not have; is config.json the "
                        "checkpoint's own?");
    }
  }
  LlavaVisionWeights weights;
  auto slots = build(backend, config, layout, weights);
  if (!slots.ok()) return slots.error();
  IB_TRY(detail::load_slots(backend, checkpoint, *slots, "the LLaVA vision tower",
                            "a LlavaForConditionalGeneration checkpoint saved by transformers 5"));
  return weights;
}

Result<LlavaVisionWeights> random_llava_vision_weights(Backend& backend, const LlavaConfig& config,
                                                       uint64_t seed, float scale) {
  LlavaVisionWeights weights;
  auto slots = build(backend, config, LlavaTensorLayout::kTransformers5, weights);
  if (!slots.ok()) return slots.error();
  detail::seed_slots(backend, *slots, seed, scale);
  return weights;
}

Status encode_llava_pixels(Backend& backend, const LlavaVisionWeights& w, const LlavaConfig& config,
                           const Tensor& pixels, Tensor out, VisionScratch& scratch) {
  VisionOps* ops = backend.vision_ops();
  IB_ASSERT(ops != nullptr, "encode_llava_pixels on a backend without vision ops");
  const ClipVisionConfig& v = config.vision;
  const int64_t d = v.hidden_size, f = v.intermediate_size, p = v.patch_size_px;
  const int64_t s = v.image_size_px, grid = s / p, patches = grid * grid, seq = patches + 1;
  IB_ASSERT(pixels.row_size() == s && pixels.rows() % (3 * s) == 0,
            "pixels must be (N 3 image_size, image_size)");
  const int64_t num_images = pixels.rows() / (3 * s);
  const int64_t t = num_images * seq, dt = config.text_hidden_size;
  const int64_t per_image = config.tokens_per_image();
  IB_ASSERT(out.rows() == num_images * per_image && out.row_size() == dt,
            "out must be (N * tokens_per_image, text hidden size)");
  scratch.begin();
  auto alloc = [&](std::initializer_list<int64_t> dims) { return scratch.alloc(dims); };
  auto patches_in = alloc({num_images * patches, 3 * p * p});  // (N P, 3 p p)
  auto h = alloc({t, d});              // (N (P + 1), D): the residual stream
  auto x = alloc({t, d});              // (N (P + 1), D): normed input, attention output
  auto tmp = alloc({t, d});            // (N (P + 1), D): out_proj and fc2 outputs
  auto qkv = alloc({t, 3 * d});        // (N (P + 1), 3D)
  auto mlp = alloc({t, f});            // (N (P + 1), F)
  auto proj = alloc({per_image, dt});  // (tokens per image, Dt)
  for (const auto* r : {&patches_in, &h, &x, &tmp, &qkv, &mlp, &proj}) {
    if (!r->ok()) return r->error();
  }
  ops->unfold_patches(pixels, p, *patches_in);
  // Embeddings: [class; patches @ W^T] + positions, per image.
  for (int64_t n = 0; n < num_images; ++n) {
    Tensor image = h->slice_rows(n * seq, seq);
    backend.matmul(patches_in->slice_rows(n * patches, patches), w.patch, nullptr,
                   image.slice_rows(1, patches));
    backend.copy_on_device(image.slice_rows(0, 1), w.class_embedding.reshaped({1, d}));
    ops->add(image, w.position);
  }
  const auto eps = static_cast<float>(v.layer_norm_eps);
  ops->layer_norm(*h, w.pre_ln_weight, w.pre_ln_bias, eps, *x);
  backend.copy_on_device(*h, *x);
  const float scale = 1.0f / std::sqrt(static_cast<float>(v.head_dim()));
  for (const ClipEncoderLayer& layer : w.layers) {
    ops->layer_norm(*h, layer.ln1_weight, layer.ln1_bias, eps, *x);
    backend.matmul(*x, layer.qkv, &layer.qkv_bias, *qkv);
    ops->bidirectional_attention(*qkv, seq, v.num_attention_heads, scale, *x);
    backend.matmul(*x, layer.o, &layer.o_bias, *tmp);
    ops->add(*h, *tmp);
    ops->layer_norm(*h, layer.ln2_weight, layer.ln2_bias, eps, *x);
    backend.matmul(*x, layer.fc1, &layer.fc1_bias, *mlp);
    ops->activation(*mlp, VisionActivation::kQuickGelu);
    backend.matmul(*mlp, layer.fc2, &layer.fc2_bias, *tmp);
    ops->add(*h, *tmp);
  }
  // The projector over each image's selected tokens.
  const int64_t first = config.drop_class_token ? 1 : 0;
  for (int64_t n = 0; n < num_images; ++n) {
    const Tensor selected = h->slice_rows(n * seq + first, per_image);
    backend.matmul(selected, w.proj1, w.proj1_bias.empty() ? nullptr : &w.proj1_bias, *proj);
    ops->activation(*proj, VisionActivation::kGeluErf);
    backend.matmul(*proj, w.proj2, w.proj2_bias.empty() ? nullptr : &w.proj2_bias,
                   out.slice_rows(n * per_image, per_image));
  }
  return Ok{};
}

Status encode_llava_images(Backend& backend, const LlavaVisionWeights& w, const LlavaConfig& config,
                           std::span<const float> pixel_values, int64_t num_images, Tensor out,
                           VisionScratch* scratch) {
  const int64_t s = config.vision.image_size_px;
  IB_ASSERT(static_cast<int64_t>(pixel_values.size()) == num_images * 3 * s * s,
            "pixel_values must be (N, 3, image_size, image_size)");
  VisionScratch own(backend);
  VisionScratch& use = scratch != nullptr ? *scratch : own;
  IB_ASSIGN_OR_RETURN(const Tensor pixels, use.input({num_images * 3 * s, s}));
  backend.copy_from_host(pixels, pixel_values.data(), DType::kF32);
  IB_TRY(encode_llava_pixels(backend, w, config, pixels, out, use));
  return Ok{};
}

}  // namespace ib
