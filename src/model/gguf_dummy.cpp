// A ModelConfig as GGUF metadata, and dummy GGUF files with seeded weights (gguf_model.h).
#include <algorithm>
#include <cctype>
#include <cmath>

#include <fmt/format.h>

#include "core/rng.h"
#include "core/thread_pool.h"
#include "model/gguf_blocks.h"
#include "model/gguf_model.h"

namespace ib {
namespace {

using V = GgufValueType;

Result<std::string> gguf_architecture(const ModelConfig& c) {
  if (c.family == "llama" || c.family == "mistral") return std::string("llama");
  if (c.family == "qwen2" || c.family == "phi3") return c.family;
  return user_error(
      fmt::format("model '{}' is a {} model; GGUF files are written for llama, "
                  "mistral, qwen2 and phi3",
                  c.name, c.family));
}

GgufMetadata u32(std::string key, int v) {
  return {std::move(key), GgufValue::of_uint(V::kU32, static_cast<uint64_t>(v))};
}
GgufMetadata f32(std::string key, double v) {
  return {std::move(key), GgufValue::of_float(V::kF32, v)};
}

struct DummyTensor {
  std::string name;
  int layer = -1;
  std::vector<int64_t> dims;  // ne[0] first
  bool matrix = true;         // in matmul_type; else F32 (norms: ones, biases)
  bool norm = false;
};

// llama.cpp's tensors of a dense decoder; GGUF dims are {in, out}.
std::vector<DummyTensor> dummy_tensors(const ModelConfig& c, const std::string& arch) {
  const int64_t d = c.hidden_size;
  const int64_t q = int64_t{c.num_heads} * c.head_dim;
  const int64_t kv = int64_t{c.num_kv_heads} * c.head_dim;
  const int64_t f = c.intermediate_size;
  std::vector<DummyTensor> t = {{"token_embd.weight", -1, {d, c.vocab_size}}};
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    t.push_back({p + "attn_norm.weight", -1, {d}, false, true});
    if (arch == "phi3") {
      t.push_back({p + "attn_qkv.weight", -1, {d, q + 2 * kv}});
    } else {
      t.push_back({p + "attn_q.weight", -1, {d, q}});
      t.push_back({p + "attn_k.weight", -1, {d, kv}});
      t.push_back({p + "attn_v.weight", -1, {d, kv}});
    }
    if (c.attention_bias) {
      t.push_back({p + "attn_q.bias", -1, {q}, false});
      t.push_back({p + "attn_k.bias", -1, {kv}, false});
      t.push_back({p + "attn_v.bias", -1, {kv}, false});
    }
    t.push_back({p + "attn_output.weight", -1, {q, d}});
    t.push_back({p + "ffn_norm.weight", -1, {d}, false, true});
    if (arch == "phi3") {
      t.push_back({p + "ffn_up.weight", -1, {d, 2 * f}});  // gate and up fused
    } else {
      t.push_back({p + "ffn_gate.weight", -1, {d, f}});
      t.push_back({p + "ffn_up.weight", -1, {d, f}});
    }
    t.push_back({p + "ffn_down.weight", -1, {f, d}});
  }
  for (DummyTensor& x : t) {  // "blk.L.": its layer
    if (x.name.starts_with("blk.")) x.layer = std::stoi(x.name.substr(4));
  }
  t.push_back({"output_norm.weight", -1, {d}, false, true});
  if (!c.tie_word_embeddings) t.push_back({"output.weight", -1, {d, c.vocab_size}});
  return t;
}

}  // namespace

Result<std::vector<GgufMetadata>> gguf_metadata_of(const ModelConfig& c) {
  IB_ASSIGN_OR_RETURN(const std::string a, gguf_architecture(c));
  if (c.rope_scaling.type != "none" && c.rope_scaling.type != "linear" &&
      c.rope_scaling.type != "yarn") {
    return user_error(
        fmt::format("model '{}' has {} RoPE scaling, which GGUF metadata cannot "
                    "hold (llama.cpp stores it as a rope_freqs tensor)",
                    c.name, c.rope_scaling.type));
  }
  std::vector<GgufMetadata> m = {
      {"general.architecture", GgufValue::of_string(a)},
      {"general.name", GgufValue::of_string(c.name)},
      u32(a + ".context_length", c.max_position_embeddings),
      u32(a + ".embedding_length", c.hidden_size),
      u32(a + ".block_count", c.num_layers),
      u32(a + ".feed_forward_length", c.intermediate_size),
      u32(a + ".attention.head_count", c.num_heads),
      u32(a + ".attention.head_count_kv", c.num_kv_heads),
      u32(a + ".attention.key_length", c.head_dim),
      u32(a + ".attention.value_length", c.head_dim),
      f32(a + ".rope.freq_base", c.rope_theta),
      u32(a + ".rope.dimension_count",
          static_cast<int>(c.head_dim * c.partial_rotary_factor + 0.5)),
      f32(a + ".attention.layer_norm_rms_epsilon", c.rms_norm_eps),
      u32(a + ".vocab_size", c.vocab_size),
  };
  if (c.sliding_window > 0) m.push_back(u32(a + ".attention.sliding_window", c.sliding_window));
  if (c.rope_scaling.type != "none") {
    m.push_back({a + ".rope.scaling.type", GgufValue::of_string(c.rope_scaling.type)});
    m.push_back(f32(a + ".rope.scaling.factor", c.rope_scaling.factor));
    if (c.rope_scaling.original_max_position_embeddings > 0) {
      m.push_back(u32(a + ".rope.scaling.original_context_length",
                      c.rope_scaling.original_max_position_embeddings));
    }
  }
  if (c.bos_token_id >= 0) m.push_back(u32("tokenizer.ggml.bos_token_id", c.bos_token_id));
  if (!c.eos_token_ids.empty()) {
    m.push_back(u32("tokenizer.ggml.eos_token_id", c.eos_token_ids.front()));
  }
  return m;
}

