// Mixtral on the CPU engine: a tiny random checkpoint under HF's names (block_sparse_moe.gate,
// experts.J.w1/w2/w3) loads and generates, its logits within 1e-5 of the double-precision
// reference (softmax routing, top-2, renormalised); dummy routing is spread (neither uniform nor
// collapsed) and counted; experts quantized at load compute their dequantized values; missing
// experts, unknown routers and experts in GGUF blocks are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <tuple>

#include "engine/arch/architecture.h"
#include "engine/detail/checkpoint_test_support.h"
#include "engine/detail/engine_test_support.h"
#include "engine/detail/weight_storage.h"
#include "model/hf_config.h"
#include "model/presets.h"
#include "model/safetensors.h"

namespace ib {
namespace {

using testing::TempDir;

// 4 experts, top-2, two layers: small enough for the double reference.
ModelConfig tiny_mixtral() {
  return testing::tiny_mixtral_config(4, 48);
}

// Dummy weights (the documented router spread) of c.
ModelWeights dummy_weights(const ModelConfig& c, Backend& backend) {
  auto w = load_weights(c, {LoadFormat::kDummy, "", 0}, backend);
  IB_ASSERT(w.ok(), "load_weights failed in a test");
  return std::move(w).value();
}

// Greedy generation of random prompts; every sampled row against the reference.
void expect_matches_reference(const ModelConfig& c, ModelWeights w, Backend& backend,
                              const testing::HostWeights& host) {
  auto engine = testing::logits_engine(c, std::move(w), "none", backend);
  Rng rng(3);
  std::map<uint64_t, std::vector<int32_t>> prompts;
  for (uint64_t i = 0; i < 4; ++i) {
    prompts[i] = testing::random_prompt(rng, 1 + 5 * static_cast<int>(i), c.vocab_size);
    ASSERT_TRUE(engine->add_request(testing::greedy_request(i, prompts[i], 5)).ok());
  }
  for (const auto& [id, done] : testing::run_to_completion(*engine)) {
    std::vector<int32_t> all = prompts[id];
    all.insert(all.end(), done.tokens.begin(), done.tokens.end());
    const auto ref = testing::reference_logits(c, host, all);
    for (size_t i = 0; i < done.tokens.size(); ++i) {
      const auto& r = ref[prompts[id].size() - 1 + i];
      double scale = 1.0;
      for (double x : r) scale = std::max(scale, std::fabs(x));
      for (size_t v = 0; v < r.size(); ++v)
        ASSERT_NEAR(done.logits[i][v], r[v], 1e-5 * scale) << "request " << id << " row " << i;
    }
  }
  // Every token computed (prompt and output) picked two experts in each layer.
  const EngineStats s = engine->stats();
  ASSERT_EQ(s.expert_tokens.size(), static_cast<size_t>(c.num_layers * c.moe.num_experts));
  int64_t computed = 0;
  for (const auto& [id, p] : prompts) computed += static_cast<int64_t>(p.size()) + 5 - 1;
  for (int l = 0; l < c.num_layers; ++l) {
    const auto first = s.expert_tokens.begin() + l * c.moe.num_experts;
    EXPECT_EQ(std::accumulate(first, first + c.moe.num_experts, int64_t{0}), 2 * computed);
  }
}

TEST(MixtralSchema, FillsEachLogicalWeightExactlyOnce) {
  const ModelConfig c = tiny_mixtral();
  auto arch = find_architecture(c);
  ASSERT_TRUE(arch.ok()) << arch.error().message;
  EXPECT_EQ((*arch)->name(), "mixtral");
  CpuBackend backend(1);
  auto w = load_weights(c, {LoadFormat::kDummy, "", 0}, backend);
  ASSERT_TRUE(w.ok()) << w.error().message;
  // Per (role, layer, expert): the sources' row ranges, which must tile the weight's rows.
  std::map<std::tuple<WeightRole, int, int>, std::vector<std::pair<int64_t, int64_t>>> rows;
  for (const SchemaEntry& e : (*arch)->weight_schema(c).entries) {
    for (const TensorSource& s : e.sources) {
      rows[{e.role, e.layer, e.expert}].emplace_back(s.row_offset, s.shape[0]);
      const Tensor t = weight_for(*w, e.role, e.layer, e.expert);
      ASSERT_EQ(s.shape.size(), static_cast<size_t>(t.rank)) << s.name;
      if (t.rank == 2) {
        EXPECT_EQ(s.shape[1], t.shape[1]) << s.name;
      }
    }
  }
  // embed, final norm, lm_head; per layer 2 norms, qkv, o, router and 2 per expert.
  EXPECT_EQ(rows.size(), 3u + 2u * (5u + 2u * 4u));
  for (auto& [key, ranges] : rows) {
    std::sort(ranges.begin(), ranges.end());
    int64_t at = 0;
    for (const auto& [offset, count] : ranges) {
      EXPECT_EQ(offset, at);
      at = offset + count;
    }
    const auto [role, layer, expert] = key;
    EXPECT_EQ(at, weight_for(*w, role, layer, expert).shape[0])
        << weight_role_name(role) << " layer " << layer << " expert " << expert;
  }
}

TEST(MixtralCheckpoint, LoadsHfNamesAndMatchesTheReference) {
  const ModelConfig c = tiny_mixtral();
  CpuBackend backend(2);
  ModelWeights random = testing::random_weights(c, backend, 21);
  const testing::HostWeights host = testing::copy_weights_to_host(c, random, backend);
  TempDir dir;
  ASSERT_TRUE(write_safetensors((dir.path() / "model.safetensors").string(),
                                testing::hf_tensors(c, host, DType::kF32))
                  .ok());
  auto loaded = load_weights(c, {LoadFormat::kSafetensors, dir.path().string(), 0}, backend);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  // The file's norms are the random ones, so the reference holds the loaded model too.
  expect_matches_reference(c, std::move(loaded).value(), backend, host);
}

TEST(MixtralCheckpoint, MissingExpertTensorsAreListed) {
  const ModelConfig c = tiny_mixtral();
  CpuBackend backend(2);
  ModelWeights random = testing::random_weights(c, backend, 4);
  auto tensors =
      testing::hf_tensors(c, testing::copy_weights_to_host(c, random, backend), DType::kF32);
  std::erase_if(tensors, [](const auto& t) {
    return t.name == "model.layers.1.block_sparse_moe.experts.3.w2.weight" ||
           t.name == "model.layers.0.block_sparse_moe.experts.2.w1.weight";
  });
  TempDir dir;
  ASSERT_TRUE(write_safetensors((dir.path() / "model.safetensors").string(), tensors).ok());
  auto w = load_weights(c, {LoadFormat::kSafetensors, dir.path().string(), 0}, backend);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().kind, ErrorKind::kUser);
  const std::string& m = w.error().message;
  EXPECT_NE(m.find("'model.layers.0.block_sparse_moe.experts.2.w1.weight'"), std::string::npos)
      << m;
  EXPECT_NE(m.find("'model.layers.1.block_sparse_moe.experts.3.w2.weight'"), std::string::npos)
      << m;
  EXPECT_NE(m.find("MixtralForCausalLM"), std::string::npos) << m;
}

TEST(MixtralDummy, RoutingIsSpreadNeitherUniformNorCollapsed) {
  ModelConfig c = tiny_mixtral();
  c.moe.num_experts = 8;
  CpuBackend backend(2);
  auto engine = testing::logits_engine(c, dummy_weights(c, backend), "none", backend);
  Rng rng(8);
  for (uint64_t i = 0; i < 8; ++i) {
    const auto prompt = testing::random_prompt(rng, 40, c.vocab_size);
    ASSERT_TRUE(engine->add_request(testing::greedy_request(i, prompt, 8)).ok());
  }
  testing::run_to_completion(*engine);
  const EngineStats s = engine->stats();
  for (int l = 0; l < c.num_layers; ++l) {
    const auto first = s.expert_tokens.begin() + l * c.moe.num_experts;
    const std::vector<int64_t> row(first, first + c.moe.num_experts);
    const double mean =
        static_cast<double>(std::accumulate(row.begin(), row.end(), int64_t{0})) / 8.0;
    const auto [lo, hi] = std::minmax_element(row.begin(), row.end());
    std::cout << "layer " << l << ": min " << *lo << " max " << *hi << " mean " << mean << "\n";
    EXPECT_GT(static_cast<double>(*lo), 0.2 * mean) << "an expert nearly idle: collapsed";
    EXPECT_GT(static_cast<double>(*hi) / mean, 1.2) << "routing close to uniform";
    EXPECT_LT(static_cast<double>(*hi) / mean, 3.0) << "one expert takes most tokens";
  }
}

TEST(MixtralTraffic, AStepCountsOnlyTheExpertsItsTokensCanPick) {
  ModelConfig c = tiny_mixtral();
  c.moe.num_experts = 8;
  CpuBackend backend(1);
  ModelWeights w = dummy_weights(c, backend);
  int64_t layers = 0;
  for (const LayerWeights& l : w.layers) layers += l.bytes();
  const auto one_expert = static_cast<int64_t>(w.layers[0].expert_gate_up[0].bytes() +
                                               w.layers[0].expert_down[0].bytes());
  const auto head = static_cast<int64_t>(w.lm_head.bytes() + w.final_norm.bytes());
  auto engine = testing::logits_engine(c, std::move(w), "none", backend);
  ASSERT_TRUE(engine->add_request(testing::greedy_request(1, {5}, 2)).ok());
  auto step = engine->step();  // one token: two experts per layer
  ASSERT_TRUE(step.ok());
  const int64_t kv = c.kv_bytes_per_token(DType::kF32);
  const int64_t skipped = (8 - 2) * one_expert * c.num_layers;
  EXPECT_EQ(step->stats.bytes_moved, layers - skipped + c.hidden_size * 4 + head + 2 * kv);
}

TEST(MixtralConfig, PresetsRunAndRouterKeysAreRead) {
  for (const char* name : {"mixtral-8x7b", "mixtral-8x22b"}) {
    auto c = find_preset(name);
    ASSERT_TRUE(c.ok());
    EXPECT_TRUE(c->check_supported().ok()) << name;
  }
  const std::string base = R"({"architectures": ["MixtralForCausalLM"], "vocab_size": 100,
    "hidden_size": 64, "intermediate_size": 48, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128,
    "num_local_experts": 4, "num_experts_per_tok": 2, "router_aux_loss_coef": 0.02)";
  auto plain = parse_hf_config(base + R"(, "sliding_window": null})", "m");
  ASSERT_TRUE(plain.ok()) << plain.error().message;
  EXPECT_EQ(plain->moe.num_experts, 4);
  EXPECT_EQ(plain->moe.experts_per_token, 2);
  EXPECT_EQ(plain->moe.expert_intermediate_size, 48);
  EXPECT_EQ(plain->sliding_window, 0);
  EXPECT_TRUE(plain->check_supported().ok());
  auto windowed = parse_hf_config(base + R"(, "sliding_window": 4096})", "m");
  ASSERT_TRUE(windowed.ok()) << windowed.error().message;
  EXPECT_EQ(windowed->sliding_window, 4096);
}

