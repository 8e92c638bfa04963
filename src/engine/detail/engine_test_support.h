// Test support (engine tests only): tiny model configs built in code, engines on the CPU backend
// with randomised weights, and a driver that runs requests to completion.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/rng.h"
#include "engine/detail/reference_model.h"
#include "engine/engine.h"

namespace ib::testing {

// Relative L2 error ||got - want|| / ||want|| of two logit rows (want: float, or a double
// reference's); infinity where got holds a NaN.
template <typename Want>
double rel_l2(const std::vector<float>& got, const std::vector<Want>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    const double w = static_cast<double>(want[i]);
    num += (double{got[i]} - w) * (double{got[i]} - w);
    den += w * w;
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// 2 layers, hidden 64, 4 heads, 2 KV heads (head_dim 16), FFN 128, vocab 101.
inline ModelConfig tiny_config() {
  ModelConfig c;
  c.name = "tiny-test";
  c.family = "llama";
  c.hf_architecture = "LlamaForCausalLM";
  c.vocab_size = 101;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 256;
  c.rms_norm_eps = 1e-5;
  c.eos_token_ids = {100};
  return c;
}

// tiny_config as a Mixtral: experts experts of width f each, top-2 (the dense intermediate size
// follows f).
inline ModelConfig tiny_mixtral_config(int experts, int f) {
  ModelConfig c = tiny_config();
  c.name = "tiny-mixtral";
  c.family = "mixtral";
  c.hf_architecture = "MixtralForCausalLM";
  c.intermediate_size = f;
  c.moe.num_experts = experts;
  c.moe.experts_per_token = 2;
  c.moe.expert_intermediate_size = f;
  return c;
}

// tiny_config as a Gemma-2: three layers (local, global, local), a window of 6 and soft caps
// small enough to bite, query_pre_attn_scalar unlike head_dim (16: the scale is 24^-0.5), tied.
inline ModelConfig tiny_gemma2_config() {
  ModelConfig c = tiny_config();
  c.name = "tiny-gemma2";
  c.family = "gemma2";
  c.hf_architecture = "Gemma2ForCausalLM";
  c.num_layers = 3;
  c.rms_norm_eps = 1e-6;
  c.tie_word_embeddings = true;
  c.hidden_act = "gelu_pytorch_tanh";
  c.sliding_window = 6;
  c.alternating_sliding_window = true;
  c.attn_logit_softcapping = 2.0;
  c.final_logit_softcapping = 0.5;
  c.query_pre_attn_scalar = 24;
  c.sandwich_norms = true;
  c.scale_embeddings = true;
  return c;
}

// A tiny DeepSeek-V2: multi-head latent attention with q LoRA (kv_lora_rank 32, q_lora_rank 24,
// nope 16, rope 8, v 12), a dense first layer (F 96), then 8 routed experts of F 16 (top-3,
// group-limited over 4 groups keeping 2, routed_scaling_factor 2.5, not renormalised) and 2
// shared ones.
inline ModelConfig tiny_deepseek2_config() {
  ModelConfig c = tiny_config();
  c.name = "tiny-deepseek2";
  c.family = "deepseek_v2";
  c.hf_architecture = "DeepseekV2ForCausalLM";
  c.intermediate_size = 96;
  c.num_layers = 3;
  c.num_kv_heads = c.num_heads;
  c.moe.num_experts = 8;
  c.moe.experts_per_token = 3;
  c.moe.expert_intermediate_size = 16;
  c.moe.num_shared_experts = 2;
  c.moe.first_dense_layers = 1;
  c.moe.topk_method = "group_limited_greedy";
  c.moe.num_groups = 4;
  c.moe.topk_groups = 2;
  c.moe.routed_scaling_factor = 2.5;
  c.moe.norm_topk_prob = false;
  c.mla.kv_lora_rank = 32;
  c.mla.q_lora_rank = 24;
  c.mla.qk_nope_head_dim = 16;
  c.mla.qk_rope_head_dim = 8;
  c.mla.v_head_dim = 12;
  c.head_dim = c.mla.qk_nope_head_dim + c.mla.qk_rope_head_dim;
  return c;
}

// Dummy weights with the norms replaced by random values around 1, so that every weight matters;
// the matmul weights in quantization's format (the same model, quantized; 4-bit int: awq's
// zero points when asymmetric, else gptq's symmetric codes).
inline ModelWeights random_weights(const ModelConfig& c, Backend& backend, uint64_t seed,
                                   WeightFormat quantization = WeightFormat::kDense,
                                   bool asymmetric = false) {
  WeightOptions opts;
  opts.format = LoadFormat::kDummy;
  opts.seed = seed;
  opts.quantization = quantization;
  opts.asymmetric = asymmetric;
  auto w = load_weights(c, opts, backend);
  IB_ASSERT(w.ok(), "load_weights failed in a test");
  Rng rng(seed + 17);
  auto randomize = [&](Tensor t) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    for (float& x : v) x = 0.5f + static_cast<float>(rng.uniform());
    backend.copy_from_host(t, v.data(), DType::kF32);
  };
  randomize(w->final_norm);
  for (LayerWeights& l : w->layers) {
    randomize(l.attn_norm);
    randomize(l.ffn_norm);
  }
  return std::move(w).value();
}

struct EngineUnderTest {
  std::unique_ptr<CpuBackend> backend;
  HostWeights host;  // the same weights, for the reference
  std::unique_ptr<Engine> engine;
};

inline EngineUnderTest make_engine(const ModelConfig& c, const EngineConfig& config,
                                   uint64_t seed = 1) {
  EngineUnderTest e;
  e.backend = std::make_unique<CpuBackend>(2);
  ModelWeights w = random_weights(c, *e.backend, seed);
  e.host = copy_weights_to_host(c, w, *e.backend);
  auto engine = create_engine_with_weights(c, std::move(w), config, *e.backend);
  IB_ASSERT(engine.ok(), engine.ok() ? "" : engine.error().message.c_str());
  e.engine = std::move(engine).value();
  return e;
}

// An engine over w that keeps every sampled row's logits (blocks of 4 tokens), its matmul weights
// in the format of quantization (EngineConfig::quantization).
inline std::unique_ptr<Engine> logits_engine(const ModelConfig& c, ModelWeights w,
                                             const std::string& quantization, Backend& backend) {
  EngineConfig config;
  config.block_size = 4;
  config.capture_logits = true;
  config.quantization = quantization;
  auto engine = create_engine_with_weights(c, std::move(w), config, backend);
  IB_ASSERT(engine.ok(), "create_engine_with_weights failed");
  return std::move(engine).value();
}

struct Completion {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
  FinishReason finish = FinishReason::kNone;
};

// Steps until every request finished; checks event order (output_index 0, 1, ...).
inline std::map<uint64_t, Completion> run_to_completion(Engine& engine, int max_steps = 10000) {
  std::map<uint64_t, Completion> done;
  for (int step = 0; engine.has_unfinished(); ++step) {
    IB_ASSERT(step < max_steps, "engine did not finish");
    auto out = engine.step();
    IB_ASSERT(out.ok(), "engine step failed");
    for (TokenEvent& e : out->events) {
      Completion& c = done[e.request_id];
      EXPECT_EQ(c.finish, FinishReason::kNone) << "event after finish for " << e.request_id;
      if (e.finish != FinishReason::kAborted) {
        EXPECT_EQ(e.output_index, static_cast<int>(c.tokens.size()));
        c.tokens.push_back(e.token);
        c.logits.push_back(std::move(e.logits));
      }
      c.finish = e.finish;
    }
  }
  return done;
}

inline GenerationRequest greedy_request(uint64_t id, std::vector<int32_t> prompt, int max_tokens) {
  GenerationRequest r;
  r.id = id;
  r.prompt_tokens = std::move(prompt);
  r.max_tokens = max_tokens;
  return r;
}

inline std::vector<int32_t> random_prompt(Rng& rng, int length, int vocab) {
  std::vector<int32_t> p;
  for (int i = 0; i < length; ++i) p.push_back(static_cast<int32_t>(rng.uniform_int(0, vocab - 1)));
  return p;
}

}  // namespace ib::testing
