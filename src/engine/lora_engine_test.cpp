// The engine with LoRA adapters on the CPU backend: an adapter served unmerged gives the logits
// of the base model with W + scale * B A merged in this test and run through the independent
// double-precision reference; a mixed batch (three adapters and the base) gives each request the
// logits it gets alone; --merge-lora matches unmerged serving; slots and refusals.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/detail/checkpoint_test_support.h"
#include "engine/detail/engine_test_support.h"
#include "engine/detail/lora_test_support.h"
#include "engine/lora.h"

namespace ib {
namespace {

using testing::random_adapter;
using testing::TempDir;
using testing::write_peft_adapter;

// host's module weight (out, in), as HostLayer holds it.
std::vector<float>& host_module(testing::HostLayer& l, const std::string& target) {
  if (target == "q_proj") return l.q;
  if (target == "k_proj") return l.k;
  if (target == "v_proj") return l.v;
  if (target == "o_proj") return l.o;
  if (target == "gate_proj") return l.gate;
  if (target == "up_proj") return l.up;
  return l.down;
}

// W + scale * B A for every module of p, computed here in double.
testing::HostWeights merged(const ModelConfig& c, testing::HostWeights w,
                            const testing::PeftAdapter& p) {
  for (int l = 0; l < c.num_layers; ++l) {
    for (const std::string& t : p.targets) {
      const auto& m = p.modules.at(testing::module_path(l, t));
      const auto [in, out] = testing::module_shape(c, t);
      std::vector<float>& weight = host_module(w.layers[static_cast<size_t>(l)], t);
      for (int64_t n = 0; n < out; ++n) {
        for (int64_t k = 0; k < in; ++k) {
          double delta = 0;
          for (int64_t j = 0; j < p.r; ++j) {
            delta += double{m.b[static_cast<size_t>(n * p.r + j)]} *
                     m.a[static_cast<size_t>(j * in + k)];
          }
          weight[static_cast<size_t>(n * in + k)] += static_cast<float>(p.scale() * delta);
        }
      }
    }
  }
  return w;
}

EngineConfig lora_config(int max_loras = 4, int max_rank = 8) {
  EngineConfig config;
  config.block_size = 4;
  config.capture_logits = true;
  config.enable_lora = true;
  config.max_loras = max_loras;
  config.max_lora_rank = max_rank;
  return config;
}

LoraAdapter load(const TempDir& tmp, const std::string& name, const ModelConfig& c,
                 const testing::PeftAdapter& p) {
  write_peft_adapter(tmp.path() / name, c, p);
  auto a = load_lora_adapter((tmp.path() / name).string(), c, 64);
  IB_ASSERT(a.ok(), "load_lora_adapter failed in a test");
  return std::move(a).value();
}

// testing::make_engine, with the CPU's composed reference of the fused decode ops where fused
// (on every rank: the rank group copies the setting).
testing::EngineUnderTest engine_on_cpu(const ModelConfig& c, const EngineConfig& config,
                                       uint64_t seed, bool fused) {
  testing::EngineUnderTest e;
  e.backend = std::make_unique<CpuBackend>(2);
  if (fused) e.backend->enable_fused_decode_reference();
  auto engine = create_engine_with_weights(c, testing::random_weights(c, *e.backend, seed), config,
                                           *e.backend);
  IB_ASSERT(engine.ok(), engine.ok() ? "" : engine.error().message.c_str());
  e.engine = std::move(engine).value();
  return e;
}

// How many fused ops e's backend (rank 0's) has run: 0 without the reference.
int64_t fused_ops_run(const testing::EngineUnderTest& e) {
  const auto* ref = dynamic_cast<const CpuFusedDecodeReference*>(e.backend->fused_decode_ops());
  return ref != nullptr ? ref->ops_run() : 0;
}

GenerationRequest request(uint64_t id, std::vector<int32_t> prompt, const std::string& lora) {
  GenerationRequest r = testing::greedy_request(id, std::move(prompt), 5);
  r.lora_name = lora;
  return r;
}

// Three adapters (all targets; q and v; the MLP) and the base ("") for four requests, with a
// prompt each (lengths first_len, first_len + len_step, ...).
struct FourRequests {
  std::vector<std::string> names = {"", "a", "b", "c"};
  std::vector<LoraAdapter> adapters = std::vector<LoraAdapter>(4);
  std::vector<std::vector<int32_t>> prompts;
};
FourRequests four_requests(const TempDir& tmp, const ModelConfig& c, uint64_t adapter_seed,
                           uint64_t prompt_seed, int first_len, int len_step) {
  FourRequests f;
  const std::vector<std::vector<std::string>> targets = {
      {}, testing::all_targets(), {"q_proj", "v_proj"}, {"gate_proj", "up_proj", "down_proj"}};
  for (size_t i = 1; i < 4; ++i) {
    f.adapters[i] =
        load(tmp, f.names[i], c,
             random_adapter(c, 2 + 2 * static_cast<int>(i), 8, targets[i], adapter_seed + i));
  }
  Rng rng(prompt_seed);
  for (int i = 0; i < 4; ++i)
    f.prompts.push_back(testing::random_prompt(rng, first_len + len_step * i, c.vocab_size));
  return f;
}

TEST(LoraEngine, UnmergedAdapterMatchesMergedWeightsInTheReference) {
  TempDir tmp;
  const ModelConfig c = testing::tiny_config();
  testing::EngineUnderTest e = testing::make_engine(c, lora_config(), 7);
  for (const int rank : {4, 8}) {
    auto p = random_adapter(c, rank, 2.0 * rank, testing::all_targets(), 40 + rank);
    p.use_rslora = rank == 8;
    const std::string name = "r" + std::to_string(rank);
    ASSERT_TRUE(e.engine->add_lora(name, load(tmp, name, c, p)).ok());
    const testing::HostWeights want = merged(c, e.host, p);
    Rng rng(rank);
    const std::vector<int32_t> prompt = testing::random_prompt(rng, 9, c.vocab_size);
    ASSERT_TRUE(e.engine->add_request(request(rank, prompt, name)).ok());
    const auto done = testing::run_to_completion(*e.engine);
    const testing::Completion& got = done.at(static_cast<uint64_t>(rank));
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), got.tokens.begin(), got.tokens.end());
    const auto ref = testing::reference_logits(c, want, all);
    const auto base = testing::reference_logits(c, e.host, all);
    double moved = 0;  // how far the adapter moves the logits from the base model's
    for (size_t i = 0; i < got.tokens.size(); ++i) {
      const auto& r = ref[prompt.size() - 1 + i];
      for (size_t v = 0; v < r.size(); ++v) {
        ASSERT_NEAR(got.logits[i][v], r[v], 1e-4) << "rank " << rank << " output " << i;
        moved = std::max(moved, std::fabs(r[v] - base[prompt.size() - 1 + i][v]));
      }
    }
    EXPECT_GT(moved, 0.05) << "the adapter should change the logits";
  }
}