TEST(MixtralRefusals, UnknownRoutersAreNamedBeforeLoading) {
  const std::string base = R"({"architectures": ["MixtralForCausalLM"], "vocab_size": 100,
    "hidden_size": 64, "intermediate_size": 48, "num_hidden_layers": 2,
    "num_attention_heads": 4, "max_position_embeddings": 128)";
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"scoring_func", "sigmoid"}, {"topk_method", "group_limited_greedy"}}) {
    auto c = parse_hf_config(base + ", \"" + key + "\": \"" + value + "\"}", "m");
    ASSERT_TRUE(c.ok()) << c.error().message;
    const Status s = c->check_supported();
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().message.find(key + " '" + value + "'"), std::string::npos)
        << s.error().message;
    CpuBackend backend(1);
    auto w = load_weights(*c, {LoadFormat::kDummy, "", 0}, backend);
    ASSERT_FALSE(w.ok());
    EXPECT_EQ(backend.memory().snapshot().num_allocs, 0);
  }
}

TEST(MixtralRefusals, ExpertsInGgufBlocksAreRefused) {
  CpuBackend backend(1);
  WeightOptions opts;
  opts.format = LoadFormat::kDummy;
  opts.quantization = WeightFormat::kGguf;
  auto w = load_weights(tiny_mixtral(), opts, backend);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().kind, ErrorKind::kUser);
  EXPECT_NE(w.error().message.find("dense weights only"), std::string::npos) << w.error().message;
  EXPECT_EQ(backend.memory().snapshot().num_allocs, 0);
}

