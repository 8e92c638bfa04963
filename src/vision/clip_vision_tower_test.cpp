// The LLaVA vision path on the CPU backend against an independent double-precision reference
// written from transformers' modeling code (CLIPVisionEmbeddings, CLIPEncoderLayer,
// LlavaMultiModalProjector), from a checkpoint written with transformers' tensor names; the
// loader's refusals; batching; and config.json's reading.
#include "vision/clip_vision_tower.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>

#include "backend/cpu/cpu_backend.h"
#include "core/rng.h"

namespace ib {
namespace {

using HostWeights = std::map<std::string, std::vector<float>>;
using Matrix = std::vector<std::vector<double>>;  // (rows, cols)

// A tiny LLaVA: 28 px images of 7 px patches (16 patches), D 32, 4 heads, F 48, 3 layers of
// which 2 run (feature layer -2), text hidden 40.
constexpr const char* kTinyConfig = R"({
  "architectures": ["LlavaForConditionalGeneration"], "image_token_index": 7,
  "projector_hidden_act": "gelu", "text_config": {"hidden_size": 40},
  "vision_config": {"hidden_size": 32, "image_size": 28, "intermediate_size": 48,
                    "model_type": "clip_vision_model", "num_attention_heads": 4,
                    "num_hidden_layers": 3, "patch_size": 7},
  "vision_feature_layer": -2, "vision_feature_select_strategy": "default"})";