TEST(LoraEngine, MixedBatchGivesEachRequestItsLogitsAlone) {
  TempDir tmp;
  const ModelConfig c = testing::tiny_config();
  const FourRequests f = four_requests(tmp, c, 100, 3, 5, 3);
  const auto& [names, adapters, prompts] = f;
  auto engine_with_adapters = [&](testing::EngineUnderTest& e) {
    for (size_t i = 1; i < 4; ++i) ASSERT_TRUE(e.engine->add_lora(names[i], adapters[i]).ok());
  };
  // Together: all four in one engine, admitted at once (one batch per step).
  testing::EngineUnderTest together = testing::make_engine(c, lora_config(), 11);
  engine_with_adapters(together);
  for (uint64_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(together.engine->add_request(request(i, prompts[i], names[i])).ok());
  }
  const auto mixed = testing::run_to_completion(*together.engine);
  for (uint64_t i = 0; i < 4; ++i) {
    testing::EngineUnderTest alone = testing::make_engine(c, lora_config(), 11);
    engine_with_adapters(alone);
    ASSERT_TRUE(alone.engine->add_request(request(i, prompts[i], names[i])).ok());
    const auto single = testing::run_to_completion(*alone.engine);
    EXPECT_EQ(single.at(i).tokens, mixed.at(i).tokens) << "request " << i;
    ASSERT_EQ(single.at(i).logits.size(), mixed.at(i).logits.size());
    for (size_t s = 0; s < single.at(i).logits.size(); ++s) {
      EXPECT_EQ(single.at(i).logits[s], mixed.at(i).logits[s]) << "request " << i << " step " << s;
    }
  }
  // And the adapters do differ from one another.
  EXPECT_NE(mixed.at(1).logits[0], mixed.at(0).logits[0]);
}

