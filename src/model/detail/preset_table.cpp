// Architecture presets, each transcribed from the model's public config.json on the Hugging Face
// Hub (the repo named in hf_repo_id); fields a config.json leaves out take the transformers class
// default (e.g. Gemma-2's tied embeddings). hf_config_test.cpp parses the published files and
// checks they reproduce these presets exactly.
#include "model/detail/preset_table.h"

#include <tuple>

namespace ib::detail {
namespace {

// The shape fields every config.json has.
struct Dims {
  int vocab = 0;
  int hidden = 0;
  int intermediate = 0;
  int layers = 0;
  int heads = 0;
  int kv_heads = 0;
  int max_positions = 0;
};

struct Arch {
  const char* family;
  const char* hf_architecture;
};
constexpr Arch kLlama{"llama", "LlamaForCausalLM"};
constexpr Arch kMistral{"mistral", "MistralForCausalLM"};
constexpr Arch kQwen2{"qwen2", "Qwen2ForCausalLM"};
constexpr Arch kPhi3{"phi3", "Phi3ForCausalLM"};
constexpr Arch kGemma2{"gemma2", "Gemma2ForCausalLM"};
constexpr Arch kMixtral{"mixtral", "MixtralForCausalLM"};
constexpr Arch kDeepseekV2{"deepseek_v2", "DeepseekV2ForCausalLM"};

ModelConfig make(const char* name, Arch arch, const char* repo, Dims d) {
  ModelConfig c;
  c.name = name;
  c.family = arch.family;
  c.hf_architecture = arch.hf_architecture;
  c.hf_repo_id = repo;
  c.vocab_size = d.vocab;
  c.hidden_size = d.hidden;
  c.intermediate_size = d.intermediate;
  c.num_layers = d.layers;
  c.num_heads = d.heads;
  c.num_kv_heads = d.kv_heads;
  c.head_dim = d.hidden / d.heads;
  c.max_position_embeddings = d.max_positions;
  return c;
}

// llama2.c's TinyStories models (stories15M / stories110M): fp32, tied classifier, 32000-token
// Llama-2 vocabulary. max_position_embeddings is raised from 256 to 1024 so default workloads fit.
std::vector<PresetEntry> tiny_presets() {
  ModelConfig t15 = make("tiny-15m", kLlama, "", {32000, 288, 768, 6, 6, 6, 1024});
  ModelConfig t110 = make("tiny-110m", kLlama, "", {32000, 768, 2048, 12, 12, 12, 1024});
  for (ModelConfig* c : {&t15, &t110}) {
    c->tie_word_embeddings = true;
    c->bos_token_id = 1;
    c->eos_token_ids = {2};
    c->torch_dtype = DType::kF32;
  }
  return {{t15, {"stories15m"}}, {t110, {"stories110m"}}};
}

std::vector<PresetEntry> llama_presets() {
  std::vector<PresetEntry> out;
  for (auto [name, repo, d] : {
           std::tuple{"llama-2-7b", "meta-llama/Llama-2-7b-hf",
                      Dims{32000, 4096, 11008, 32, 32, 32, 4096}},
           std::tuple{"llama-2-13b", "meta-llama/Llama-2-13b-hf",
                      Dims{32000, 5120, 13824, 40, 40, 40, 4096}},
       }) {
    ModelConfig c = make(name, kLlama, repo, d);
    c.bos_token_id = 1;
    c.eos_token_ids = {2};
    c.torch_dtype = DType::kF16;
    out.push_back({c, {}});
  }
  for (auto [name, repo, d] : {
           std::tuple{"llama-3-8b", "meta-llama/Meta-Llama-3-8B",
                      Dims{128256, 4096, 14336, 32, 32, 8, 8192}},
           std::tuple{"llama-3-70b", "meta-llama/Meta-Llama-3-70B",
                      Dims{128256, 8192, 28672, 80, 64, 8, 8192}},
           std::tuple{"llama-3.2-1b", "meta-llama/Llama-3.2-1B",
                      Dims{128256, 2048, 8192, 16, 32, 8, 131072}},
       }) {
    ModelConfig c = make(name, kLlama, repo, d);
    c.rope_theta = 500000.0;
    c.bos_token_id = 128000;
    c.eos_token_ids = {128001};
    out.push_back({c, {}});
  }
  ModelConfig& l32 = out.back().config;  // Llama-3.2-1B: llama3 rope scaling, tied embeddings
  l32.rope_scaling = {"llama3", 32.0, 1.0, 4.0, 8192};
  l32.tie_word_embeddings = true;

  ModelConfig yi = make("yi-34b", kLlama, "01-ai/Yi-34B", {64000, 7168, 20480, 60, 56, 8, 4096});
  yi.rope_theta = 5000000.0;
  yi.bos_token_id = 1;
  yi.eos_token_ids = {2};
  out.push_back({yi, {}});
  return out;
}

std::vector<PresetEntry> qwen2_presets() {
  std::vector<PresetEntry> out;
  for (auto [name, repo, d, eps, tie] : {
           std::tuple{"qwen2-0.5b", "Qwen/Qwen2-0.5B", Dims{151936, 896, 4864, 24, 14, 2, 131072},
                      1e-6, true},
           std::tuple{"qwen2-7b", "Qwen/Qwen2-7B", Dims{152064, 3584, 18944, 28, 28, 4, 131072},
                      1e-6, false},
           std::tuple{"qwen2-72b", "Qwen/Qwen2-72B", Dims{152064, 8192, 29568, 80, 64, 8, 131072},
                      1e-5, false},
       }) {
    ModelConfig c = make(name, kQwen2, repo, d);
    c.rope_theta = 1000000.0;
    c.rms_norm_eps = eps;
    c.tie_word_embeddings = tie;
    c.attention_bias = true;  // Qwen2 q/k/v projections carry biases
    c.sliding_window = 0;     // use_sliding_window: false
    c.bos_token_id = 151643;
    c.eos_token_ids = {151643};
    out.push_back({c, {}});
  }
  return out;
}

std::vector<PresetEntry> mistral_phi_presets() {
  ModelConfig m03 = make("mistral-7b", kMistral, "mistralai/Mistral-7B-v0.3",
                         {32768, 4096, 14336, 32, 32, 8, 32768});
  m03.rope_theta = 1000000.0;
  ModelConfig m01 = make("mistral-7b-v0.1", kMistral, "mistralai/Mistral-7B-v0.1",
                         {32000, 4096, 14336, 32, 32, 8, 32768});
  m01.sliding_window = 4096;
  for (ModelConfig* c : {&m03, &m01}) {
    c->bos_token_id = 1;
    c->eos_token_ids = {2};
  }
  ModelConfig mini = make("phi-3-mini-4k", kPhi3, "microsoft/Phi-3-mini-4k-instruct",
                          {32064, 3072, 8192, 32, 32, 32, 4096});
  ModelConfig medium = make("phi-3-medium-4k", kPhi3, "microsoft/Phi-3-medium-4k-instruct",
                            {32064, 5120, 17920, 40, 40, 10, 4096});
  for (ModelConfig* c : {&mini, &medium}) {
    c->sliding_window = 2047;
    c->bos_token_id = 1;
    c->eos_token_ids = {32000};
  }
  return {{m03, {"mistral-7b-v0.3"}}, {m01, {}}, {mini, {}}, {medium, {"phi-3-medium"}}};
}

std::vector<PresetEntry> gemma2_presets() {
  std::vector<PresetEntry> out;
  for (auto [name, repo, d, head_dim, scalar] : {
           std::tuple{"gemma-2-9b", "google/gemma-2-9b", Dims{256000, 3584, 14336, 42, 16, 8, 8192},
                      256, 256.0},
           std::tuple{"gemma-2-27b", "google/gemma-2-27b",
                      Dims{256000, 4608, 36864, 46, 32, 16, 8192}, 128, 144.0},
       }) {
    ModelConfig c = make(name, kGemma2, repo, d);
    c.head_dim = head_dim;
    c.rms_norm_eps = 1e-6;
    c.tie_word_embeddings = true;
    c.sliding_window = 4096;
    c.hidden_act = "gelu_pytorch_tanh";
    c.bos_token_id = 2;
    c.eos_token_ids = {1};
    c.torch_dtype = DType::kF32;
    c.attn_logit_softcapping = 50.0;
    c.final_logit_softcapping = 30.0;
    c.query_pre_attn_scalar = scalar;
    c.sandwich_norms = true;
    c.scale_embeddings = true;
    c.alternating_sliding_window = true;
    out.push_back({c, {}});
  }
  return out;
}

std::vector<PresetEntry> moe_presets() {
  ModelConfig x7 = make("mixtral-8x7b", kMixtral, "mistralai/Mixtral-8x7B-v0.1",
                        {32000, 4096, 14336, 32, 32, 8, 32768});
  x7.moe = {8, 2, 14336, 0, 0};
  ModelConfig x22 = make("mixtral-8x22b", kMixtral, "mistralai/Mixtral-8x22B-v0.1",
                         {32768, 6144, 16384, 56, 48, 8, 65536});
  x22.moe = {8, 2, 16384, 0, 0};
  for (ModelConfig* c : {&x7, &x22}) {
    c->rope_theta = 1000000.0;
    c->bos_token_id = 1;
    c->eos_token_ids = {2};
  }

  ModelConfig ds = make("deepseek-v2-lite", kDeepseekV2, "deepseek-ai/DeepSeek-V2-Lite",
                        {102400, 2048, 10944, 27, 16, 16, 163840});
  ds.moe = {64, 6, 1408, 2, 1};
  ds.mla = {512, 0, 128, 64, 128};
  ds.head_dim = ds.mla.qk_nope_head_dim + ds.mla.qk_rope_head_dim;  // query/key head size
  ds.rms_norm_eps = 1e-6;
  ds.rope_scaling.type = "yarn";
  ds.rope_scaling.factor = 40.0;
  ds.rope_scaling.original_max_position_embeddings = 4096;
  ds.rope_scaling.mscale = 0.707;
  ds.rope_scaling.mscale_all_dim = 0.707;
  ds.moe.scoring_func = "softmax";
  ds.moe.topk_method = "greedy";
  ds.moe.norm_topk_prob = false;
  ds.moe.routed_scaling_factor = 1.0;
  ds.moe.num_groups = 1;
  ds.moe.topk_groups = 1;
  ds.bos_token_id = 100000;
  ds.eos_token_ids = {100001};
  // DeepSeek-V2: q LoRA (1536), 160 routed experts top-6 from the 3 best of 8 groups, scaled 16x.
  ModelConfig v2 = ds;
  v2.name = "deepseek-v2";
  v2.hf_repo_id = "deepseek-ai/DeepSeek-V2";
  v2.hidden_size = 5120;
  v2.intermediate_size = 12288;
  v2.num_layers = 60;
  v2.num_heads = 128;
  v2.num_kv_heads = 128;
  v2.moe = ds.moe;
  v2.moe.num_experts = 160;
  v2.moe.expert_intermediate_size = 1536;
  v2.moe.topk_method = "group_limited_greedy";
  v2.moe.routed_scaling_factor = 16.0;
  v2.moe.num_groups = 8;
  v2.moe.topk_groups = 3;
  v2.mla.q_lora_rank = 1536;
  return {{x7, {}}, {x22, {}}, {ds, {}}, {v2, {}}};
}

}  // namespace

std::vector<PresetEntry> preset_table() {
  std::vector<PresetEntry> all;
  for (auto&& group : {tiny_presets(), llama_presets(), qwen2_presets(), mistral_phi_presets(),
                       gemma2_presets(), moe_presets()}) {
    all.insert(all.end(), group.begin(), group.end());
  }
  return all;
}

}  // namespace ib::detail
