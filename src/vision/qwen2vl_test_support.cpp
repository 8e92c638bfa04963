// Test support: the tiny Qwen2-VL and double-precision references of its parts.
#include "vision/qwen2vl_test_support.h"

#include <algorithm>
#include <cmath>

#include "core/rng.h"
#include "vision/qwen2vl_vision_tower.h"

namespace ib::qwen2vl_test {

const char* const kTinyConfig = R"({
  "architectures": ["Qwen2VLForConditionalGeneration"], "model_type": "qwen2_vl",
  "image_token_id": 100, "vision_start_token_id": 101, "vision_end_token_id": 102,
  "video_token_id": 103,
  "text_config": {"model_type": "qwen2_vl_text", "hidden_size": 64, "intermediate_size": 128,
                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "vocab_size": 128, "max_position_embeddings": 512, "rms_norm_eps": 1e-6,
                  "rope_theta": 10000.0, "eos_token_id": 127, "tie_word_embeddings": false,
                  "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}},
  "vision_config": {"depth": 2, "embed_dim": 32, "hidden_size": 64, "hidden_act": "quick_gelu",
                    "mlp_ratio": 2, "num_heads": 4, "in_channels": 3, "patch_size": 4,
                    "spatial_merge_size": 2, "temporal_patch_size": 2}})";

const char* const kTinyPreprocessor = R"({
  "image_processor_type": "Qwen2VLImageProcessor", "do_resize": true, "resample": 3,
  "do_rescale": true, "rescale_factor": 0.00392156862745098, "do_normalize": true,
  "image_mean": [0.48145466, 0.4578275, 0.40821073],
  "image_std": [0.26862954, 0.26130258, 0.27577711],
  "min_pixels": 64, "max_pixels": 4096, "patch_size": 4, "temporal_patch_size": 2,
  "merge_size": 2})";

Qwen2VlConfig tiny_config() {
  auto config = parse_qwen2vl_config(kTinyConfig, "tiny");
  IB_ASSERT(config.ok(), "the tiny config does not parse");
  return *config;
}

HostWeights vision_weights(const Qwen2VlConfig& config, uint64_t seed) {
  HostWeights weights;
  Rng rng(seed);
  for (const auto& t : qwen2vl_vision_schema(config)) {
    int64_t n = 1;
    for (int64_t dim : t.shape) n *= dim;
    std::vector<float>& values = weights[t.name];
    const bool gain =
        (t.name.find("norm") != std::string::npos || t.name.find("ln_q") != std::string::npos) &&
        t.name.ends_with(".weight");
    for (int64_t i = 0; i < n; ++i) {
      const auto u = static_cast<float>(rng.uniform() * 2 - 1);
      values.push_back(gain ? 1.0f + 0.2f * u : 0.25f * u);
    }
  }
  return weights;
}

std::vector<int64_t> vision_shape(const std::string& name, const Qwen2VlConfig& config) {
  for (const auto& t : qwen2vl_vision_schema(config)) {
    if (t.name == name) return t.shape;
  }
  IB_ASSERT(false, "not a vision tensor");
  return {};
}

std::vector<double> permute(const std::vector<double>& x, const std::vector<int64_t>& shape,
                            const std::vector<int>& perm) {
  const size_t rank = shape.size();
  std::vector<int64_t> stride(rank, 1);
  for (size_t i = rank - 1; i > 0; --i) stride[i - 1] = stride[i] * shape[i];
  std::vector<int64_t> out_shape(rank);
  for (size_t i = 0; i < rank; ++i) out_shape[i] = shape[static_cast<size_t>(perm[i])];
  std::vector<double> out;
  out.reserve(x.size());
  std::vector<int64_t> index(rank, 0);  // over out_shape, row-major
  for (size_t n = 0; n < x.size(); ++n) {
    int64_t src = 0;
    for (size_t i = 0; i < rank; ++i) src += index[i] * stride[static_cast<size_t>(perm[i])];
    out.push_back(x[static_cast<size_t>(src)]);
    for (size_t i = rank; i-- > 0;) {
      if (++index[i] < out_shape[i]) break;
      index[i] = 0;
    }
  }
  return out;
}

namespace {

using Vec = std::vector<double>;

Vec linear(const std::vector<float>& w, const std::vector<float>& b, const Vec& x) {
  const size_t in = x.size(), out = w.size() / in;
  Vec y(out);
  for (size_t o = 0; o < out; ++o) {
    double s = b.empty() ? 0.0 : b[o];
    for (size_t i = 0; i < in; ++i) s += static_cast<double>(w[o * in + i]) * x[i];
    y[o] = s;
  }
  return y;
}

Vec layer_norm(const Vec& x, const std::vector<float>& g, const std::vector<float>& b) {
  double mean = 0, var = 0;
  for (double v : x) mean += v;
  mean /= static_cast<double>(x.size());
  for (double v : x) var += (v - mean) * (v - mean);
  var /= static_cast<double>(x.size());
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = (x[i] - mean) / std::sqrt(var + 1e-6) * g[i] + b[i];
  return y;
}

}  // namespace