// The fused decode steps with adapters (the CPU's composed reference of the fused ops, which
// takes their LoRA arguments as CUDA's do; the norms' gains folded into the weights and into the
// adapters' A) give the unfused steps' tokens and logits, for a batch of three adapters and the
// base.
TEST(LoraEngine, FusedDecodeStepsGiveTheUnfusedLogits) {
  TempDir tmp;
  const ModelConfig c = testing::tiny_config();
  const FourRequests f = four_requests(tmp, c, 200, 5, 4, 2);
  const auto& [names, adapters, prompts] = f;
  auto run = [&](bool fused) {
    testing::EngineUnderTest e = engine_on_cpu(c, lora_config(), 13, fused);
    for (size_t i = 1; i < 4; ++i) IB_ASSERT(e.engine->add_lora(names[i], adapters[i]).ok(), "");
    for (uint64_t i = 0; i < 4; ++i) {
      IB_ASSERT(e.engine->add_request(request(i, prompts[i], names[i])).ok(), "");
    }
    auto done = testing::run_to_completion(*e.engine);
    return std::make_pair(std::move(done), fused_ops_run(e));
  };
  const auto [unfused, no_ops] = run(false);
  const auto [fused, ops] = run(true);
  EXPECT_EQ(no_ops, 0);
  EXPECT_GT(ops, 0) << "the decode steps should have taken the fused ops";
  for (uint64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(fused.at(i).tokens, unfused.at(i).tokens) << "request " << i;
    ASSERT_EQ(fused.at(i).logits.size(), unfused.at(i).logits.size());
    for (size_t s = 0; s < fused.at(i).logits.size(); ++s) {
      // fp32: a gain folded into a weight rounds once more than the gain applied to x.
      EXPECT_LT(testing::rel_l2(fused.at(i).logits[s], unfused.at(i).logits[s]), 1e-5)
          << "request " << i << " step " << s;
    }
  }
}

TEST(LoraEngine, MergeLoraMatchesUnmergedServing) {
  TempDir tmp;
  const ModelConfig c = testing::tiny_config();
  const auto p = random_adapter(c, 8, 16, testing::all_targets(), 77);
  write_peft_adapter(tmp.path() / "m", c, p);
  CpuBackend backend(2);
  WeightOptions opts;
  opts.format = LoadFormat::kDummy;
  opts.seed = 5;
  EngineConfig merge = lora_config();
  merge.enable_lora = false;
  merge.merge_lora = true;
  merge.lora_modules = {"m=" + (tmp.path() / "m").string()};
  auto merged_engine = create_engine(c, opts, merge, backend);
  ASSERT_TRUE(merged_engine.ok()) << merged_engine.error().message;
  EngineConfig serve = lora_config();
  serve.lora_modules = merge.lora_modules;  // loaded at startup under its name
  auto served = create_engine(c, opts, serve, backend);
  ASSERT_TRUE(served.ok()) << served.error().message;
  EXPECT_EQ((*served)->lora_names(), std::vector<std::string>{"m"});
  const std::vector<int32_t> prompt = {1, 5, 9, 33, 2, 7};
  ASSERT_TRUE((*merged_engine)->add_request(request(1, prompt, "")).ok());
  ASSERT_TRUE((*served)->add_request(request(1, prompt, "m")).ok());
  const auto a = testing::run_to_completion(**merged_engine);
  const auto b = testing::run_to_completion(**served);
  EXPECT_EQ(a.at(1).tokens, b.at(1).tokens);
  for (size_t s = 0; s < a.at(1).logits.size(); ++s) {
    for (size_t v = 0; v < a.at(1).logits[s].size(); ++v) {
      ASSERT_NEAR(a.at(1).logits[s][v], b.at(1).logits[s][v], 1e-4) << "step " << s;
    }
  }
  EXPECT_NE((*merged_engine)->weights_description().find("LoRA merged"), std::string::npos);
}