// What the loader asks a backend about the experts before anything is allocated
// (MoeOps::runs_quantized_experts; CUDA takes only some 4-bit layouts, CudaMoeExperts tests its
// answers): the load-time layout's group size, or a 4-bit checkpoint's own with its act-order.
TEST(MixtralRefusals, TheBackendIsAskedAboutTheExpertsLayout) {
  ModelConfig c = tiny_mixtral();
  const QuantizedExperts int4 = detail::quantized_experts(c, WeightFormat::kInt4W4A16);
  EXPECT_EQ(int4.format, WeightFormat::kInt4W4A16);
  EXPECT_EQ(int4.group_size, 128);
  EXPECT_FALSE(int4.act_order);
  EXPECT_EQ(int4.hidden, c.hidden_size);
  EXPECT_EQ(int4.width, c.moe.expert_intermediate_size);
  EXPECT_EQ(detail::quantized_experts(c, WeightFormat::kInt8W8A16).group_size, 0);
  c.quantization.format = "gptq";
  c.quantization.group_size = 64;
  c.quantization.act_order = true;
  const QuantizedExperts gptq = detail::quantized_experts(c, WeightFormat::kInt4W4A16);
  EXPECT_EQ(gptq.group_size, 64);
  EXPECT_TRUE(gptq.act_order);
}

