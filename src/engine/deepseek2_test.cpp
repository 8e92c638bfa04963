// DeepSeek-V2 on the CPU engine: tiny random checkpoints written here under transformers'
// DeepseekV2ForCausalLM names (a V2-Lite shape: q_proj, greedy routing; a V2 shape: q_a_proj /
// q_a_layernorm / q_b_proj, group-limited routing, routed_scaling_factor), with YaRN rope whose
// attention factor is not 1, load from config.json and generate; every sampled row's logits
// (prefill and decode) against a double-precision reference written here from the modeling
// code's formulas (materialised K and V per head, interleaved rope, softmax-top-k routing, shared
// experts); decode equals prefill; the KV cache holds kv_lora_rank + qk_rope_head_dim values per
// token and layer, and keeps them when it grows; DeepSeek's routing options on a hand example;
// bad routers, missing experts and an fp8 KV cache are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <numbers>
#include <numeric>
#include <set>
#include <tuple>

#include "engine/arch/architecture.h"
#include "engine/detail/checkpoint_test_support.h"
#include "engine/detail/engine_test_support.h"
#include "engine/detail/kv_cache.h"
#include "model/hf_config.h"
#include "model/presets.h"
#include "model/safetensors.h"

namespace ib {
namespace {

using testing::TempDir;
using Vec = std::vector<double>;
using Tensors = std::map<std::string, std::vector<float>>;

struct Shape {
  bool v2 = false;  // q LoRA, group-limited routing, routed_scaling_factor 2.5
};

std::string config_json(const Shape& s, const std::string& scoring = "softmax",
                        const std::string& topk = "") {
  const std::string method = !topk.empty() ? topk : s.v2 ? "group_limited_greedy" : "greedy";
  return R"({"architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
  "vocab_size": 101, "hidden_size": 64, "intermediate_size": 96, "moe_intermediate_size": 16,
  "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 4,
  "n_routed_experts": 8, "n_shared_experts": 2, "num_experts_per_tok": 3,
  "first_k_dense_replace": 1, "kv_lora_rank": 32, "q_lora_rank": )" +
         std::string(s.v2 ? "24" : "null") + R"(,
  "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 12,
  "max_position_embeddings": 256, "rope_theta": 10000.0,
  "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                   "mscale": 0.707, "mscale_all_dim": 0.5, "beta_fast": 32, "beta_slow": 1},
  "routed_scaling_factor": )" +
         std::string(s.v2 ? "2.5" : "1.0") + R"(, "topk_method": ")" + method +
         R"(", "n_group": )" + std::string(s.v2 ? "4" : "1") + R"(, "topk_group": )" +
         std::string(s.v2 ? "2" : "1") + R"(, "scoring_func": ")" + scoring + R"(",
  "norm_topk_prob": false, "rms_norm_eps": 1e-5, "tie_word_embeddings": false,
  "hidden_act": "silu", "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2})";
}

ModelConfig load_config(const TempDir& dir, const std::string& json) {
  std::ofstream(dir.path() / "config.json") << json;
  auto c = load_hf_config(dir.path().string());
  IB_ASSERT(c.ok(), c.ok() ? "" : c.error().message.c_str());
  return std::move(c).value();
}