// Over tensor-parallel ranks (CPU threads): each rank serves its part of every adapter (B's rows
// for q/k/v and gate/up, A's columns for o and down; at TP 4 the two KV heads' rows replicated),
// and a batch of two adapters and the base gives one rank's tokens and logits within fp32's
// reordering of the ranks' partial sums.
TEST(LoraEngine, TensorParallelRanksServeAdaptersAsOneRank) {
  TempDir tmp;
  ModelConfig c = testing::tiny_config();
  c.vocab_size = 104;  // split by 2 and 4
  c.eos_token_ids = {103};
  const LoraAdapter a = load(tmp, "a", c, random_adapter(c, 8, 16, testing::all_targets(), 5));
  const LoraAdapter b = load(tmp, "b", c, random_adapter(c, 4, 8, {"o_proj", "down_proj"}, 6));
  // Keys: the ranks, negative where the ranks decode on the fused ops (the CPU's reference).
  std::map<int, std::map<uint64_t, testing::Completion>> runs;
  for (const int key : {1, 2, 4, -2, -4}) {
    EngineConfig config = lora_config();
    config.tensor_parallel_size = std::abs(key);
    testing::EngineUnderTest e = engine_on_cpu(c, config, 9, key < 0);
    ASSERT_TRUE(e.engine->add_lora("a", a).ok());
    ASSERT_TRUE(e.engine->add_lora("b", b).ok());
    const std::vector<int32_t> prompt = {1, 5, 9, 33, 2, 7, 60};
    for (const auto& [id, lora] : std::map<uint64_t, std::string>{{1, "a"}, {2, "b"}, {3, ""}})
      ASSERT_TRUE(e.engine->add_request(request(id, prompt, lora)).ok());
    runs[key] = testing::run_to_completion(*e.engine);
    EXPECT_EQ(fused_ops_run(e) > 0, key < 0) << "key " << key;
  }
  for (const int ranks : {2, 4, -2, -4}) {
    for (const uint64_t id : {1, 2, 3}) {
      const testing::Completion &one = runs[1].at(id), &many = runs[ranks].at(id);
      EXPECT_EQ(many.tokens, one.tokens) << ranks << " ranks, request " << id;
      ASSERT_EQ(many.logits.size(), one.logits.size());
      for (size_t s = 0; s < one.logits.size(); ++s)
        EXPECT_LT(testing::rel_l2(many.logits[s], one.logits[s]), 1e-5)
            << ranks << " ranks, request " << id;
    }
  }
  // The adapters change the logits (the check can fail).
  EXPECT_NE(runs[2].at(1).logits[0], runs[2].at(3).logits[0]);
  EXPECT_NE(runs[2].at(2).logits[0], runs[2].at(3).logits[0]);
}

