// Test support (engine tests only): temporary directories and HF-named safetensors tensors of a
// model's host weights, in the split layout (Llama, Mistral, Qwen2; Mixtral's experts where the
// layers hold them) or Phi-3's fused one, written here from transformers' module names,
// independently of the engine's schemas.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "engine/detail/reference_model.h"
#include "model/safetensors.h"

namespace ib::testing {

class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            ("ib_weights_" + std::to_string(::getpid()) + "_" + info->name());
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline std::vector<float> host(Backend& b, const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  b.copy_to_host(t, v.data());
  return v;
}

// Phi3ForCausalLM saves self_attn.qkv_proj (q, k, v rows) and mlp.gate_up_proj (gate, up rows).
enum class CheckpointLayout { kSplit, kPhi3Fused };

inline std::vector<float> concat(std::initializer_list<const std::vector<float>*> parts) {
  std::vector<float> out;
  for (const auto* p : parts) out.insert(out.end(), p->begin(), p->end());
  return out;
}

// HF-named tensors of host weights, as fp32 or rounded to bf16.
inline std::vector<SafetensorsWriteTensor> hf_tensors(
    const ModelConfig& c, const HostWeights& w, DType dtype,
    CheckpointLayout layout = CheckpointLayout::kSplit) {
  std::vector<SafetensorsWriteTensor> out;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
    std::string bytes;
    if (dtype == DType::kF32) {
      bytes.assign(reinterpret_cast<const char*>(v.data()), v.size() * 4);
    } else {
      for (float x : v) {
        const uint16_t b = f32_to_bf16_bits(x);
        bytes.append(reinterpret_cast<const char*>(&b), 2);
      }
    }
    out.push_back({name, dtype, std::move(shape), std::move(bytes)});
  };
  const int64_t d = c.hidden_size, q = int64_t{c.num_heads} * c.head_dim;
  const int64_t kv = int64_t{c.num_kv_heads} * c.head_dim, f = c.intermediate_size,
                v = c.vocab_size;
  add("model.embed_tokens.weight", {v, d}, w.embed);
  add("model.norm.weight", {d}, w.final_norm);
  if (!c.tie_word_embeddings) add("lm_head.weight", {v, d}, w.lm_head);
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const auto& l = w.layers[i];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {d}, l.attn_norm);
    add(p + "post_attention_layernorm.weight", {d}, l.ffn_norm);
    if (layout == CheckpointLayout::kPhi3Fused) {
      add(p + "self_attn.qkv_proj.weight", {q + 2 * kv, d}, concat({&l.q, &l.k, &l.v}));
      add(p + "mlp.gate_up_proj.weight", {2 * f, d}, concat({&l.gate, &l.up}));
    } else {
      add(p + "self_attn.q_proj.weight", {q, d}, l.q);
      add(p + "self_attn.k_proj.weight", {kv, d}, l.k);
      add(p + "self_attn.v_proj.weight", {kv, d}, l.v);
      if (c.attention_bias) {
        add(p + "self_attn.q_proj.bias", {q}, l.q_bias);
        add(p + "self_attn.k_proj.bias", {kv}, l.k_bias);
        add(p + "self_attn.v_proj.bias", {kv}, l.v_bias);
      }
      if (l.router.empty()) {
        add(p + "mlp.gate_proj.weight", {f, d}, l.gate);
        add(p + "mlp.up_proj.weight", {f, d}, l.up);
      }
    }
    add(p + "self_attn.o_proj.weight", {d, q}, l.o);
    if (!l.router.empty()) {  // MixtralSparseMoeBlock: gate (the router), experts.J.w1/w2/w3
      const int64_t fe = c.moe.expert_intermediate_size;
      add(p + "block_sparse_moe.gate.weight", {c.moe.num_experts, d}, l.router);
      for (size_t e = 0; e < l.expert_gate.size(); ++e) {
        const std::string x = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
        add(x + "w1.weight", {fe, d}, l.expert_gate[e]);
        add(x + "w2.weight", {d, fe}, l.expert_down[e]);
        add(x + "w3.weight", {fe, d}, l.expert_up[e]);
      }
      continue;
    }
    add(p + "mlp.down_proj.weight", {d, f}, l.down);
  }
  return out;
}

}  // namespace ib::testing