// Random tensors under DeepseekV2ForCausalLM's names: matrices U(-1, 1) / sqrt(fan_in), norms
// U(0.8, 1.2), embeddings U(-1, 1); the router rows spread so that routing is not uniform.
Tensors random_tensors(const ModelConfig& c, uint64_t seed) {
  Rng rng(seed);
  Tensors t;
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols, double scale = 1.0) {
    std::vector<float>& v = t[name];
    v.resize(static_cast<size_t>(rows * cols));
    for (float& x : v) {
      x = static_cast<float>(scale * (2 * rng.uniform() - 1) /
                             std::sqrt(static_cast<double>(cols)));
    }
  };
  auto norm = [&](const std::string& name, int64_t n) {
    std::vector<float>& v = t[name];
    v.resize(static_cast<size_t>(n));
    for (float& x : v) x = static_cast<float>(0.8 + 0.4 * rng.uniform());
  };
  const MlaConfig& m = c.mla;
  const int64_t d = c.hidden_size, h = c.num_heads;
  matrix("model.embed_tokens.weight", c.vocab_size, d, std::sqrt(static_cast<double>(d)));
  norm("model.norm.weight", d);
  matrix("lm_head.weight", c.vocab_size, d);
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    norm(p + "input_layernorm.weight", d);
    norm(p + "post_attention_layernorm.weight", d);
    const int64_t q_rows = h * (m.qk_nope_head_dim + m.qk_rope_head_dim);
    if (m.q_lora_rank > 0) {
      matrix(p + "self_attn.q_a_proj.weight", m.q_lora_rank, d);
      norm(p + "self_attn.q_a_layernorm.weight", m.q_lora_rank);
      matrix(p + "self_attn.q_b_proj.weight", q_rows, m.q_lora_rank);
    } else {
      matrix(p + "self_attn.q_proj.weight", q_rows, d);
    }
    matrix(p + "self_attn.kv_a_proj_with_mqa.weight", m.kv_lora_rank + m.qk_rope_head_dim, d);
    norm(p + "self_attn.kv_a_layernorm.weight", m.kv_lora_rank);
    matrix(p + "self_attn.kv_b_proj.weight", h * (m.qk_nope_head_dim + m.v_head_dim),
           m.kv_lora_rank);
    matrix(p + "self_attn.o_proj.weight", d, h * m.v_head_dim);
    auto mlp = [&](const std::string& prefix, int64_t f) {
      matrix(prefix + "gate_proj.weight", f, d);
      matrix(prefix + "up_proj.weight", f, d);
      matrix(prefix + "down_proj.weight", d, f);
    };
    if (l < c.moe.first_dense_layers) {
      mlp(p + "mlp.", c.intermediate_size);
      continue;
    }
    matrix(p + "mlp.gate.weight", c.moe.num_experts, d, 4.0);
    for (int e = 0; e < c.moe.num_experts; ++e) {
      mlp(p + "mlp.experts." + std::to_string(e) + ".", c.moe.expert_intermediate_size);
    }
    mlp(p + "mlp.shared_experts.",
        int64_t{c.moe.expert_intermediate_size} * c.moe.num_shared_experts);
  }
  return t;
}

void write_checkpoint(const TempDir& dir, const ModelConfig& c, const Tensors& t,
                      const std::string& leave_out = "") {
  std::vector<SafetensorsWriteTensor> out;
  // The shapes as transformers saves them: rows x cols, or one dimension for norms.
  auto shape_of = [&](const std::string& name, size_t n) -> std::vector<int64_t> {
    if (name.find("norm") != std::string::npos) return {static_cast<int64_t>(n)};
    int64_t cols = c.hidden_size;
    const MlaConfig& m = c.mla;
    if (name.find("q_b_proj") != std::string::npos) cols = m.q_lora_rank;
    if (name.find("kv_b_proj") != std::string::npos) cols = m.kv_lora_rank;
    if (name.find("o_proj") != std::string::npos) cols = int64_t{c.num_heads} * m.v_head_dim;
    if (name.find("down_proj") != std::string::npos) {
      cols = name.find("experts.") != std::string::npos && name.find("shared") == std::string::npos
                 ? c.moe.expert_intermediate_size
             : name.find("shared") != std::string::npos
                 ? int64_t{c.moe.expert_intermediate_size} * c.moe.num_shared_experts
                 : c.intermediate_size;
    }
    return {static_cast<int64_t>(n) / cols, cols};
  };
  for (const auto& [name, v] : t) {
    if (name == leave_out) continue;
    out.push_back({name, DType::kF32, shape_of(name, v.size()),
                   std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4)});
  }
  const Status st = write_safetensors((dir.path() / "model.safetensors").string(), out);
  IB_ASSERT(st.ok(), "write_safetensors failed");
}

// ---- the double-precision reference (DeepseekV2ForCausalLM's forward, eager) ----

// q_a_layernorm and kv_a_layernorm: DeepseekV2RMSNorm(rank), its default eps.
constexpr double kLatentNormEps = 1e-6;

Vec linear(const std::vector<float>& w, const Vec& x) {  // w (N, K) row-major
  const size_t k = x.size(), n = w.size() / k;
  Vec y(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < k; ++j) y[i] += static_cast<double>(w[i * k + j]) * x[j];
  }
  return y;
}

Vec rms_norm(const Vec& x, const std::vector<float>& g, double eps) {
  double ms = 0;
  for (double v : x) ms += v * v;
  const double inv = 1.0 / std::sqrt(ms / static_cast<double>(x.size()) + eps);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * g[i];
  return y;
}