TEST(LoraEngine, SlotsAndRefusals) {
  TempDir tmp;
  const ModelConfig c = testing::tiny_config();
  testing::EngineUnderTest e = testing::make_engine(c, lora_config(2, 4), 3);
  const LoraAdapter a = load(tmp, "a", c, random_adapter(c, 4, 8, {"q_proj"}, 1));
  const LoraAdapter big = load(tmp, "big", c, random_adapter(c, 8, 8, {"q_proj"}, 1));
  EXPECT_NE(e.engine->add_lora("big", big).error().message.find("exceeds --max-lora-rank 4"),
            std::string::npos);
  ASSERT_TRUE(e.engine->add_lora("x", a).ok());
  EXPECT_NE(e.engine->add_lora("x", a).error().message.find("already loaded"), std::string::npos);
  ASSERT_TRUE(e.engine->add_lora("y", a).ok());
  const Status full = e.engine->add_lora("z", a);
  ASSERT_FALSE(full.ok());
  EXPECT_NE(full.error().message.find("all --max-loras 2 slots are in use"), std::string::npos);
  EXPECT_EQ(e.engine->lora_names(), (std::vector<std::string>{"x", "y"}));
  const Status unknown = e.engine->add_request(request(1, {1, 2, 3}, "nope"));
  EXPECT_NE(unknown.error().message.find("unknown LoRA adapter 'nope'"), std::string::npos);
  ASSERT_TRUE(e.engine->add_request(request(2, {1, 2, 3}, "x")).ok());
  EXPECT_NE(e.engine->remove_lora("x").error().message.find("in use by 1 request"),
            std::string::npos);
  testing::run_to_completion(*e.engine);
  ASSERT_TRUE(e.engine->remove_lora("x").ok());
  EXPECT_FALSE(e.engine->remove_lora("x").ok());
  ASSERT_TRUE(e.engine->add_lora("z", a).ok());  // the freed slot
  // LoRA off: adding is refused with the flag to use.
  EngineConfig off = lora_config();
  off.enable_lora = false;
  testing::EngineUnderTest plain = testing::make_engine(c, off, 3);
  EXPECT_NE(plain.engine->add_lora("a", a).error().message.find("--enable-lora"),
            std::string::npos);
}

TEST(LoraEngine, MergeLoraRefusesQuantizedWeights) {
  TempDir tmp;
  const ModelConfig c = testing::tiny_config();
  write_peft_adapter(tmp.path() / "m", c, random_adapter(c, 4, 8, {"q_proj"}, 1));
  CpuBackend backend(2);
  WeightOptions opts;
  opts.format = LoadFormat::kDummy;
  EngineConfig merge;
  merge.merge_lora = true;
  merge.quantization = "int8";
  merge.lora_modules = {"m=" + (tmp.path() / "m").string()};
  auto engine = create_engine(c, opts, merge, backend);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.error().message.find("dense weights only"), std::string::npos)
      << engine.error().message;
}

// w (N, K) as the backend computes with it: out (K, N) = I (K, K) @ w^T, transposed here. Exact
// for weights whose matmul leaves the activations unquantized (NF4 is W4A16).
std::vector<float> decoded(Backend& backend, const WeightRef& w, int64_t row, int64_t rows) {
  const int64_t k = w.cols(), n = w.rows();
  auto x_buf = backend.alloc(static_cast<size_t>(k * k * 4), MemoryTag::kOther);
  auto out_buf = backend.alloc(static_cast<size_t>(k * n * 4), MemoryTag::kOther);
  IB_ASSERT(x_buf.ok() && out_buf.ok(), "test allocation failed");
  std::vector<float> identity(static_cast<size_t>(k * k), 0.0f);
  for (int64_t i = 0; i < k; ++i) identity[static_cast<size_t>(i * k + i)] = 1.0f;
  const Tensor x = x_buf->view(DType::kF32, {k, k});
  const Tensor out = out_buf->view(DType::kF32, {k, n});
  backend.copy_from_host(x, identity.data(), DType::kF32);
  backend.matmul(x, w, nullptr, out);
  const std::vector<float> t = testing::host(backend, out);  // (K, N)
  std::vector<float> w_rows(static_cast<size_t>(rows * k));  // (rows, K)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      w_rows[static_cast<size_t>(r * k + c)] = t[static_cast<size_t>(c * n + row + r)];
    }
  }
  return w_rows;
}