// w's values as the backend's matmul reads them, (N, K) f32: identity rows times w^T (each output
// one product by 1 and zeros, so exact).
std::vector<float> dequantized(CpuBackend& backend, const WeightRef& w) {
  const int64_t n = w.rows(), k = w.cols();
  std::vector<float> eye(static_cast<size_t>(k * k), 0.0f), wt(static_cast<size_t>(k * n));
  for (int64_t i = 0; i < k; ++i) eye[static_cast<size_t>(i * k + i)] = 1.0f;
  backend.matmul(Tensor(eye.data(), DType::kF32, {k, k}), w, nullptr,
                 Tensor(wt.data(), DType::kF32, {k, n}));
  std::vector<float> out(static_cast<size_t>(n * k));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c)
      out[static_cast<size_t>(r * k + c)] = wt[static_cast<size_t>(c * n + r)];
  return out;
}

// Experts quantized at load (int8 per channel; AWQ's 4-bit groups of 128 with zero points, at a
// width of 128 for them) on the CPU: the layer's moe_experts equals the same op on the experts'
// dequantized values (the backend's matmul defines them), the weights' bytes are the plan's, and
// the engine generates.
TEST(MixtralQuantized, ExpertsQuantizedAtLoadComputeTheirDequantizedValues) {
  for (const WeightFormat format : {WeightFormat::kInt8W8A16, WeightFormat::kInt4W4A16}) {
    ModelConfig c = tiny_mixtral();
    if (format == WeightFormat::kInt4W4A16) {
      c.hidden_size = 128;
      c.head_dim = 32;  // q: 4 x 32 = 128 inputs of o
      c.intermediate_size = 128;
      c.moe.expert_intermediate_size = 128;
    }
    CpuBackend backend(1);
    WeightOptions opts;
    opts.format = LoadFormat::kDummy;
    opts.quantization = format;
    opts.asymmetric = format == WeightFormat::kInt4W4A16;  // awq
    auto w = load_weights(c, opts, backend);
    ASSERT_TRUE(w.ok()) << w.error().message;
    const LayerWeights& l = w->layers[1];
    ASSERT_EQ(l.expert_gate_up[0].format, format);
    ASSERT_EQ(l.expert_down[3].format, format);
    EXPECT_EQ(w->bytes,
              planned_weight_bytes(c, DType::kF32, load_time_layout(format, opts.asymmetric)));
    // moe_experts on 5 tokens, 2 experts each, against the dequantized experts.
    const int64_t t = 5, d = c.hidden_size, k = 2;
    Rng rng(9);
    std::vector<float> x(static_cast<size_t>(t * d)), out_q(x.size()), out_d(x.size());
    for (float& v : x) v = static_cast<float>(rng.uniform()) * 2.0f - 1.0f;
    std::vector<int32_t> ids = {0, 3, 1, 2, 3, 0, 2, 1, 1, 3};
    std::vector<float> weights = {0.6f, 0.4f, 0.5f, 0.5f, 0.9f, 0.1f, 0.3f, 0.7f, 0.2f, 0.8f};
    std::vector<std::vector<float>> dense_values;
    std::vector<WeightRef> gu_d, dn_d;
    for (size_t e = 0; e < l.expert_gate_up.size(); ++e) {
      for (const WeightRef* q : {&l.expert_gate_up[e], &l.expert_down[e]}) {
        dense_values.push_back(dequantized(backend, *q));
        WeightRef dense;
        dense.data = Tensor(dense_values.back().data(), DType::kF32, {q->rows(), q->cols()});
        (q == &l.expert_gate_up[e] ? gu_d : dn_d).push_back(dense);
      }
    }
    const Tensor xt(x.data(), DType::kF32, {t, d});
    const Tensor idt(ids.data(), DType::kI32, {t, k});
    const Tensor wt(weights.data(), DType::kF32, {t, k});
    backend.moe_experts(xt, idt, wt, l.expert_gate_up, l.expert_down,
                        Tensor(out_q.data(), DType::kF32, {t, d}));
    backend.moe_experts(xt, idt, wt, gu_d, dn_d, Tensor(out_d.data(), DType::kF32, {t, d}));
    double num = 0, den = 0;
    for (size_t i = 0; i < out_q.size(); ++i) {
      num += (out_q[i] - out_d[i]) * (out_q[i] - out_d[i]);
      den += out_d[i] * out_d[i];
    }
    EXPECT_GT(den, 0.0);
    EXPECT_LE(std::sqrt(num / den), 1e-6) << weight_format_name(format);
    // And the engine runs on them.
    auto engine = testing::logits_engine(c, std::move(*w), "none", backend);
    ASSERT_TRUE(engine->add_request(testing::greedy_request(0, {1, 2, 3, 4}, 4)).ok());
    const auto done = testing::run_to_completion(*engine);
    EXPECT_EQ(done.at(0).tokens.size(), 4u);
  }
}

TEST(MixtralWeights, PlannedBytesCountEveryExpert) {
  const ModelConfig c = tiny_mixtral();
  CpuBackend backend(1);
  auto w = load_weights(c, {LoadFormat::kDummy, "", 0}, backend);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->bytes, planned_weight_bytes(c, DType::kF32, WeightFormat::kDense));
  EXPECT_EQ(w->layers[0].expert_gate_up.size(), 4u);
  EXPECT_TRUE(w->layers[0].w_gate_up.data.empty());
}

}  // namespace
}  // namespace ib