Vec swiglu(const Tensors& t, const std::string& prefix, const Vec& x) {
  const Vec g = linear(t.at(prefix + "gate_proj.weight"), x);
  const Vec u = linear(t.at(prefix + "up_proj.weight"), x);
  Vec a(g.size());
  for (size_t i = 0; i < g.size(); ++i) a[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
  return linear(t.at(prefix + "down_proj.weight"), a);
}

// transformers' _compute_yarn_parameters, in double.
Vec yarn_inv_freq(const ModelConfig& c) {
  const RopeScaling& s = c.rope_scaling;
  const double dim = c.mla.qk_rope_head_dim, base = c.rope_theta;
  auto correction = [&](double rotations) {
    return dim * std::log(s.original_max_position_embeddings / (rotations * 2 * std::numbers::pi)) /
           (2 * std::log(base));
  };
  const double low = std::max(std::floor(correction(s.beta_fast)), 0.0);
  double high = std::min(std::ceil(correction(s.beta_slow)), dim - 1);
  if (low == high) high += 0.001;
  Vec inv;
  for (int i = 0; i < c.mla.qk_rope_head_dim / 2; ++i) {
    const double pos_freq = std::pow(base, 2.0 * i / dim);
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    const double extrapolation = 1 - ramp;
    inv.push_back(1 / (s.factor * pos_freq) * (1 - extrapolation) + 1 / pos_freq * extrapolation);
  }
  return inv;
}

double yarn_mscale(const RopeScaling& s, double m) {
  return 0.1 * m * std::log(s.factor) + 1;
}

// On cos and sin (transformers' _compute_yarn_parameters).
double yarn_attention_factor(const RopeScaling& s) {
  return yarn_mscale(s, s.mscale) / yarn_mscale(s, s.mscale_all_dim);
}

// Interleaved pairs as complex numbers, times factor * e^(i pos inv_freq).
void rope(double* x, const Vec& inv_freq, double pos, double factor) {
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const double a = x[2 * i], b = x[2 * i + 1], angle = pos * inv_freq[i];
    const double c = std::cos(angle) * factor, s = std::sin(angle) * factor;
    x[2 * i] = a * c - b * s;
    x[2 * i + 1] = a * s + b * c;
  }
}

// The experts each layer routes each token to, ascending: routing[layer][token] (empty on a dense
// layer).
using Routing = std::vector<std::vector<std::vector<int32_t>>>;

// chosen (when given): the experts picked, ascending.
Vec moe(const ModelConfig& c, const Tensors& t, const std::string& p, const Vec& x,
        std::vector<int32_t>* chosen = nullptr) {
  const Vec logits = linear(t.at(p + "gate.weight"), x);
  const size_t e = logits.size();
  Vec prob(e);
  const double mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (size_t i = 0; i < e; ++i) sum += prob[i] = std::exp(logits[i] - mx);
  for (double& v : prob) v /= sum;
  if (c.moe.topk_method == "group_limited_greedy") {
    const size_t groups = static_cast<size_t>(c.moe.num_groups), per = e / groups;
    std::vector<std::pair<double, size_t>> best;
    for (size_t g = 0; g < groups; ++g) {
      best.push_back({*std::max_element(prob.begin() + static_cast<std::ptrdiff_t>(g * per),
                                        prob.begin() + static_cast<std::ptrdiff_t>(g * per + per)),
                      g});
    }
    std::sort(best.begin(), best.end(), [](auto a, auto b) { return a.first > b.first; });
    for (size_t r = static_cast<size_t>(c.moe.topk_groups); r < groups; ++r) {
      for (size_t i = 0; i < per; ++i) prob[best[r].second * per + i] = 0;
    }
  }
  std::vector<size_t> order(e);
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return prob[a] > prob[b]; });
  order.resize(static_cast<size_t>(c.moe.experts_per_token));
  std::sort(order.begin(), order.end());  // transformers adds the experts in ascending id order
  if (chosen != nullptr) chosen->assign(order.begin(), order.end());
  Vec out(x.size(), 0.0);
  for (size_t id : order) {
    const Vec y = swiglu(t, p + "experts." + std::to_string(id) + ".", x);
    for (size_t i = 0; i < out.size(); ++i) out[i] += y[i] * prob[id] * c.moe.routed_scaling_factor;
  }
  const Vec shared = swiglu(t, p + "shared_experts.", x);
  for (size_t i = 0; i < out.size(); ++i) out[i] += shared[i];
  return out;
}