Matrix reference_vision(const HostWeights& w, const Qwen2VlConfig& config,
                        const std::vector<float>& pixel_rows,
                        const std::vector<std::array<int64_t, 3>>& grids) {
  const Qwen2VlVisionConfig& v = config.vision;
  const auto d = static_cast<size_t>(v.embed_dim);
  const auto k = static_cast<size_t>(v.patch_values());
  const int64_t m = v.spatial_merge_size;
  const std::string pre = "model.visual.";
  // PatchEmbed: a Conv3d whose kernel is its stride, over each (3, T, p, p) patch.
  Matrix x;
  for (size_t r = 0; r * k < pixel_rows.size(); ++r) {
    Vec patch(pixel_rows.begin() + static_cast<std::ptrdiff_t>(r * k),
              pixel_rows.begin() + static_cast<std::ptrdiff_t>((r + 1) * k));
    x.push_back(linear(w.at(pre + "patch_embed.proj.weight"), {}, patch));
  }
  // rot_pos_emb: hpos / wpos grids reshaped (h / m, m, w / m, m), permuted (0, 2, 1, 3).
  std::vector<std::array<double, 2>> pos;
  for (const auto& g : grids) {
    Vec hpos, wpos;
    for (int64_t i = 0; i < g[1]; ++i) {
      for (int64_t j = 0; j < g[2]; ++j) {
        hpos.push_back(static_cast<double>(i));
        wpos.push_back(static_cast<double>(j));
      }
    }
    const std::vector<int64_t> shape = {g[1] / m, m, g[2] / m, m};
    const Vec hp = permute(hpos, shape, {0, 2, 1, 3}), wp = permute(wpos, shape, {0, 2, 1, 3});
    for (int64_t t = 0; t < g[0]; ++t) {
      for (size_t i = 0; i < hp.size(); ++i) pos.push_back({hp[i], wp[i]});
    }
  }
  const size_t hd = d / static_cast<size_t>(v.num_heads), half = hd / 2, quarter = hd / 4;
  Vec inv_freq(quarter);  // VisionRotaryEmbedding(head_dim / 2)
  for (size_t j = 0; j < quarter; ++j) {
    inv_freq[j] = 1.0 / std::pow(10000.0, static_cast<double>(2 * j) / static_cast<double>(half));
  }
  auto rotate = [&](double* head, const std::array<double, 2>& p) {
    for (size_t i = 0; i < half; ++i) {
      const double a = (i < quarter ? p[0] * inv_freq[i] : p[1] * inv_freq[i - quarter]);
      const double x1 = head[i], x2 = head[i + half];
      head[i] = x1 * std::cos(a) - x2 * std::sin(a);
      head[i + half] = x2 * std::cos(a) + x1 * std::sin(a);
    }
  };
  for (int b = 0; b < v.depth; ++b) {
    const std::string l = pre + "blocks." + std::to_string(b) + ".";
    Matrix q, kk, vv;
    for (size_t r = 0; r < x.size(); ++r) {
      const Vec qkv = linear(w.at(l + "attn.qkv.weight"), w.at(l + "attn.qkv.bias"),
                             layer_norm(x[r], w.at(l + "norm1.weight"), w.at(l + "norm1.bias")));
      q.emplace_back(qkv.begin(), qkv.begin() + static_cast<std::ptrdiff_t>(d));
      kk.emplace_back(qkv.begin() + static_cast<std::ptrdiff_t>(d),
                      qkv.begin() + static_cast<std::ptrdiff_t>(2 * d));
      vv.emplace_back(qkv.begin() + static_cast<std::ptrdiff_t>(2 * d), qkv.end());
      for (size_t h = 0; h < static_cast<size_t>(v.num_heads); ++h) {
        rotate(&q[r][h * hd], pos[r]);
        rotate(&kk[r][h * hd], pos[r]);
      }
    }
    // cu_seqlens: each frame of each image attends within itself.
    size_t first = 0;
    Matrix attn(x.size(), Vec(d, 0.0));
    for (const auto& g : grids) {
      const auto frame = static_cast<size_t>(g[1] * g[2]);
      for (int64_t t = 0; t < g[0]; ++t, first += frame) {
        for (size_t r = first; r < first + frame; ++r) {
          for (size_t h = 0; h < static_cast<size_t>(v.num_heads); ++h) {
            Vec s(frame);
            for (size_t j = 0; j < frame; ++j) {
              double dot = 0;
              for (size_t i = 0; i < hd; ++i) dot += q[r][h * hd + i] * kk[first + j][h * hd + i];
              s[j] = dot / std::sqrt(static_cast<double>(hd));
            }
            const double mx = *std::max_element(s.begin(), s.end());
            double sum = 0;
            for (double& e : s) sum += (e = std::exp(e - mx));
            for (size_t j = 0; j < frame; ++j) {
              for (size_t i = 0; i < hd; ++i)
                attn[r][h * hd + i] += s[j] / sum * vv[first + j][h * hd + i];
            }
          }
        }
      }
    }
    for (size_t r = 0; r < x.size(); ++r) {
      const Vec o = linear(w.at(l + "attn.proj.weight"), w.at(l + "attn.proj.bias"), attn[r]);
      for (size_t i = 0; i < d; ++i) x[r][i] += o[i];
      Vec f = linear(w.at(l + "mlp.fc1.weight"), w.at(l + "mlp.fc1.bias"),
                     layer_norm(x[r], w.at(l + "norm2.weight"), w.at(l + "norm2.bias")));
      for (double& e : f) e = e / (1.0 + std::exp(-1.702 * e));  // quick_gelu
      const Vec down = linear(w.at(l + "mlp.fc2.weight"), w.at(l + "mlp.fc2.bias"), f);
      for (size_t i = 0; i < d; ++i) x[r][i] += down[i];
    }
  }
  // PatchMerger: ln_q, view(-1, 4 D), Linear, GELU, Linear.
  Matrix out;
  const auto units = static_cast<size_t>(v.merge_units());
  for (size_t r = 0; r < x.size(); r += units) {
    Vec cat;
    for (size_t u = 0; u < units; ++u) {
      const Vec n =
          layer_norm(x[r + u], w.at(pre + "merger.ln_q.weight"), w.at(pre + "merger.ln_q.bias"));
      cat.insert(cat.end(), n.begin(), n.end());
    }
    Vec h = linear(w.at(pre + "merger.mlp.0.weight"), w.at(pre + "merger.mlp.0.bias"), cat);
    for (double& e : h) e = 0.5 * e * (1.0 + std::erf(e / std::sqrt(2.0)));
    out.push_back(linear(w.at(pre + "merger.mlp.2.weight"), w.at(pre + "merger.mlp.2.bias"), h));
  }
  return out;
}

