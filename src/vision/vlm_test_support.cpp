// Test support: a tiny language model's seeded tensors for the vision-language engine tests.
#include "vision/vlm_test_support.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fs.h"
#include "model/hf_config.h"

namespace ib::vlm_test {

std::vector<float> seeded(Rng& rng, int64_t n, float center, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = center + scale * static_cast<float>(rng.uniform() * 2 - 1);
  return v;
}

std::string bytes_of(const std::vector<float>& values) {
  std::string b(values.size() * sizeof(float), '\0');
  std::memcpy(b.data(), values.data(), b.size());
  return b;
}

double max_abs_diff(const std::vector<float>& got, const std::vector<double>& want) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
  return worst;
}

testing::HostWeights tiny_text_model(const TinyText& n, uint64_t seed, const AddTensor& add) {
  Rng rng(seed);
  testing::HostWeights text;
  const int64_t d = n.d, kv = n.kv_width, f = n.f;
  const std::string lm = "model.language_model.";
  text.embed = seeded(rng, n.vocab * d, 0, 0.5f);
  add(lm + "embed_tokens.weight", {n.vocab, d}, text.embed);
  for (int l = 0; l < n.layers; ++l) {
    const std::string p = lm + "layers." + std::to_string(l) + ".";
    testing::HostLayer h;
    h.attn_norm = seeded(rng, d, 1, 0.2f);
    h.q = seeded(rng, d * d, 0, 0.15f);
    h.k = seeded(rng, kv * d, 0, 0.15f);
    h.v = seeded(rng, kv * d, 0, 0.15f);
    if (n.qkv_bias) {
      h.q_bias = seeded(rng, d, 0, 0.3f);
      h.k_bias = seeded(rng, kv, 0, 0.3f);
      h.v_bias = seeded(rng, kv, 0, 0.3f);
      add(p + "self_attn.q_proj.bias", {d}, h.q_bias);
      add(p + "self_attn.k_proj.bias", {kv}, h.k_bias);
      add(p + "self_attn.v_proj.bias", {kv}, h.v_bias);
    }
    h.o = seeded(rng, d * d, 0, 0.15f);
    h.ffn_norm = seeded(rng, d, 1, 0.2f);
    h.gate = seeded(rng, f * d, 0, 0.15f);
    h.up = seeded(rng, f * d, 0, 0.15f);
    h.down = seeded(rng, d * f, 0, 0.1f);
    add(p + "input_layernorm.weight", {d}, h.attn_norm);
    add(p + "self_attn.q_proj.weight", {d, d}, h.q);
    add(p + "self_attn.k_proj.weight", {kv, d}, h.k);
    add(p + "self_attn.v_proj.weight", {kv, d}, h.v);
    add(p + "self_attn.o_proj.weight", {d, d}, h.o);
    add(p + "post_attention_layernorm.weight", {d}, h.ffn_norm);
    add(p + "mlp.gate_proj.weight", {f, d}, h.gate);
    add(p + "mlp.up_proj.weight", {f, d}, h.up);
    add(p + "mlp.down_proj.weight", {d, f}, h.down);
    text.layers.push_back(std::move(h));
  }
  text.final_norm = seeded(rng, d, 1, 0.2f);
  add(lm + "norm.weight", {d}, text.final_norm);
  text.lm_head = seeded(rng, n.vocab * d, 0, 0.5f);
  add("lm_head.weight", {n.vocab, d}, text.lm_head);
  return text;
}

Result<std::unique_ptr<Engine>> load_engine(const std::string& dir, Backend& backend, int chunk,
                                            int kv_blocks, int max_len, ModelConfig& model,
                                            int tensor_parallel_size) {
  IB_ASSIGN_OR_RETURN(const std::string json, read_file(dir + "/config.json"));
  IB_ASSIGN_OR_RETURN(model, parse_hf_config(json, dir));
  WeightOptions weights;
  weights.format = LoadFormat::kSafetensors;
  weights.path = dir;
  EngineConfig config;
  config.capture_logits = true;
  config.max_num_batched_tokens = chunk;
  config.max_num_seqs = 4;
  config.max_model_len = kv_blocks > 0 ? kv_blocks * 16 : max_len;
  config.cpu_kv_cache_bytes = 8 << 20;
  config.num_kv_blocks = kv_blocks;
  config.tensor_parallel_size = tensor_parallel_size;
  return create_engine(model, weights, config, backend);
}

}  // namespace ib::vlm_test