// Logits after every position of tokens.
std::vector<Vec> reference_logits(const ModelConfig& c, const Tensors& t,
                                  const std::vector<int32_t>& tokens, Routing* routing = nullptr) {
  const MlaConfig& m = c.mla;
  const size_t n_tok = tokens.size(), d = static_cast<size_t>(c.hidden_size);
  const size_t heads = static_cast<size_t>(c.num_heads),
               nope = static_cast<size_t>(m.qk_nope_head_dim);
  const size_t rp = static_cast<size_t>(m.qk_rope_head_dim), vd = static_cast<size_t>(m.v_head_dim);
  const size_t r = static_cast<size_t>(m.kv_lora_rank);
  const Vec inv_freq = yarn_inv_freq(c);
  const double factor = yarn_attention_factor(c.rope_scaling);
  // DeepseekV2Attention's softmax scale takes get_mscale(factor, mscale_all_dim)^2 under YaRN.
  const double mscale = yarn_mscale(c.rope_scaling, c.rope_scaling.mscale_all_dim);
  const double scale = mscale * mscale / std::sqrt(static_cast<double>(nope + rp));
  std::vector<Vec> h(n_tok);
  for (size_t i = 0; i < n_tok; ++i) {
    const auto& e = t.at("model.embed_tokens.weight");
    h[i].assign(e.begin() + static_cast<std::ptrdiff_t>(tokens[i] * d),
                e.begin() + static_cast<std::ptrdiff_t>((tokens[i] + 1) * d));
  }
  if (routing != nullptr)
    routing->assign(static_cast<size_t>(c.num_layers), std::vector<std::vector<int32_t>>(n_tok));
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::string a = p + "self_attn.";
    std::vector<Vec> q(n_tok), k(n_tok), v(n_tok);  // per token, heads x (N + P) / V
    for (size_t i = 0; i < n_tok; ++i) {
      const Vec x = rms_norm(h[i], t.at(p + "input_layernorm.weight"), c.rms_norm_eps);
      q[i] = m.q_lora_rank > 0 ? linear(t.at(a + "q_b_proj.weight"),
                                        rms_norm(linear(t.at(a + "q_a_proj.weight"), x),
                                                 t.at(a + "q_a_layernorm.weight"), kLatentNormEps))
                               : linear(t.at(a + "q_proj.weight"), x);
      const Vec kv_a = linear(t.at(a + "kv_a_proj_with_mqa.weight"), x);
      const Vec latent = rms_norm(Vec(kv_a.begin(), kv_a.begin() + static_cast<std::ptrdiff_t>(r)),
                                  t.at(a + "kv_a_layernorm.weight"), kLatentNormEps);
      Vec k_pe(kv_a.begin() + static_cast<std::ptrdiff_t>(r), kv_a.end());
      rope(k_pe.data(), inv_freq, static_cast<double>(i), factor);
      const Vec kv = linear(t.at(a + "kv_b_proj.weight"), latent);  // heads x (N + V)
      k[i].resize(heads * (nope + rp));
      v[i].resize(heads * vd);
      for (size_t hh = 0; hh < heads; ++hh) {
        rope(q[i].data() + hh * (nope + rp) + nope, inv_freq, static_cast<double>(i), factor);
        for (size_t j = 0; j < nope; ++j) k[i][hh * (nope + rp) + j] = kv[hh * (nope + vd) + j];
        for (size_t j = 0; j < rp; ++j) k[i][hh * (nope + rp) + nope + j] = k_pe[j];
        for (size_t j = 0; j < vd; ++j) v[i][hh * vd + j] = kv[hh * (nope + vd) + nope + j];
      }
    }
    for (size_t i = 0; i < n_tok; ++i) {
      Vec attn(heads * vd, 0.0);
      for (size_t hh = 0; hh < heads; ++hh) {
        Vec s(i + 1);
        for (size_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (size_t x = 0; x < nope + rp; ++x) {
            dot += q[i][hh * (nope + rp) + x] * k[j][hh * (nope + rp) + x];
          }
          s[j] = dot * scale;
        }
        const double mx = *std::max_element(s.begin(), s.end());
        double sum = 0;
        for (double& x : s) sum += x = std::exp(x - mx);
        for (size_t j = 0; j <= i; ++j) {
          for (size_t x = 0; x < vd; ++x) attn[hh * vd + x] += s[j] / sum * v[j][hh * vd + x];
        }
      }
      const Vec o = linear(t.at(a + "o_proj.weight"), attn);
      for (size_t x = 0; x < d; ++x) h[i][x] += o[x];
      const Vec y = rms_norm(h[i], t.at(p + "post_attention_layernorm.weight"), c.rms_norm_eps);
      std::vector<int32_t>* chosen =
          routing != nullptr ? &(*routing)[static_cast<size_t>(l)][i] : nullptr;
      const Vec f = l < c.moe.first_dense_layers ? swiglu(t, p + "mlp.", y)
                                                 : moe(c, t, p + "mlp.", y, chosen);
      for (size_t x = 0; x < d; ++x) h[i][x] += f[x];
    }
  }
  std::vector<Vec> logits;
  for (size_t i = 0; i < n_tok; ++i) {
    logits.push_back(
        linear(t.at("lm_head.weight"), rms_norm(h[i], t.at("model.norm.weight"), c.rms_norm_eps)));
  }
  return logits;
}