LlavaConfig tiny_config(std::string_view json = kTinyConfig) {
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

std::vector<float> encode(CpuBackend& backend, const LlavaVisionWeights& weights,
                          const LlavaConfig& config, const std::vector<float>& pixels,
                          int64_t images) {
  const int64_t rows = images * config.tokens_per_image(), dt = config.text_hidden_size;
  auto buffer = backend.alloc(static_cast<size_t>(rows * dt) * sizeof(float), MemoryTag::kOther);
  IB_ASSERT(buffer.ok(), "test allocation");
  const Tensor out = buffer->view(DType::kF32, {rows, dt});
  const Status status = encode_llava_images(backend, weights, config, pixels, images, out);
  IB_ASSERT(status.ok(), "encode failed");
  std::vector<float> host(static_cast<size_t>(rows * dt));
  backend.copy_to_host(out, host.data());
  return host;
}

TEST(ClipVisionTower, MatchesTheDoubleReferenceFromATransformersNamedCheckpoint) {
  for (const char* strategy : {"default", "full"}) {
    std::string json = kTinyConfig;
    json.replace(json.find("\"default\""), 9, std::string("\"") + strategy + "\"");
    const LlavaConfig config = tiny_config(json);
    EXPECT_EQ(config.layers_to_run(), 2);
    EXPECT_EQ(config.tokens_per_image(), std::string(strategy) == "default" ? 16 : 17);
    const HostWeights host = host_weights(config, 21);
    const std::string path = write_checkpoint(host, config, "ib_llava_tiny.safetensors");
    auto checkpoint = SafetensorsCheckpoint::open(path);
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.error().message;
    CpuBackend backend(2);
    auto weights = load_llava_vision_weights(backend, **checkpoint, config);
    ASSERT_TRUE(weights.ok()) << weights.error().message;
    ASSERT_EQ(weights->layers.size(), 2u);
    const int64_t images = 2, s = config.vision.image_size_px;
    const auto pixels = random_pixels(images, config, 5);
    const auto got = encode(backend, *weights, config, pixels, images);
    double worst = 0, largest = 0;
    for (int64_t n = 0; n < images; ++n) {
      const Matrix want = reference_image(host, config, pixels.data() + n * 3 * s * s);
      ASSERT_EQ(static_cast<int64_t>(want.size()), config.tokens_per_image());
      for (size_t r = 0; r < want.size(); ++r) {
        for (size_t c = 0; c < want[r].size(); ++c) {
          const size_t at = (static_cast<size_t>(n) * want.size() + r) * want[r].size() + c;
          worst = std::max(worst, std::abs(got[at] - want[r][c]));
          largest = std::max(largest, std::abs(want[r][c]));
        }
      }
    }
    EXPECT_GT(largest, 0.1);
    EXPECT_LE(worst, 1e-4 * std::max(1.0, largest)) << strategy << ": largest " << largest;
    std::filesystem::remove(path);
  }
}

TEST(ClipVisionTower, TheLegacyLayoutLoadsTheSameWeights) {
  const LlavaConfig config = tiny_config();
  const HostWeights host = host_weights(config, 4);
  HostWeights legacy;  // the llava-hf checkpoints' names: no "model." before the vision parts
  for (const auto& [name, values] : host) {
    const bool vision = name.rfind("model.vision_tower.", 0) == 0 ||
                        name.rfind("model.multi_modal_projector.", 0) == 0;
    legacy[vision ? name.substr(6) : name] = values;
  }
  CpuBackend backend(2);
  const auto pixels = random_pixels(1, config, 8);
  std::vector<std::vector<float>> outputs;
  for (const HostWeights* weights : std::array<const HostWeights*, 2>{&host, &legacy}) {
    std::vector<SafetensorsWriteTensor> tensors;
    for (const auto& [name, values] : *weights) {
      std::string bytes(values.size() * sizeof(float), '\0');
      std::memcpy(bytes.data(), values.data(), bytes.size());
      const std::string v5 =
          weights == &legacy && name.rfind("model.", 0) != 0 ? "model." + name : name;
      tensors.push_back({name, DType::kF32, shape_of(v5, config), std::move(bytes)});
    }
    const auto path =
        (std::filesystem::temp_directory_path() / "ib_llava_layout.safetensors").string();
    ASSERT_TRUE(write_safetensors(path, tensors).ok());
    auto checkpoint = SafetensorsCheckpoint::open(path);
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.error().message;
    auto loaded = load_llava_vision_weights(backend, **checkpoint, config);
    ASSERT_TRUE(loaded.ok()) << loaded.error().message;
    outputs.push_back(encode(backend, *loaded, config, pixels, 1));
    std::filesystem::remove(path);
  }
  EXPECT_EQ(outputs[0], outputs[1]);
}

TEST(ClipVisionTower, BatchedImagesEqualOneAtATime) {
  const LlavaConfig config = tiny_config();
  CpuBackend backend(2);
  auto weights = random_llava_vision_weights(backend, config, 9, 0.2f);
  ASSERT_TRUE(weights.ok()) << weights.error().message;
  const int64_t s = config.vision.image_size_px, per = 3 * s * s;
  const auto pixels = random_pixels(3, config, 6);
  const auto batched = encode(backend, *weights, config, pixels, 3);
  for (int64_t n = 0; n < 3; ++n) {
    const std::vector<float> one(pixels.begin() + n * per, pixels.begin() + (n + 1) * per);
    const auto alone = encode(backend, *weights, config, one, 1);
    const auto rows = static_cast<std::ptrdiff_t>(alone.size());
    EXPECT_TRUE(std::equal(alone.begin(), alone.end(), batched.begin() + n * rows)) << n;
  }
}

TEST(ClipVisionTower, TheLoaderNamesWhatIsMissingForeignOrMisshapen) {
  const LlavaConfig config = tiny_config();
  CpuBackend backend(1);
  auto load_with = [&](const std::function<void(HostWeights&)>& edit) {
    HostWeights host = host_weights(config, 3);
    edit(host);
    const std::string path = write_checkpoint(host, config, "ib_llava_bad.safetensors");
    auto checkpoint = SafetensorsCheckpoint::open(path);
    IB_ASSERT(checkpoint.ok(), "test checkpoint");
    auto weights = load_llava_vision_weights(backend, **checkpoint, config);
    std::filesystem::remove(path);
    return weights.ok() ? std::string("(loaded)") : weights.error().message;
  };
  const std::string k = "model.vision_tower.vision_model.encoder.layers.1.self_attn.k_proj.bias";
  EXPECT_NE(load_with([&](HostWeights& w) { w.erase(k); }).find("has no " + k + " [32]"),
            std::string::npos);
  EXPECT_NE(load_with([&](HostWeights& w) {
              w.erase("model.multi_modal_projector.linear_2.bias");
            }).find("linear_2.bias"),
            std::string::npos);
  EXPECT_NE(load_with([](HostWeights& w) {
              w["model.vision_tower.vision_model.encoder.layers.0.self_attn.qkv.weight"] =
                  std::vector<float>(32, 0.0f);
            }).find("does not have"),
            std::string::npos);
  EXPECT_NE(load_with([](HostWeights& w) {
              w.erase("model.vision_tower.vision_model.embeddings.class_embedding");
            }).find("has neither"),
            std::string::npos);
  EXPECT_EQ(load_with([](HostWeights&) {}), "(loaded)");
  // A config.json that is not the checkpoint's: the first tensor whose shape differs is named.
  const HostWeights host = host_weights(config, 3);
  const std::string path = write_checkpoint(host, config, "ib_llava_shape.safetensors");
  auto checkpoint = SafetensorsCheckpoint::open(path);
  ASSERT_TRUE(checkpoint.ok());
  std::string json = kTinyConfig;
  const std::string from = "\"intermediate_size\": 48";
  json.replace(json.find(from), from.size(), "\"intermediate_size\": 64");
  auto wrong = load_llava_vision_weights(backend, **checkpoint, tiny_config(json));
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.error().message.find("layers.0.mlp.fc1.weight is [48, 32] in the checkpoint, "
                                       "[64, 32] by config.json"),
            std::string::npos)
      << wrong.error().message;
  std::filesystem::remove(path);
}

