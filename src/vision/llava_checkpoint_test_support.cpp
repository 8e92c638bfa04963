// A tiny LLaVA checkpoint on disk (llava_checkpoint_test_support.h).
#include "vision/llava_checkpoint_test_support.h"

#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/rng.h"
#include "model/hf_config.h"
#include "model/safetensors.h"

namespace ib::llava_test {
namespace {

std::vector<float> seeded(Rng& rng, int64_t n, float center, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = center + scale * static_cast<float>(rng.uniform() * 2 - 1);
  return v;
}

std::string bytes_of(const std::vector<float>& v) {
  std::string b(v.size() * sizeof(float), '\0');
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

}  // namespace

std::string tiny_llava_config(int vocab_size, int image_token_id) {
  return R"({"architectures": ["LlavaForConditionalGeneration"], "image_token_index": )" +
         std::to_string(image_token_id) + R"(, "projector_hidden_act": "gelu",
  "text_config": {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "vocab_size": )" +
         std::to_string(vocab_size) + R"(, "max_position_embeddings": 256,
                  "rms_norm_eps": 1e-5, "eos_token_id": )" +
         std::to_string(vocab_size - 1) + R"(},
  "vision_config": {"hidden_size": 32, "image_size": 28, "intermediate_size": 48,
                    "model_type": "clip_vision_model", "num_attention_heads": 4,
                    "num_hidden_layers": 3, "patch_size": 7},
  "vision_feature_layer": -2, "vision_feature_select_strategy": "default"})";
}

TinyLlava write_tiny_llava(const std::filesystem::path& dir, std::string_view config_json,
                           bool legacy) {
  TinyLlava m;
  m.dir = dir;
  std::filesystem::create_directories(m.dir);
  std::ofstream(m.dir / "config.json") << config_json;
  m.llava = tiny_config(config_json);
  const int64_t s = m.llava.vision.image_size_px;
  std::ofstream(m.dir / "preprocessor_config.json")
      << "{\"size\": " << s << ", \"crop_size\": " << s << "}";
  auto text_config = parse_hf_config(config_json, m.dir.string());
  IB_ASSERT(text_config.ok(), text_config.ok() ? "" : text_config.error().message.c_str());
  m.vision = host_weights(m.llava, 31);
  m.vision.erase("model.language_model.norm.weight");  // host_weights' stand-in

  std::vector<SafetensorsWriteTensor> tensors;
  auto add = [&](std::string n, std::vector<int64_t> shape, const std::vector<float>& v) {
    if (legacy) {
      for (const auto& [from, to] : std::map<std::string, std::string>{
               {"model.language_model.", "language_model.model."},
               {"lm_head.", "language_model.lm_head."},
               {"model.vision_tower.", "vision_tower."},
               {"model.multi_modal_projector.", "multi_modal_projector."}}) {
        if (n.starts_with(from)) {
          n = to + n.substr(from.size());
          break;
        }
      }
    }
    tensors.push_back({n, DType::kF32, std::move(shape), bytes_of(v)});
  };
  for (const auto& [n, v] : m.vision) add(n, shape_of(n, m.llava), v);

  Rng rng(77);
  const ModelConfig& c = *text_config;
  const int64_t d = c.hidden_size, q = int64_t{c.num_heads} * c.head_dim;
  const int64_t kv = int64_t{c.num_kv_heads} * c.head_dim, f = c.intermediate_size;
  const int64_t vocab = c.vocab_size;
  const std::string lm = "model.language_model.";
  m.text.embed = seeded(rng, vocab * d, 0, 0.5f);
  add(lm + "embed_tokens.weight", {vocab, d}, m.text.embed);
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = lm + "layers." + std::to_string(l) + ".";
    testing::HostLayer h;
    h.attn_norm = seeded(rng, d, 1, 0.2f);
    h.q = seeded(rng, q * d, 0, 0.15f);
    h.k = seeded(rng, kv * d, 0, 0.15f);
    h.v = seeded(rng, kv * d, 0, 0.15f);
    h.o = seeded(rng, d * q, 0, 0.15f);
    h.ffn_norm = seeded(rng, d, 1, 0.2f);
    h.gate = seeded(rng, f * d, 0, 0.15f);
    h.up = seeded(rng, f * d, 0, 0.15f);
    h.down = seeded(rng, d * f, 0, 0.1f);
    add(p + "input_layernorm.weight", {d}, h.attn_norm);
    add(p + "self_attn.q_proj.weight", {q, d}, h.q);
    add(p + "self_attn.k_proj.weight", {kv, d}, h.k);
    add(p + "self_attn.v_proj.weight", {kv, d}, h.v);
    add(p + "self_attn.o_proj.weight", {d, q}, h.o);
    add(p + "post_attention_layernorm.weight", {d}, h.ffn_norm);
    add(p + "mlp.gate_proj.weight", {f, d}, h.gate);
    add(p + "mlp.up_proj.weight", {f, d}, h.up);
    add(p + "mlp.down_proj.weight", {d, f}, h.down);
    m.text.layers.push_back(std::move(h));
  }
  m.text.final_norm = seeded(rng, d, 1, 0.2f);
  add(lm + "norm.weight", {d}, m.text.final_norm);
  m.text.lm_head = seeded(rng, vocab * d, 0, 0.5f);
  add("lm_head.weight", {vocab, d}, m.text.lm_head);
  IB_ASSERT(write_safetensors((m.dir / "model.safetensors").string(), tensors).ok(),
            "cannot write the tiny LLaVA");
  return m;
}

}  // namespace ib::llava_test