// ---- the engine on the checkpoint ----

std::unique_ptr<Engine> checkpoint_engine(const ModelConfig& c, const TempDir& dir,
                                          Backend& backend, int block_size = 4) {
  EngineConfig config;
  config.block_size = block_size;
  config.capture_logits = true;
  auto engine =
      create_engine(c, {LoadFormat::kSafetensors, dir.path().string(), 0}, config, backend);
  IB_ASSERT(engine.ok(), engine.ok() ? "" : engine.error().message.c_str());
  return std::move(engine).value();
}

// Prompts of 1 to 19 tokens, batched, 5 greedy tokens each; every sampled row (the prefill's
// last and four decode steps) against the reference.
void expect_matches_reference(const Shape& shape) {
  TempDir dir;
  const ModelConfig c = load_config(dir, config_json(shape));
  ASSERT_TRUE(c.check_supported().ok()) << c.check_supported().error().message;
  const Tensors t = random_tensors(c, shape.v2 ? 7 : 5);
  write_checkpoint(dir, c, t);
  CpuBackend backend(2);
  auto engine = checkpoint_engine(c, dir, backend);
  Rng rng(3);
  std::map<uint64_t, std::vector<int32_t>> prompts;
  for (uint64_t i = 0; i < 4; ++i) {
    prompts[i] = testing::random_prompt(rng, 1 + 6 * static_cast<int>(i), c.vocab_size);
    ASSERT_TRUE(engine->add_request(testing::greedy_request(i, prompts[i], 5)).ok());
  }
  double worst = 0;
  for (const auto& [id, done] : testing::run_to_completion(*engine)) {
    ASSERT_EQ(done.tokens.size(), 5u);
    std::vector<int32_t> all = prompts[id];
    all.insert(all.end(), done.tokens.begin(), done.tokens.end());
    const auto ref = reference_logits(c, t, all);
    for (size_t i = 0; i < done.tokens.size(); ++i) {
      const Vec& r = ref[prompts[id].size() - 1 + i];
      double err = 0, norm = 0;
      for (size_t v = 0; v < r.size(); ++v) {
        err += (done.logits[i][v] - r[v]) * (done.logits[i][v] - r[v]);
        norm += r[v] * r[v];
      }
      worst = std::max(worst, std::sqrt(err / norm));
      ASSERT_LT(std::sqrt(err / norm), 1e-5) << "request " << id << " row " << i;
      ASSERT_EQ(done.tokens[i], std::max_element(r.begin(), r.end()) - r.begin());
    }
  }
  std::printf("worst relative L2 error of the logits: %.3g\n", worst);
}

TEST(DeepseekV2Engine, LiteShapeMatchesTheReference) {
  expect_matches_reference(Shape{false});
}

TEST(DeepseekV2Engine, V2ShapeMatchesTheReference) {
  expect_matches_reference(Shape{true});
}

// A request decoding its 5th token and a request prefilling the same 4 tokens more see the same
// logits: the latent cache and the absorbed attention agree with the prefill.
TEST(DeepseekV2Engine, DecodeEqualsPrefill) {
  TempDir dir;
  const ModelConfig c = load_config(dir, config_json(Shape{true}));
  write_checkpoint(dir, c, random_tensors(c, 9));
  CpuBackend backend(2);
  auto engine = checkpoint_engine(c, dir, backend, 2);
  Rng rng(4);
  const std::vector<int32_t> prompt = testing::random_prompt(rng, 9, c.vocab_size);
  ASSERT_TRUE(engine->add_request(testing::greedy_request(1, prompt, 5)).ok());
  const auto first = testing::run_to_completion(*engine);
  std::vector<int32_t> longer = prompt;
  longer.insert(longer.end(), first.at(1).tokens.begin(), first.at(1).tokens.begin() + 4);
  ASSERT_TRUE(engine->add_request(testing::greedy_request(2, longer, 1)).ok());
  const auto second = testing::run_to_completion(*engine);
  const auto& decoded = first.at(1).logits[4];
  const auto& prefilled = second.at(2).logits[0];
  ASSERT_EQ(decoded.size(), prefilled.size());
  for (size_t v = 0; v < decoded.size(); ++v) EXPECT_NEAR(decoded[v], prefilled[v], 1e-5) << v;
  EXPECT_EQ(first.at(1).tokens[4], second.at(2).tokens[0]);
}

