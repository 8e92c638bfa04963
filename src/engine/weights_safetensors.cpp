// Safetensors weights with HF Llama/Qwen2/Mistral tensor names, fused into the engine's layout
// (q/k/v rows into wqkv, gate/up rows into w_gate_up) and converted to the backend dtype.
#include <string>
#include <vector>

#include "engine/detail/weight_storage.h"
#include "model/safetensors.h"

namespace ib::detail {
namespace {

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

class Loader {
 public:
  Loader(const ModelConfig& config, const SafetensorsCheckpoint& ckpt, Backend& backend)
      : config_(config), ckpt_(ckpt), backend_(backend) {}

  // Copies tensor name, which must have exactly shape, into dst (same element count).
  Status copy(const std::string& name, std::vector<int64_t> shape, Tensor dst) {
    if (!ckpt_.contains(name)) {
      const auto files = ckpt_.files();
      return user_error("safetensors: tensor '" + name + "' is missing from " +
                        (files.size() == 1 ? files[0] : std::to_string(files.size()) + " files") +
                        "; is this a checkpoint of model '" + config_.name + "' (" +
                        config_.family + ")?");
    }
    IB_ASSIGN_OR_RETURN(HostTensorRef ref, ckpt_.get(name));
    if (ref.shape != shape) {
      return user_error("safetensors: tensor '" + name + "' has shape " + shape_string(ref.shape) +
                        " but model '" + config_.name + "' expects " + shape_string(shape) +
                        "; the config.json does not match these weights");
    }
    IB_ASSERT(ref.numel() == dst.numel(), "weight view size differs from the checked shape");
    backend_.copy_from_host(dst, ref.data, ref.dtype);
    return Ok{};
  }

 private:
  const ModelConfig& config_;
  const SafetensorsCheckpoint& ckpt_;
  Backend& backend_;
};

}  // namespace

Status load_safetensors(const ModelConfig& c, const std::string& path, Backend& backend,
                        ModelWeights& w) {
  IB_ASSIGN_OR_RETURN(auto ckpt, SafetensorsCheckpoint::open(path));
  Loader load(c, *ckpt, backend);
  const int64_t d = c.hidden_size;
  const int64_t q = int64_t{c.num_heads} * c.head_dim;
  const int64_t kv = int64_t{c.num_kv_heads} * c.head_dim;
  const int64_t f = c.intermediate_size;
  const int64_t v = c.vocab_size;

  IB_TRY(load.copy("model.embed_tokens.weight", {v, d}, w.embed));
  IB_TRY(load.copy("model.norm.weight", {d}, w.final_norm));
  if (!c.tie_word_embeddings) IB_TRY(load.copy("lm_head.weight", {v, d}, w.lm_head));
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerWeights& lw = w.layers[static_cast<size_t>(l)];
    IB_TRY(load.copy(p + "input_layernorm.weight", {d}, lw.attn_norm));
    IB_TRY(load.copy(p + "post_attention_layernorm.weight", {d}, lw.ffn_norm));
    IB_TRY(load.copy(p + "self_attn.q_proj.weight", {q, d}, lw.wqkv.slice_rows(0, q)));
    IB_TRY(load.copy(p + "self_attn.k_proj.weight", {kv, d}, lw.wqkv.slice_rows(q, kv)));
    IB_TRY(load.copy(p + "self_attn.v_proj.weight", {kv, d}, lw.wqkv.slice_rows(q + kv, kv)));
    if (c.attention_bias) {
      const Tensor b = lw.bqkv.reshaped({q + 2 * kv, 1});  // rows = elements, to slice
      IB_TRY(load.copy(p + "self_attn.q_proj.bias", {q}, b.slice_rows(0, q)));
      IB_TRY(load.copy(p + "self_attn.k_proj.bias", {kv}, b.slice_rows(q, kv)));
      IB_TRY(load.copy(p + "self_attn.v_proj.bias", {kv}, b.slice_rows(q + kv, kv)));
    }
    IB_TRY(load.copy(p + "self_attn.o_proj.weight", {d, q}, lw.wo));
    IB_TRY(load.copy(p + "mlp.gate_proj.weight", {f, d}, lw.w_gate_up.slice_rows(0, f)));
    IB_TRY(load.copy(p + "mlp.up_proj.weight", {f, d}, lw.w_gate_up.slice_rows(f, f)));
    IB_TRY(load.copy(p + "mlp.down_proj.weight", {d, f}, lw.w_down));
  }
  const auto files = ckpt->files();
  w.description = "safetensors: " + path + " (" + std::to_string(files.size()) +
                  (files.size() == 1 ? " file)" : " files)");
  return Ok{};
}

}  // namespace ib::detail