TEST(LlavaConfig, ReadsLlava15AndRefusesWhatItDoesNotRun) {
  std::ifstream in(std::filesystem::path(std::getenv("INFERBENCH_SOURCE_DIR") != nullptr
                                             ? std::getenv("INFERBENCH_SOURCE_DIR")
                                             : ".") /
                   "src/vision/testdata/llava-1.5-7b-config.json");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto config = parse_llava_config(text, "llava-1.5-7b");
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_EQ(config->tokens_per_image(), 576);
  EXPECT_EQ(config->layers_to_run(), 23);
  EXPECT_EQ(config->text_hidden_size, 4096);
  EXPECT_EQ(config->image_token_id, 32000);
  EXPECT_EQ(config->vision.head_dim(), 64);
  const std::pair<const char*, const char*> bad[] = {
      {R"({"text_config": {}})", "no \"vision_config\""},
      {R"({"vision_config": {"model_type": "siglip_vision_model"}})", "clip_vision_model"},
      {R"({"vision_config": {"hidden_act": "gelu"}})", "quick_gelu"},
      {R"({"vision_config": {}, "projector_hidden_act": "relu"})", "\"gelu\" only"},
      {R"({"vision_config": {}, "vision_feature_layer": [-2, -5]})", "a list"},
      {R"({"vision_config": {}, "vision_feature_layer": 13})", "-13..12"},
      {R"({"vision_config": {}, "vision_feature_select_strategy": "cls"})", "\"full\""},
      {R"({"vision_config": {"image_size": 30, "patch_size": 7}})", "multiple of patch_size"},
      {R"({"vision_config": {"hidden_size": 30}})", "num_attention_heads"}};
  for (const auto& [json, want] : bad) {
    auto r = parse_llava_config(json, "c.json");
    ASSERT_FALSE(r.ok()) << json;
    EXPECT_NE(r.error().message.find(want), std::string::npos) << r.error().message;
  }
}

}  // namespace
}  // namespace ib