// QLoRA: an NF4 base serving an adapter gives the reference's logits over the NF4 weights as the
// backend decodes them, with W + scale * B A merged in this test.
TEST(LoraEngine, Nf4BaseWithAdapterMatchesDecodedWeightsPlusAdapter) {
  TempDir tmp;
  const ModelConfig c = testing::tiny_config();
  CpuBackend backend(2);
  ModelWeights w = testing::random_weights(c, backend, 9, WeightFormat::kNf4);
  testing::HostWeights host;
  host.embed = testing::host(backend, w.embed);
  host.final_norm = testing::host(backend, w.final_norm);
  host.lm_head = testing::host(backend, w.lm_head.data);
  const int64_t q = int64_t{c.num_heads} * c.head_dim, kv = int64_t{c.num_kv_heads} * c.head_dim;
  const int64_t f = c.intermediate_size, d = c.hidden_size;
  for (const LayerWeights& l : w.layers) {
    ASSERT_EQ(l.wqkv.format, WeightFormat::kNf4);
    testing::HostLayer h;
    h.attn_norm = testing::host(backend, l.attn_norm);
    h.ffn_norm = testing::host(backend, l.ffn_norm);
    h.q = decoded(backend, l.wqkv, 0, q);
    h.k = decoded(backend, l.wqkv, q, kv);
    h.v = decoded(backend, l.wqkv, q + kv, kv);
    h.o = decoded(backend, l.wo, 0, d);
    h.gate = decoded(backend, l.w_gate_up, 0, f);
    h.up = decoded(backend, l.w_gate_up, f, f);
    h.down = decoded(backend, l.w_down, 0, d);
    host.layers.push_back(std::move(h));
  }
  EngineConfig config = lora_config();
  config.quantization = "nf4";
  auto engine = create_engine_with_weights(c, std::move(w), config, backend);
  ASSERT_TRUE(engine.ok()) << engine.error().message;
  const auto p = random_adapter(c, 8, 16, testing::all_targets(), 21);
  ASSERT_TRUE((*engine)->add_lora("q", load(tmp, "q", c, p)).ok());
  const std::vector<int32_t> prompt = {3, 14, 15, 92, 65, 35};
  ASSERT_TRUE((*engine)->add_request(request(1, prompt, "q")).ok());
  const auto done = testing::run_to_completion(**engine);
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), done.at(1).tokens.begin(), done.at(1).tokens.end());
  const auto ref = testing::reference_logits(c, merged(c, host, p), all);
  for (size_t i = 0; i < done.at(1).tokens.size(); ++i) {
    for (size_t v = 0; v < ref[prompt.size() - 1 + i].size(); ++v) {
      ASSERT_NEAR(done.at(1).logits[i][v], ref[prompt.size() - 1 + i][v], 1e-4) << "output " << i;
    }
  }
}

TEST(LoraEngine, ConfigValidation) {
  EngineConfig config = lora_config(4, 8);
  config.max_cpu_loras = 2;
  EXPECT_NE(
      config.validate().error().message.find("--max-cpu-loras 2 must be at least --max-loras 4"),
      std::string::npos);
  config.max_cpu_loras = 0;
  config.max_lora_rank = 0;
  EXPECT_FALSE(config.validate().ok());
  config.max_lora_rank = 8;
  config.lora_modules = {"a=/x", "b=/y"};
  config.max_loras = 1;
  EXPECT_NE(config.validate().error().message.find("raise --max-loras to at least 2"),
            std::string::npos);
  config.enable_lora = false;
  EXPECT_NE(config.validate().error().message.find("--lora-modules needs --enable-lora"),
            std::string::npos);
  config.merge_lora = true;
  EXPECT_NE(config.validate().error().message.find("exactly one"), std::string::npos);
  config.lora_modules = {"bad"};
  EXPECT_NE(config.validate().error().message.find("expected name=path"), std::string::npos);
}

}  // namespace
}  // namespace ib
