// Test support: the tiny LLaVA and the double-precision reference of its vision path.
#include "vision/llava_test_support.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/rng.h"
#include "model/safetensors.h"
#include "vision/clip_vision_tower.h"

namespace ib::llava_test {

// A tiny LLaVA: 28 px images of 7 px patches (16 patches), D 32, 4 heads, F 48, 3 layers of
// which 2 run (feature layer -2), text hidden 40.
const char* const kTinyConfig = R"({
  "architectures": ["LlavaForConditionalGeneration"], "image_token_index": 7,
  "projector_hidden_act": "gelu", "text_config": {"hidden_size": 40},
  "vision_config": {"hidden_size": 32, "image_size": 28, "intermediate_size": 48,
                    "model_type": "clip_vision_model", "num_attention_heads": 4,
                    "num_hidden_layers": 3, "patch_size": 7},
  "vision_feature_layer": -2, "vision_feature_select_strategy": "default"})";

LlavaConfig tiny_config(std::string_view json) {
  auto config = parse_llava_config(json, "tiny");
  IB_ASSERT(config.ok(), "the tiny config does not parse");
  return *config;
}

// Every tensor of a full checkpoint (all layers, post_layernorm), seeded, plus a language model
// tensor the vision loader must leave alone.
HostWeights host_weights(const LlavaConfig& config, uint64_t seed) {
  LlavaConfig all = config;
  all.vision_feature_layer = config.vision.num_hidden_layers;  // every layer's names
  HostWeights weights;
  Rng rng(seed);
  for (const auto& t : llava_vision_schema(all)) {
    int64_t n = 1;
    for (int64_t dim : t.shape) n *= dim;
    std::vector<float>& values = weights[t.name];
    const bool gain = t.name.find("norm") != std::string::npos && t.name.ends_with(".weight");
    for (int64_t i = 0; i < n; ++i) {
      const auto u = static_cast<float>(rng.uniform() * 2 - 1);
      values.push_back(gain ? 1.0f + 0.2f * u : 0.3f * u);
    }
  }
  const int64_t d = config.vision.hidden_size;
  const std::string post = "model.vision_tower.vision_model.post_layernorm.";
  weights[post + "weight"] = std::vector<float>(static_cast<size_t>(d), 1.0f);
  weights[post + "bias"] = std::vector<float>(static_cast<size_t>(d), 0.0f);
  weights["model.language_model.norm.weight"] = std::vector<float>(40, 1.0f);
  return weights;
}

std::vector<int64_t> shape_of(const std::string& name, const LlavaConfig& config) {
  LlavaConfig all = config;
  all.vision_feature_layer = config.vision.num_hidden_layers;
  for (const auto& t : llava_vision_schema(all)) {
    if (t.name == name) return t.shape;
  }
  return {static_cast<int64_t>(
      name.find("language_model") != std::string::npos ? 40 : config.vision.hidden_size)};
}

std::string write_checkpoint(const HostWeights& weights, const LlavaConfig& config,
                             const std::string& file) {
  std::vector<SafetensorsWriteTensor> tensors;
  for (const auto& [name, values] : weights) {
    std::string bytes(values.size() * sizeof(float), '\0');
    std::memcpy(bytes.data(), values.data(), bytes.size());
    tensors.push_back({name, DType::kF32, shape_of(name, config), std::move(bytes)});
  }
  const auto path = (std::filesystem::temp_directory_path() / file).string();
  IB_ASSERT(write_safetensors(path, tensors).ok(), "cannot write the test checkpoint");
  return path;
}

// ---- the reference, in double, from the named host tensors ----

namespace {

Matrix linear(const Matrix& x, const std::vector<float>& w, const std::vector<float>* b,
              int64_t out) {
  const auto in = static_cast<int64_t>(x[0].size());
  Matrix y(x.size(), std::vector<double>(static_cast<size_t>(out)));
  for (size_t r = 0; r < x.size(); ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double acc = b != nullptr ? (*b)[static_cast<size_t>(o)] : 0.0;
      for (int64_t i = 0; i < in; ++i)
        acc += x[r][static_cast<size_t>(i)] * w[static_cast<size_t>(o * in + i)];
      y[r][static_cast<size_t>(o)] = acc;
    }
  }
  return y;
}

Matrix layer_norm(const Matrix& x, const std::vector<float>& g, const std::vector<float>& b,
                  double eps) {
  Matrix y = x;
  for (auto& row : y) {
    double mean = 0, var = 0;
    for (double v : row) mean += v;
    mean /= static_cast<double>(row.size());
    for (double v : row) var += (v - mean) * (v - mean);
    var /= static_cast<double>(row.size());
    for (size_t i = 0; i < row.size(); ++i)
      row[i] = (row[i] - mean) / std::sqrt(var + eps) * g[i] + b[i];
  }
  return y;
}

}  // namespace