TEST(DeepseekV2Kv, TheCacheHoldsTheLatentAndTheRopeKey) {
  const ModelConfig lite = *find_preset("deepseek-v2-lite");
  EXPECT_TRUE(lite.check_supported().ok()) << lite.check_supported().error().message;
  EXPECT_EQ(lite.kv_entry().values(), 576);
  EXPECT_FALSE(lite.kv_entry().separate_v);
  EXPECT_EQ(lite.kv_bytes_per_token(DType::kBF16), 27 * 576 * 2);
  EXPECT_EQ(lite.gqa_kv_bytes_per_token(DType::kBF16), 27 * 16 * (192 + 128) * 2);
  TempDir dir;
  const ModelConfig c = load_config(dir, config_json(Shape{false}));
  CpuBackend backend(1);
  auto kv = detail::allocate_kv_cache(c, 5, 4, {}, backend);
  ASSERT_TRUE(kv.ok()) << kv.error().message;
  ASSERT_EQ(kv->layers.size(), 3u);
  EXPECT_EQ(kv->layers[1].k.dim(0), 5);
  EXPECT_EQ(kv->layers[1].k.dim(1), 1);
  EXPECT_EQ(kv->layers[1].k.dim(2), 4);
  EXPECT_EQ(kv->layers[1].k.dim(3), 32 + 8);
  EXPECT_TRUE(kv->layers[1].v.empty());
  // One latent per token and layer, no V half.
  EXPECT_GE(kv->storage.bytes(), size_t{3 * 5 * 4 * 40 * 4});
  EXPECT_LT(kv->storage.bytes(), size_t{2 * 3 * 5 * 4 * 40 * 4});
}

// Growing the pool keeps every layer's latents (one half per layer, no V).
TEST(DeepseekV2Kv, GrowingThePoolKeepsTheLatents) {
  TempDir dir;
  const ModelConfig c = load_config(dir, config_json(Shape{false}));
  CpuBackend backend(1);
  auto kv = detail::allocate_kv_cache(c, 3, 4, {}, backend);
  ASSERT_TRUE(kv.ok()) << kv.error().message;
  const int64_t per_layer = 3 * 4 * 40;
  for (size_t l = 0; l < kv->layers.size(); ++l) {
    float* k = kv->layers[l].k.as<float>();
    for (int64_t i = 0; i < per_layer; ++i) k[i] = static_cast<float>(1000 * l + i);
  }
  detail::HostStaging staging;
  auto grown = detail::grow_kv_cache(*kv, c, 5, 4, backend, staging);
  ASSERT_TRUE(grown.ok()) << grown.error().message;
  ASSERT_EQ(kv->layers[0].k.dim(0), 5);
  for (size_t l = 0; l < kv->layers.size(); ++l) {
    EXPECT_TRUE(kv->layers[l].v.empty());
    const float* k = kv->layers[l].k.as<const float>();
    for (int64_t i = 0; i < per_layer; ++i) {
      ASSERT_EQ(k[i], static_cast<float>(1000 * l + i)) << "layer " << l << " value " << i;
    }
  }
}

TEST(DeepseekV2Routing, GroupLimitedTopKScaledWithoutRenormalisation) {
  CpuBackend backend(1);
  // 8 experts in 4 groups of 2; p = softmax(logits).
  const std::vector<float> logits = {0.0f, 3.0f, 2.5f, 2.9f, 1.0f, 0.5f, 2.0f, 2.8f};
  double sum = 0;
  std::vector<double> p;
  for (float x : logits) sum += std::exp(static_cast<double>(x));
  for (float x : logits) p.push_back(std::exp(static_cast<double>(x)) / sum);
  auto route = [&](const MoeRouting& routing, int k, std::vector<int32_t>& ids,
                   std::vector<float>& weights) {
    auto buf = backend.alloc(256, MemoryTag::kActivations);
    ASSERT_TRUE(buf.ok());
    Tensor lg = buf->view(DType::kF32, {1, 8});
    Tensor id = buf->view(DType::kI32, {1, k}, 32);
    Tensor w = buf->view(DType::kF32, {1, k}, 64);
    Tensor counts = buf->view(DType::kI64, {8}, 128);
    backend.copy_from_host(lg, logits.data(), DType::kF32);
    backend.fill_constant(buf->view(DType::kF32, {16}, 128), 0.0f);
    backend.moe_route_grouped(lg, routing, id, w, counts);
    ids.assign(id.as<int32_t>(), id.as<int32_t>() + k);
    weights.assign(w.as<float>(), w.as<float>() + k);
  };
  std::vector<int32_t> ids;
  std::vector<float> w;
  // Greedy top-3: 1 (3.0), 3 (2.9), 7 (2.8).
  route(MoeRouting{false, 1, 1, 1.0f}, 3, ids, w);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3, 7}));
  EXPECT_NEAR(w[0], p[1], 1e-6);
  // Groups' best: g0 3.0, g1 2.9, g2 1.0, g3 2.8; the two best groups (0, 1) compete: 1, 3, 2.
  route(MoeRouting{false, 4, 2, 2.5f}, 3, ids, w);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3, 2}));
  EXPECT_NEAR(w[2], p[2] * 2.5, 1e-6);
  // Renormalised, then scaled.
  route(MoeRouting{true, 4, 2, 2.0f}, 3, ids, w);
  EXPECT_NEAR(w[0] + w[1] + w[2], 2.0, 1e-6);
}