std::vector<int32_t> reference_rope_index(const std::vector<int32_t>& ids,
                                          const Qwen2VlConfig& config,
                                          const std::vector<std::array<int64_t, 3>>& grids) {
  // llm_pos_ids_list: chunks of (3, n); each starts at the previous chunk's max + 1.
  std::vector<std::array<std::vector<int64_t>, 3>> chunks;
  auto start = [&]() -> int64_t {
    if (chunks.empty()) return 0;
    int64_t mx = -1;
    for (const auto& row : chunks.back()) {
      for (int64_t p : row) mx = std::max(mx, p);
    }
    return mx + 1;
  };
  const int64_t m = config.vision.spatial_merge_size;
  size_t st = 0;
  for (const auto& g : grids) {
    size_t ed = st;
    while (ids[ed] != config.image_token_id) ++ed;
    const int64_t t = g[0], h = g[1] / m, wd = g[2] / m;
    const int64_t st_idx = start();
    const auto text_len = static_cast<int64_t>(ed - st);
    std::array<std::vector<int64_t>, 3> text;
    for (int64_t i = 0; i < text_len; ++i) {
      for (auto& row : text) row.push_back(i + st_idx);
    }
    chunks.push_back(text);
    std::array<std::vector<int64_t>, 3> image;
    for (int64_t a = 0; a < t; ++a) {
      for (int64_t b = 0; b < h; ++b) {
        for (int64_t c = 0; c < wd; ++c) {
          image[0].push_back(a + text_len + st_idx);
          image[1].push_back(b + text_len + st_idx);
          image[2].push_back(c + text_len + st_idx);
        }
      }
    }
    chunks.push_back(image);
    st = ed + static_cast<size_t>(t * h * wd);
  }
  if (st < ids.size()) {
    const int64_t st_idx = start();
    std::array<std::vector<int64_t>, 3> text;
    for (size_t i = 0; i < ids.size() - st; ++i) {
      for (auto& row : text) row.push_back(static_cast<int64_t>(i) + st_idx);
    }
    chunks.push_back(text);
  }
  std::vector<int32_t> out(3 * ids.size());
  size_t at = 0;
  for (const auto& chunk : chunks) {
    for (size_t i = 0; i < chunk[0].size(); ++i, ++at) {
      for (size_t r = 0; r < 3; ++r) out[r * ids.size() + at] = static_cast<int32_t>(chunk[r][i]);
    }
  }
  return out;
}

}  // namespace ib::qwen2vl_test