Matrix reference_image(const HostWeights& w, const LlavaConfig& config, const float* pixels) {
  const ClipVisionConfig& v = config.vision;
  const int64_t d = v.hidden_size, p = v.patch_size_px, s = v.image_size_px, grid = s / p;
  const int64_t heads = v.num_attention_heads, hd = v.head_dim();
  const std::string t = "model.vision_tower.vision_model.";
  auto get = [&](const std::string& name) -> const std::vector<float>& { return w.at(name); };
  // Embeddings: the convolution (stride p, no bias) per patch, the class token, positions.
  Matrix h(static_cast<size_t>(grid * grid + 1), std::vector<double>(static_cast<size_t>(d)));
  const auto& conv = get(t + "embeddings.patch_embedding.weight");  // (D, 3, p, p)
  for (int64_t o = 0; o < d; ++o)
    h[0][static_cast<size_t>(o)] = get(t + "embeddings.class_embedding")[static_cast<size_t>(o)];
  for (int64_t gy = 0; gy < grid; ++gy) {
    for (int64_t gx = 0; gx < grid; ++gx) {
      for (int64_t o = 0; o < d; ++o) {
        double acc = 0;
        for (int64_t c = 0; c < 3; ++c) {
          for (int64_t ky = 0; ky < p; ++ky) {
            for (int64_t kx = 0; kx < p; ++kx) {
              acc += conv[static_cast<size_t>(((o * 3 + c) * p + ky) * p + kx)] *
                     pixels[(c * s + gy * p + ky) * s + gx * p + kx];
            }
          }
        }
        h[static_cast<size_t>(1 + gy * grid + gx)][static_cast<size_t>(o)] = acc;
      }
    }
  }
  const auto& pos = get(t + "embeddings.position_embedding.weight");
  for (size_t r = 0; r < h.size(); ++r) {
    for (int64_t o = 0; o < d; ++o)
      h[r][static_cast<size_t>(o)] += pos[r * static_cast<size_t>(d) + static_cast<size_t>(o)];
  }
  const double eps = v.layer_norm_eps;
  h = layer_norm(h, get(t + "pre_layrnorm.weight"), get(t + "pre_layrnorm.bias"), eps);
  for (int l = 0; l < config.layers_to_run(); ++l) {
    const std::string pre = t + "encoder.layers." + std::to_string(l) + ".";
    const Matrix x =
        layer_norm(h, get(pre + "layer_norm1.weight"), get(pre + "layer_norm1.bias"), eps);
    const Matrix q =
        linear(x, get(pre + "self_attn.q_proj.weight"), &get(pre + "self_attn.q_proj.bias"), d);
    const Matrix k =
        linear(x, get(pre + "self_attn.k_proj.weight"), &get(pre + "self_attn.k_proj.bias"), d);
    const Matrix vv =
        linear(x, get(pre + "self_attn.v_proj.weight"), &get(pre + "self_attn.v_proj.bias"), d);
    Matrix attn(h.size(), std::vector<double>(static_cast<size_t>(d), 0.0));
    for (size_t i = 0; i < h.size(); ++i) {
      for (int64_t head = 0; head < heads; ++head) {
        std::vector<double> score(h.size());
        double max_s = -1e300, total = 0;
        for (size_t j = 0; j < h.size(); ++j) {
          double dot = 0;
          for (int64_t e = 0; e < hd; ++e)
            dot +=
                q[i][static_cast<size_t>(head * hd + e)] * k[j][static_cast<size_t>(head * hd + e)];
          score[j] = dot / std::sqrt(static_cast<double>(hd));
          max_s = std::max(max_s, score[j]);
        }
        for (double& sc : score) total += (sc = std::exp(sc - max_s));
        for (size_t j = 0; j < h.size(); ++j) {
          for (int64_t e = 0; e < hd; ++e)
            attn[i][static_cast<size_t>(head * hd + e)] +=
                score[j] / total * vv[j][static_cast<size_t>(head * hd + e)];
        }
      }
    }
    const Matrix o = linear(attn, get(pre + "self_attn.out_proj.weight"),
                            &get(pre + "self_attn.out_proj.bias"), d);
    for (size_t r = 0; r < h.size(); ++r) {
      for (int64_t c = 0; c < d; ++c) h[r][static_cast<size_t>(c)] += o[r][static_cast<size_t>(c)];
    }
    Matrix f =
        linear(layer_norm(h, get(pre + "layer_norm2.weight"), get(pre + "layer_norm2.bias"), eps),
               get(pre + "mlp.fc1.weight"), &get(pre + "mlp.fc1.bias"), v.intermediate_size);
    for (auto& row : f) {
      for (double& z : row) z = z / (1 + std::exp(-1.702 * z));  // quick_gelu
    }
    const Matrix down = linear(f, get(pre + "mlp.fc2.weight"), &get(pre + "mlp.fc2.bias"), d);
    for (size_t r = 0; r < h.size(); ++r) {
      for (int64_t c = 0; c < d; ++c)
        h[r][static_cast<size_t>(c)] += down[r][static_cast<size_t>(c)];
    }
  }
  if (config.drop_class_token) h.erase(h.begin());
  const std::string pj = "model.multi_modal_projector.";
  Matrix y =
      linear(h, get(pj + "linear_1.weight"), &get(pj + "linear_1.bias"), config.text_hidden_size);
  for (auto& row : y) {
    for (double& z : row) z = 0.5 * z * (1 + std::erf(z / std::sqrt(2.0)));
  }
  return linear(y, get(pj + "linear_2.weight"), &get(pj + "linear_2.bias"),
                config.text_hidden_size);
}

std::vector<float> random_pixels(int64_t images, const LlavaConfig& config, uint64_t seed) {
  Rng rng(seed);
  const int64_t s = config.vision.image_size_px;
  std::vector<float> pixels(static_cast<size_t>(images * 3 * s * s));
  for (float& v : pixels) v = static_cast<float>(rng.uniform() * 4 - 2);
  return pixels;
}

}  // namespace ib::llava_test