TEST(DeepseekV2Refusals, UnknownRoutersAreRefusedByName) {
  TempDir dir;
  for (const auto& [scoring, topk, name] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"sigmoid", "greedy", "scoring_func 'sigmoid'"},
           {"softmax", "noaux_tc", "topk_method 'noaux_tc'"}}) {
    const ModelConfig c = load_config(dir, config_json(Shape{false}, scoring, topk));
    const Status st = c.check_supported();
    ASSERT_FALSE(st.ok()) << name;
    EXPECT_EQ(st.error().kind, ErrorKind::kUser);
    EXPECT_NE(st.error().message.find(name), std::string::npos) << st.error().message;
    CpuBackend backend(1);
    auto engine = create_engine(c, {LoadFormat::kSafetensors, dir.path().string(), 0},
                                EngineConfig{}, backend);
    ASSERT_FALSE(engine.ok());
    EXPECT_NE(engine.error().message.find(name), std::string::npos) << engine.error().message;
  }
}

TEST(DeepseekV2Refusals, MissingExpertTensorsAreListed) {
  TempDir dir;
  const ModelConfig c = load_config(dir, config_json(Shape{false}));
  write_checkpoint(dir, c, random_tensors(c, 1), "model.layers.2.mlp.experts.5.up_proj.weight");
  CpuBackend backend(1);
  auto w = load_weights(c, {LoadFormat::kSafetensors, dir.path().string(), 0}, backend);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().kind, ErrorKind::kUser);
  EXPECT_NE(w.error().message.find("model.layers.2.mlp.experts.5.up_proj.weight"),
            std::string::npos)
      << w.error().message;
  EXPECT_NE(w.error().message.find("missing"), std::string::npos) << w.error().message;
}

TEST(DeepseekV2Refusals, AnFp8KvCacheIsRefused) {
  TempDir dir;
  const ModelConfig c = load_config(dir, config_json(Shape{false}));
  CpuBackend backend(1);
  EngineConfig config;
  config.kv_cache_dtype = "fp8";
  auto engine = create_engine(c, {LoadFormat::kDummy, "", 0}, config, backend);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.error().kind, ErrorKind::kUser);
  EXPECT_NE(engine.error().message.find("--kv-cache-dtype"), std::string::npos)
      << engine.error().message;
}

// EngineConfig::capture_routing (generate --dump-routing): every sampled row's experts per layer
// are the reference's for that token (the dense first layer: -1s), on the V2 shape's group-limited
// routing, for a prefill's last row and the decode steps after it.
TEST(DeepseekV2Routing, CapturedRoutingIsTheReferences) {
  TempDir dir;
  const Shape shape{true};
  const ModelConfig c = load_config(dir, config_json(shape));
  const Tensors t = random_tensors(c, 7);
  write_checkpoint(dir, c, t);
  CpuBackend backend(2);
  EngineConfig config;
  config.block_size = 4;
  config.capture_routing = true;
  auto engine =
      create_engine(c, {LoadFormat::kSafetensors, dir.path().string(), 0}, config, backend);
  ASSERT_TRUE(engine.ok()) << engine.error().message;
  Rng rng(9);
  const std::vector<int32_t> prompt = testing::random_prompt(rng, 9, c.vocab_size);
  ASSERT_TRUE((*engine)->add_request(testing::greedy_request(0, prompt, 4)).ok());
  std::vector<int32_t> all = prompt;
  std::vector<std::vector<int32_t>> captured;
  while ((*engine)->has_unfinished()) {
    auto out = (*engine)->step();
    ASSERT_TRUE(out.ok()) << out.error().message;
    for (TokenEvent& e : out->events) {
      all.push_back(e.token);
      captured.push_back(std::move(e.routing));
    }
  }
  ASSERT_EQ(captured.size(), 4u);
  Routing ref;
  reference_logits(c, t, all, &ref);
  const auto k = static_cast<size_t>(c.moe.experts_per_token);
  for (size_t step = 0; step < captured.size(); ++step) {
    ASSERT_EQ(captured[step].size(), static_cast<size_t>(c.num_layers) * k);
    const size_t token = prompt.size() - 1 + step;  // the row that produced generated token `step`
    for (size_t l = 0; l < static_cast<size_t>(c.num_layers); ++l) {
      std::vector<int32_t> got(captured[step].begin() + static_cast<std::ptrdiff_t>(l * k),
                               captured[step].begin() + static_cast<std::ptrdiff_t>((l + 1) * k));
      if (l < static_cast<size_t>(c.moe.first_dense_layers)) {
        EXPECT_EQ(got, std::vector<int32_t>(k, -1)) << "dense layer " << l;
        continue;
      }
      std::sort(got.begin(), got.end());
      EXPECT_EQ(got, ref[l][token]) << "step " << step << " layer " << l;
    }
  }
}

