// Qwen2-VL's vision tower: weights (schema, loading, seeded) and the forward.
#include "vision/qwen2vl_vision_tower.h"

#include <cmath>
#include <set>

#include "vision/detail/vision_weights.h"

namespace ib {

namespace {

using detail::WeightSlot;

constexpr float kLayerNormEps = 1e-6f;  // Qwen2VLVisionBlock's and PatchMerger's
constexpr double kRotaryTheta = 10000.0;

std::string prefix(Qwen2VlTensorLayout layout) {
  return layout == Qwen2VlTensorLayout::kTransformers5 ? "model.visual." : "visual.";
}

// Allocates every weight and lists where each checkpoint tensor goes (the schema's order).
Result<std::vector<WeightSlot>> build(Backend& backend, const Qwen2VlConfig& config,
                                      Qwen2VlTensorLayout layout, Qwen2VlVisionWeights& w) {
  const Qwen2VlVisionConfig& v = config.vision;
  const int64_t d = v.embed_dim, f = v.mlp_hidden, md = v.merge_units() * d;
  const int64_t dt = config.text_hidden_size;
  const std::string pre = prefix(layout);
  detail::VisionWeightBuilder b(backend, w.storage, w.bytes);
  const int64_t p = v.patch_size_px, tp = v.temporal_patch_size;
  b.add_into(w.patch, pre + "patch_embed.proj.weight", {d, v.patch_values()}, {d, 3, tp, p, p});
  w.blocks.resize(static_cast<size_t>(v.depth));
  for (size_t i = 0; i < w.blocks.size() && b.status().ok(); ++i) {
    const std::string l = pre + "blocks." + std::to_string(i) + ".";
    Qwen2VlBlock& blk = w.blocks[i];
    b.add_into(blk.norm1_weight, l + "norm1.weight", {d}, {}, true);
    b.add_into(blk.norm1_bias, l + "norm1.bias", {d});
    b.add_into(blk.qkv, l + "attn.qkv.weight", {3 * d, d});
    b.add_into(blk.qkv_bias, l + "attn.qkv.bias", {3 * d});
    b.add_into(blk.proj, l + "attn.proj.weight", {d, d});
    b.add_into(blk.proj_bias, l + "attn.proj.bias", {d});
    b.add_into(blk.norm2_weight, l + "norm2.weight", {d}, {}, true);
    b.add_into(blk.norm2_bias, l + "norm2.bias", {d});
    b.add_into(blk.fc1, l + "mlp.fc1.weight", {f, d});
    b.add_into(blk.fc1_bias, l + "mlp.fc1.bias", {f});
    b.add_into(blk.fc2, l + "mlp.fc2.weight", {d, f});
    b.add_into(blk.fc2_bias, l + "mlp.fc2.bias", {d});
  }
  const std::string m = pre + "merger.";
  b.add_into(w.ln_q_weight, m + "ln_q.weight", {d}, {}, true);
  b.add_into(w.ln_q_bias, m + "ln_q.bias", {d});
  b.add_into(w.mlp0, m + "mlp.0.weight", {md, md});
  b.add_into(w.mlp0_bias, m + "mlp.0.bias", {md});
  b.add_into(w.mlp2, m + "mlp.2.weight", {dt, md});
  b.add_into(w.mlp2_bias, m + "mlp.2.bias", {dt});
  if (!b.status().ok()) return b.status().error();
  return b.slots();
}

// The angles of the 2-D rotary embedding of rot_pos_emb / apply_rotary_pos_emb_vision, in fp32
// as transformers computes them: inv_freq over head_dim / 2, pair i of the first quarter turned by
// h * inv_freq[i], of the second by w * inv_freq[i - head_dim / 4]. cos_v, sin_v: (N, hd / 2)
// host, one row per patch; VisionOps::rotary_rows applies them (rotate-half over head_dim).
void rotary_2d_angles(std::span<const std::array<int64_t, 2>> coords, int64_t hd,
                      std::vector<float>& cos_v, std::vector<float>& sin_v) {
  const int64_t half = hd / 2, quarter = hd / 4;
  std::vector<float> inv_freq(static_cast<size_t>(quarter));
  for (int64_t j = 0; j < quarter; ++j) {
    const float exponent = static_cast<float>(2 * j) / static_cast<float>(half);
    inv_freq[static_cast<size_t>(j)] = 1.0f / std::pow(static_cast<float>(kRotaryTheta), exponent);
  }
  cos_v.resize(coords.size() * static_cast<size_t>(half));
  sin_v.resize(coords.size() * static_cast<size_t>(half));
  for (size_t r = 0; r < coords.size(); ++r) {
    for (int64_t i = 0; i < half; ++i) {
      const float pos = static_cast<float>(i < quarter ? coords[r][0] : coords[r][1]);
      const float angle = pos * inv_freq[static_cast<size_t>(i % quarter)];
      const size_t at = r * static_cast<size_t>(half) + static_cast<size_t>(i);
      cos_v[at] = std::cos(angle);
      sin_v[at] = std::sin(angle);
    }
  }
}

}  // namespace

std::vector<VisionTensorName> qwen2vl_vision_schema(const Qwen2VlConfig& config,
                                                    Qwen2VlTensorLayout layout) {
  const Qwen2VlVisionConfig& v = config.vision;
  const int64_t d = v.embed_dim, f = v.mlp_hidden, md = v.merge_units() * d;
  const int64_t p = v.patch_size_px;
  const std::string pre = prefix(layout);
  std::vector<VisionTensorName> names;
  names.push_back({pre + "patch_embed.proj.weight", {d, 3, v.temporal_patch_size, p, p}});
  for (int i = 0; i < v.depth; ++i) {
    const std::string l = pre + "blocks." + std::to_string(i) + ".";
    names.push_back({l + "norm1.weight", {d}});
    names.push_back({l + "norm1.bias", {d}});
    names.push_back({l + "attn.qkv.weight", {3 * d, d}});
    names.push_back({l + "attn.qkv.bias", {3 * d}});
    names.push_back({l + "attn.proj.weight", {d, d}});
    names.push_back({l + "attn.proj.bias", {d}});
    names.push_back({l + "norm2.weight", {d}});
    names.push_back({l + "norm2.bias", {d}});
    names.push_back({l + "mlp.fc1.weight", {f, d}});
    names.push_back({l + "mlp.fc1.bias", {f}});
    names.push_back({l + "mlp.fc2.weight", {d, f}});
    names.push_back({l + "mlp.fc2.bias", {d}});
  }
  names.push_back({pre + "merger.ln_q.weight", {d}});
  names.push_back({pre + "merger.ln_q.bias", {d}});
  names.push_back({pre + "merger.mlp.0.weight", {md, md}});
  names.push_back({pre + "merger.mlp.0.bias", {md}});
  names.push_back({pre + "merger.mlp.2.weight", {config.text_hidden_size, md}});
  names.push_back({pre + "merger.mlp.2.bias", {config.text_hidden_size}});
  return names;
}

Result<Qwen2VlVisionWeights> load_qwen2vl_vision_weights(Backend& backend,
                                                         const SafetensorsCheckpoint& checkpoint,
                                                         const Qwen2VlConfig& config) {
  const std::string probe = "patch_embed.proj.weight";
  IB_ASSIGN_OR_RETURN(
      const bool published,
      detail::older_layout(checkpoint,
                           {prefix(Qwen2VlTensorLayout::kTransformers5) + probe,
                            prefix(Qwen2VlTensorLayout::kPublished) + probe},
                           "no Qwen2-VL vision tower (is it a Qwen2VLForConditionalGeneration "
                           "checkpoint?)"));
  const Qwen2VlTensorLayout layout =
      published ? Qwen2VlTensorLayout::kPublished : Qwen2VlTensorLayout::kTransformers5;
  const std::string pre = prefix(layout);
  std::set<std::string> known;
  for (const auto& n : qwen2vl_vision_schema(config, layout)) known.insert(n.name);
  for (const std::string& name : checkpoint.names()) {
    if (name.starts_with(pre) && known.count(name) == 0) {
      return user_error("the checkpoint holds " + name +
                        ", which a Qwen2-VL vision tower of depth " +
                        std::to_string(config.vision.depth) +
                        " does not have; is config.json the checkpoint's own?");
    }
  }
  Qwen2VlVisionWeights weights;
  IB_ASSIGN_OR_RETURN(const auto slots, build(backend, config, layout, weights));
  IB_TRY(detail::load_slots(backend, checkpoint, slots, "the Qwen2-VL vision tower",
                            "a Qwen2VLForConditionalGeneration checkpoint saved by transformers"));
  return weights;
}

Result<Qwen2VlVisionWeights> random_qwen2vl_vision_weights(Backend& backend,
                                                           const Qwen2VlConfig& config,
                                                           uint64_t seed, float scale) {
  Qwen2VlVisionWeights weights;
  IB_ASSIGN_OR_RETURN(const auto slots,
                      build(backend, config, Qwen2VlTensorLayout::kTransformers5, weights));
  detail::seed_slots(backend, slots, seed, scale);
  return weights;
}

std::vector<std::array<int64_t, 2>> qwen2vl_patch_coordinates(const std::array<int64_t, 3>& grid,
                                                              int64_t m) {
  std::vector<std::array<int64_t, 2>> coords;
  coords.reserve(static_cast<size_t>(grid[0] * grid[1] * grid[2]));
  for (int64_t t = 0; t < grid[0]; ++t) {
    for (int64_t bh = 0; bh < grid[1] / m; ++bh) {
      for (int64_t bw = 0; bw < grid[2] / m; ++bw) {
        for (int64_t mh = 0; mh < m; ++mh) {
          for (int64_t mw = 0; mw < m; ++mw) coords.push_back({bh * m + mh, bw * m + mw});
        }
      }
    }
  }
  return coords;
}

Status encode_qwen2vl_images(Backend& backend, const Qwen2VlVisionWeights& w,
                             const Qwen2VlConfig& config, std::span<const float> pixel_values,
                             std::span<const std::array<int64_t, 3>> grids, Tensor out,
                             VisionScratch* scratch) {
  VisionOps* ops = backend.vision_ops();
  IB_ASSERT(ops != nullptr, "encode_qwen2vl_images on a backend without vision ops");
  const Qwen2VlVisionConfig& v = config.vision;
  const int64_t d = v.embed_dim, f = v.mlp_hidden, k = v.patch_values();
  const int64_t m = v.spatial_merge_size, md = v.merge_units() * d;
  std::vector<std::array<int64_t, 2>> coords;  // (N) every patch row's (h, w)
  for (const auto& g : grids) {
    IB_ASSERT(g[1] % m == 0 && g[2] % m == 0, "encode_qwen2vl_images: grid not merge-aligned");
    const auto c = qwen2vl_patch_coordinates(g, m);
    coords.insert(coords.end(), c.begin(), c.end());
  }
  const auto n = static_cast<int64_t>(coords.size());
  IB_ASSERT(static_cast<int64_t>(pixel_values.size()) == n * k,
            "pixel_values must be (sum of t h w, 3 T p p)");
  IB_ASSERT(out.rows() == n / v.merge_units() && out.row_size() == config.text_hidden_size,
            "out must be (visual tokens, text hidden size)");
  VisionScratch own(backend);
  VisionScratch& use = scratch != nullptr ? *scratch : own;
  use.begin();
  auto alloc = [&](std::initializer_list<int64_t> dims) { return use.alloc(dims); };
  IB_ASSIGN_OR_RETURN(const Tensor patches, use.input({n, k}));  // (N, K)
  IB_ASSIGN_OR_RETURN(const Tensor h, (alloc({n, d})));          // (N, D): the residual stream
  IB_ASSIGN_OR_RETURN(const Tensor x, (alloc({n, d})));    // (N, D): normed input, attention out
  IB_ASSIGN_OR_RETURN(const Tensor tmp, (alloc({n, d})));  // (N, D): proj and fc2 outputs
  IB_ASSIGN_OR_RETURN(const Tensor qkv, (alloc({n, 3 * d})));                    // (N, 3D)
  IB_ASSIGN_OR_RETURN(const Tensor mlp, (alloc({n, f})));                        // (N, F)
  IB_ASSIGN_OR_RETURN(const Tensor merged, (alloc({n / v.merge_units(), md})));  // (N / M, M D)
  // The rotary angles, once for every block: f32 (N, hd / 2) each.
  const int64_t half = v.head_dim() / 2;
  std::vector<float> host_cos, host_sin;
  rotary_2d_angles(coords, v.head_dim(), host_cos, host_sin);
  IB_ASSIGN_OR_RETURN(const Tensor cos_t, use.alloc({n, half}, DType::kF32));
  IB_ASSIGN_OR_RETURN(const Tensor sin_t, use.alloc({n, half}, DType::kF32));
  backend.copy_from_host(cos_t, host_cos.data(), DType::kF32);
  backend.copy_from_host(sin_t, host_sin.data(), DType::kF32);
  backend.copy_from_host(patches, pixel_values.data(), DType::kF32);
  backend.matmul(patches, w.patch, nullptr, h);
  const float scale = 1.0f / std::sqrt(static_cast<float>(v.head_dim()));
  for (const Qwen2VlBlock& blk : w.blocks) {
    ops->layer_norm(h, blk.norm1_weight, blk.norm1_bias, kLayerNormEps, x);
    backend.matmul(x, blk.qkv, &blk.qkv_bias, qkv);
    ops->rotary_rows(qkv, cos_t, sin_t, v.num_heads);
    int64_t first = 0;
    for (const auto& g : grids) {  // attention within each frame of each image
      const int64_t frame = g[1] * g[2];
      for (int64_t t = 0; t < g[0]; ++t, first += frame) {
        ops->bidirectional_attention(qkv.slice_rows(first, frame), frame, v.num_heads, scale,
                                     x.slice_rows(first, frame));
      }
    }
    backend.matmul(x, blk.proj, &blk.proj_bias, tmp);
    ops->add(h, tmp);
    ops->layer_norm(h, blk.norm2_weight, blk.norm2_bias, kLayerNormEps, x);
    backend.matmul(x, blk.fc1, &blk.fc1_bias, mlp);
    ops->activation(mlp, VisionActivation::kQuickGelu);
    backend.matmul(mlp, blk.fc2, &blk.fc2_bias, tmp);
    ops->add(h, tmp);
  }
  // The merger: each window's M consecutive rows, normed, read as one row of M D.
  ops->layer_norm(h, w.ln_q_weight, w.ln_q_bias, kLayerNormEps, x);
  backend.matmul(x.reshaped({n / v.merge_units(), md}), w.mlp0, &w.mlp0_bias, merged);
  ops->activation(merged, VisionActivation::kGeluErf);
  backend.matmul(merged, w.mlp2, &w.mlp2_bias, out);
  return backend.device_status();
}

}  // namespace ib