GgmlType GgufTypeMix::type_of(std::string_view tensor, int layer, int num_layers) const {
  if (!k_m) return base;
  if (tensor == "output.weight") return GgmlType::kQ6_K;
  const bool more_bits =
      layer < num_layers / 8 || layer >= 7 * num_layers / 8 || (layer - num_layers / 8) % 3 == 2;
  if (more_bits && (tensor.ends_with("attn_v.weight") || tensor.ends_with("ffn_down.weight")))
    return GgmlType::kQ6_K;
  return base;
}

Result<GgufTypeMix> gguf_type_mix(std::string_view name) {
  const std::string upper = [&] {
    std::string u(name);
    for (char& ch : u) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    return u;
  }();
  if (upper == "Q4_K_M") return GgufTypeMix{GgmlType::kQ4_K, true};
  if (upper == "Q5_K_M") return GgufTypeMix{GgmlType::kQ5_K, true};
  if (const auto t = ggml_type_of_name(name)) return GgufTypeMix{*t, false};
  return user_error(fmt::format(
      "'{}' is not a GGUF type or mix; use Q4_K_M, Q5_K_M, F32, F16, BF16, Q8_0, Q4_0, Q4_K, "
      "Q5_K or Q6_K",
      name));
}

Status write_dummy_gguf(const std::string& path, const ModelConfig& config, GgmlType matmul_type,
                        uint64_t seed) {
  return write_dummy_gguf(path, config, GgufTypeMix{matmul_type, false}, seed);
}

Status write_dummy_gguf(const std::string& path, const ModelConfig& config, const GgufTypeMix& mix,
                        uint64_t seed, int threads) {
  IB_ASSIGN_OR_RETURN(const std::vector<GgufMetadata> metadata, gguf_metadata_of(config));
  IB_ASSIGN_OR_RETURN(const std::string arch, gguf_architecture(config));
  std::vector<DummyTensor> dummies = dummy_tensors(config, arch);
  std::vector<GgufWriteTensor> tensors(dummies.size());
  for (size_t i = 0; i < dummies.size(); ++i) {
    const DummyTensor& t = dummies[i];
    const GgmlType type =
        t.matrix ? mix.type_of(t.name, t.layer, config.num_layers) : GgmlType::kF32;
    const int64_t block = ggml_type_info(type).block_elems;
    if (t.dims[0] % block != 0) {
      return user_error(fmt::format(
          "cannot write {} as {}: its rows have {} elements, not whole {}-element blocks; "
          "choose another type",
          t.name, ggml_type_info(type).name, t.dims[0], block));
    }
    tensors[i] = {t.name, type, t.dims, {}};
  }
  // Each tensor's values from its own stream, so the file does not depend on the thread count.
  std::vector<Status> status(dummies.size(), Ok{});
  ThreadPool pool(std::max(1, threads));
  pool.parallel_for(static_cast<int64_t>(dummies.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const DummyTensor& t = dummies[static_cast<size_t>(i)];
      int64_t n = 1;
      for (const int64_t dim : t.dims) n *= dim;
      std::vector<float> values(static_cast<size_t>(n), 1.0f);
      // As the engine's dummy weights (model_weights.h): the embedding uniform in [-1, 1), every
      // other matrix in [-a, a) with a = sqrt(3 / fan_in), so that each layer keeps the scale of
      // its input and a deep model's logits stay as sensitive as a trained one's (a fixed scale
      // grows the residual stream layer by layer); biases in [-0.05, 0.05).
      const float a = !t.matrix ? 0.05f
                      : t.name == "token_embd.weight"
                          ? 1.0f
                          : std::sqrt(3.0f / static_cast<float>(t.dims[0]));
      if (!t.norm) {
        for (size_t j = 0; j < values.size(); ++j) {
          values[j] = (counter_uniform(seed, static_cast<uint64_t>(i), j) - 0.5f) * 2.0f * a;
        }
      }
      auto bytes = quantize_ggml(tensors[static_cast<size_t>(i)].type, values);
      if (!bytes.ok()) {
        status[static_cast<size_t>(i)] = bytes.error();
        continue;
      }
      tensors[static_cast<size_t>(i)].bytes = std::move(bytes).value();
    }
  });
  for (const Status& st : status) IB_TRY(st);
  return write_gguf(path, metadata, tensors);
}

}  // namespace ib