// A step's bytes count the experts it actually read (per layer the distinct experts its tokens
// were routed to, here from the captured routing), not the bound min(E, tokens x k) (8 of 8 for
// four tokens of 3 experts): between two decode steps of four sequences the bytes differ by the
// four KV rows more read plus the experts' difference.
TEST(DeepseekV2Routing, StepBytesCountTheExpertsRead) {
  TempDir dir;
  const ModelConfig c = load_config(dir, config_json(Shape{}));
  CpuBackend backend(2);
  EngineConfig config;
  config.block_size = 4;
  config.capture_routing = true;
  auto engine = create_engine(c, {LoadFormat::kDummy, "", 11}, config, backend);
  ASSERT_TRUE(engine.ok()) << engine.error().message;
  Rng rng(13);
  for (uint64_t i = 0; i < 4; ++i) {
    ASSERT_TRUE((*engine)
                    ->add_request(
                        testing::greedy_request(i, testing::random_prompt(rng, 6, c.vocab_size), 6))
                    .ok());
  }
  const auto k = static_cast<size_t>(c.moe.experts_per_token);
  const auto layers = static_cast<size_t>(c.num_layers);
  std::vector<std::pair<int64_t, int64_t>> decode;  // (bytes, experts read over the layers)
  bool bound_hit = false;
  while ((*engine)->has_unfinished()) {
    auto out = (*engine)->step();
    ASSERT_TRUE(out.ok()) << out.error().message;
    if (out->events.size() != 4 ||
        std::any_of(out->events.begin(), out->events.end(),
                    [](const TokenEvent& e) { return e.output_index == 0; })) {
      continue;  // the prefill
    }
    int64_t read = 0;
    for (size_t l = static_cast<size_t>(c.moe.first_dense_layers); l < layers; ++l) {
      std::set<int32_t> ids;
      for (const TokenEvent& e : out->events)
        ids.insert(e.routing.begin() + l * k, e.routing.begin() + (l + 1) * k);
      read += static_cast<int64_t>(ids.size());
      bound_hit |= ids.size() < static_cast<size_t>(c.moe.num_experts);
    }
    decode.emplace_back(out->stats.bytes_moved, read);
  }
  ASSERT_EQ(decode.size(), 5u);
  EXPECT_TRUE(bound_hit) << "every step read all experts: the test cannot tell the bound apart";
  const int64_t f = c.moe.expert_intermediate_size, d = c.hidden_size;
  const int64_t one_expert = 3 * f * d * 4;  // gate, up and down in fp32
  for (size_t s = 1; s < decode.size(); ++s) {
    EXPECT_EQ(decode[s].first - decode[s - 1].first,
              4 * c.kv_bytes_per_token(DType::kF32) +
                  (decode[s].second - decode[s - 1].second) * one_expert)
        << "decode step " << s;
  }
}

TEST(DeepseekV2Engine, DummyWeightsRunAndRouteEveryExpert) {
  TempDir dir;
  const ModelConfig c = load_config(dir, config_json(Shape{true}));
  CpuBackend backend(2);
  EngineConfig config;
  config.block_size = 4;
  auto engine = create_engine(c, {LoadFormat::kDummy, "", 3}, config, backend);
  ASSERT_TRUE(engine.ok()) << engine.error().message;
  Rng rng(5);
  for (uint64_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(
        (*engine)
            ->add_request(testing::greedy_request(i, testing::random_prompt(rng, 12, 101), 4))
            .ok());
  }
  const auto done = testing::run_to_completion(**engine);
  EXPECT_EQ(done.size(), 3u);
  for (const auto& [id, d] : done) EXPECT_EQ(d.tokens.size(), 4u);
}

}  // namespace
}  // namespace ib
