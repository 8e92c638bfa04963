// DeepSeek-V2 and DeepSeek-V2-Lite, as transformers' DeepseekV2ForCausalLM computes them:
// - multi-head latent attention: the query from q_proj (V2-Lite) or q_a_proj -> q_a_layernorm ->
//   q_b_proj (V2), each head [q_nope (N) | q_pe (P)]; kv_a_proj_with_mqa gives the latent (R) and
//   one rope key (P) shared by every head; the latent goes through kv_a_layernorm and kv_b_proj
//   makes each head's k_nope (N) and v (V); the rope parts rotate in DeepSeek's interleaved layout
//   (pairs as complex numbers), cos and sin times YaRN's attention factor; softmax scale
//   (N + P)^-0.5, times get_mscale(factor, mscale_all_dim)^2 under YaRN. The KV cache holds the
//   normed latent and the rotated rope key per token (R + P values per layer: 576 for V2-Lite,
//   against 2 x 16 heads x 192 for its keys and values), and attention runs with the absorbed
//   up-projections on every step (backend MlaOps);
// - the first first_k_dense_replace layers with a dense SwiGLU MLP, the others a mixture of
//   experts: router softmax in fp32 over all experts, top-k (greedy, or group-limited greedy),
//   renormalised only with norm_topk_prob, times routed_scaling_factor (MoeOps::
//   moe_route_grouped); the routed experts' sum plus the shared experts' SwiGLU MLP (intermediate
//   moe_intermediate_size x n_shared_experts). Where the backend fuses them
//   (MoeOps::fuses_shared_experts), the shared MLP runs inside moe_experts as n_shared_experts
//   always-on experts of the routed ones' width (SwiGLU is a sum over its features: the shared
//   MLP is the sum of its feature slices' MLPs), added after the routed ones at weight 1.0.
// The published checkpoints' per-expert names (mlp.experts.J.gate_proj, ...). Runs unfused, and
// tensor parallel by heads and MLP columns (model/tensor_parallel.h's mla_ranges_of_rank).
#include <cstring>
#include <vector>

#include "engine/arch/detail/dense_decoder.h"
#include "engine/arch/detail/families.h"

namespace ib::arch {
namespace {

// q_a_layernorm and kv_a_layernorm are DeepseekV2RMSNorm(rank) at its default eps, whatever the
// config's rms_norm_eps.
constexpr float kLatentNormEps = 1e-6f;

// A view of rows x cols activations at byte offset `at` of buffer (device memory).
Tensor carve(const Tensor& buffer, size_t& at, int64_t rows, int64_t cols) {
  const Tensor t(static_cast<char*>(buffer.data) + at, buffer.dtype, {rows, cols});
  at += static_cast<size_t>(rows * cols) * dtype_size(buffer.dtype);
  IB_ASSERT(at <= buffer.bytes(), "deepseek2: the qkv buffer is too small");
  return t;
}

class DeepseekV2 final : public Architecture {
 public:
  std::string_view name() const override { return "deepseek_v2"; }

  WeightSchema weight_schema(const ModelConfig& c) const override {
    const MlaConfig& m = c.mla;
    const int64_t d = c.hidden_size, h = c.num_heads;
    const int64_t q_rows = h * (m.qk_nope_head_dim + m.qk_rope_head_dim);
    WeightSchema s;
    s.architecture = "DeepseekV2ForCausalLM";
    add_model_weights(c, s);
    for (int l = 0; l < c.num_layers; ++l) {
      const std::string a = layer_prefix(l) + "self_attn.";
      const std::string p = layer_prefix(l) + "mlp.";
      add_layer_norms(c, l, s);
      if (m.q_lora_rank > 0) {
        s.entries.push_back({WeightRole::kQA, l, {{a + "q_a_proj.weight", {m.q_lora_rank, d}}}});
        s.entries.push_back(
            {WeightRole::kQANorm, l, {{a + "q_a_layernorm.weight", {m.q_lora_rank}}}});
        s.entries.push_back(
            {WeightRole::kQkv, l, {{a + "q_b_proj.weight", {q_rows, m.q_lora_rank}}}});
      } else {
        s.entries.push_back({WeightRole::kQkv, l, {{a + "q_proj.weight", {q_rows, d}}}});
      }
      s.entries.push_back(
          {WeightRole::kKvA,
           l,
           {{a + "kv_a_proj_with_mqa.weight", {int64_t{m.kv_lora_rank} + m.qk_rope_head_dim, d}}}});
      s.entries.push_back(
          {WeightRole::kKvANorm, l, {{a + "kv_a_layernorm.weight", {m.kv_lora_rank}}}});
      s.entries.push_back(
          {WeightRole::kKvB,
           l,
           {{a + "kv_b_proj.weight", {h * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank}}}});
      s.entries.push_back({WeightRole::kO, l, {{a + "o_proj.weight", {d, h * m.v_head_dim}}}});
      if (l < c.moe.first_dense_layers || c.moe.num_experts == 0) {
        add_swiglu(WeightRole::kGateUp, WeightRole::kDown, p, c.intermediate_size, d, l, -1, s);
        continue;
      }
      s.entries.push_back({WeightRole::kRouter, l, {{p + "gate.weight", {c.moe.num_experts, d}}}});
      for (int e = 0; e < c.moe.num_experts; ++e) {
        add_swiglu(WeightRole::kExpertGateUp, WeightRole::kExpertDown,
                   p + "experts." + std::to_string(e) + ".", c.moe.expert_intermediate_size, d, l,
                   e, s);
      }
      if (c.moe.num_shared_experts > 0) {
        add_swiglu(WeightRole::kSharedGateUp, WeightRole::kSharedDown, p + "shared_experts.",
                   int64_t{c.moe.expert_intermediate_size} * c.moe.num_shared_experts, d, l, -1, s);
      }
    }
    return s;
  }

  int64_t qkv_buffer_width(const ModelConfig& c) const override {
    const MlaConfig& m = c.mla;
    // The query, the latent with its rope key, the compressed query, and a (T, D) scratch.
    return int64_t{c.num_heads} * (m.qk_nope_head_dim + m.qk_rope_head_dim) + m.kv_lora_rank +
           m.qk_rope_head_dim + m.q_lora_rank + c.hidden_size;
  }

  Status check_backend(const ModelConfig& c, Backend& backend) const override {
    const DeviceInfo dev = backend.device_info();
    if (backend.mla_ops() == nullptr) {
      return user_error("model '" + c.name + "' (DeepSeek-V2) needs multi-head latent attention, " +
                        "which the " + dev.kind + " backend (" + dev.name +
                        ") does not run yet; run it with --device cpu");
    }
    const bool routing_options = c.moe.topk_method == "group_limited_greedy" ||
                                 c.moe.routed_scaling_factor != 1.0 || c.moe.norm_topk_prob;
    if (c.moe.num_experts > 0 && routing_options &&
        (backend.moe_ops() == nullptr || !backend.moe_ops()->routes_grouped())) {
      return user_error("model '" + c.name + "': the " + dev.kind + " backend (" + dev.name +
                        ") does not run DeepSeek's router (topk_method " + c.moe.topk_method +
                        ", routed_scaling_factor, norm_topk_prob); run it with --device cpu");
    }
    return Ok{};
  }

  bool runs_fused_decode() const override { return false; }
  // A rank: its heads (query, kv_b, o), the latent whole, its columns of every MLP; the sums
  // after o and after the MLP.
  bool runs_tensor_parallel() const override { return true; }

  int moe_always_on(const ModelConfig& c, Backend& backend) const override {
    const bool fused = c.moe.num_experts > 0 && c.moe.num_shared_experts > 0 &&
                       backend.moe_ops() != nullptr && backend.moe_ops()->fuses_shared_experts();
    return fused ? c.moe.num_shared_experts : 0;
  }

  // With the shared experts fused: each MoE layer's shared MLP (intermediate S F, S shared
  // experts of width F) rearranged in place into S experts of the routed ones' layout, appended
  // to the routed ones in LayerWeights::moe_gate_up / moe_down. gate_up [g_0 .. g_S-1 | u_0 ..
  // u_S-1] (F rows each) becomes [g_0 u_0 | g_1 u_1 | ...]; down (D, S F) becomes S (D, F)
  // matrices of its column slices. Through the host, once at load.
  void prepare_weights(Backend& backend, ModelWeights& weights) const override {
    if (backend.moe_ops() == nullptr || !backend.moe_ops()->fuses_shared_experts()) return;
    for (LayerWeights& w : weights.layers) {
      if (w.expert_gate_up.empty() || w.shared_down.empty()) continue;
      const int64_t f = w.expert_down[0].cols(), d = w.shared_down.rows();
      const int64_t fs = w.shared_down.cols(), s = fs / f;
      IB_ASSERT(s >= 1 && s * f == fs, "deepseek2: the shared MLP is not whole experts wide");
      const size_t es = dtype_size(w.shared_down.data.dtype);
      const auto row = static_cast<size_t>(d) * es;  // a gate_up row's bytes
      std::vector<char> from(w.shared_gate_up.data.bytes()), to(from.size());
      backend.copy_to_host(w.shared_gate_up.data, from.data());
      for (int64_t j = 0; j < s; ++j) {
        const auto block = static_cast<size_t>(f) * row;
        std::memcpy(to.data() + static_cast<size_t>(2 * j) * block,
                    from.data() + static_cast<size_t>(j) * block, block);
        std::memcpy(to.data() + static_cast<size_t>(2 * j + 1) * block,
                    from.data() + static_cast<size_t>(s + j) * block, block);
      }
      backend.copy_from_host(w.shared_gate_up.data, to.data(), w.shared_gate_up.data.dtype);
      from.assign(w.shared_down.data.bytes(), 0);
      to.assign(from.size(), 0);
      backend.copy_to_host(w.shared_down.data, from.data());
      const auto piece = static_cast<size_t>(f) * es;  // one row of one (D, F) matrix
      for (int64_t j = 0; j < s; ++j) {
        for (int64_t r = 0; r < d; ++r) {
          std::memcpy(to.data() + static_cast<size_t>(j * d + r) * piece,
                      from.data() + static_cast<size_t>(r * fs + j * f) * es, piece);
        }
      }
      backend.copy_from_host(w.shared_down.data, to.data(), w.shared_down.data.dtype);
      w.moe_gate_up = w.expert_gate_up;
      w.moe_down = w.expert_down;
      for (int64_t j = 0; j < s; ++j) {
        WeightRef gate_up, down;
        gate_up.data = w.shared_gate_up.data.slice_rows(2 * j * f, 2 * f);
        down.data = w.shared_down.data.reshaped({s * d, f}).slice_rows(j * d, d);
        w.moe_gate_up.push_back(gate_up);
        w.moe_down.push_back(down);
      }
    }
  }

  void forward_layers(Backend& backend, const ModelWeights& weights, const StepInputs& in,
                      const StepBuffers& b) const override {
    IB_ASSERT(in.fused == nullptr && in.mla != nullptr && in.mla_shape != nullptr,
              "deepseek2: needs the backend's MLA ops and runs unfused");
    const MlaShape& shape = *in.mla_shape;
    const auto& layers = weights.layers;
    const float eps = in.rms_eps;
    const int64_t t = b.residual.rows(), d = b.residual.row_size();
    size_t at = 0;
    const Tensor q = carve(
        b.qkv, at, t, int64_t{shape.num_heads} * (shape.qk_nope_head_dim + shape.qk_rope_head_dim));
    const Tensor latent = carve(b.qkv, at, t, int64_t{shape.kv_lora_rank} + shape.qk_rope_head_dim);
    const Tensor scratch = carve(b.qkv, at, t, d);
    const int64_t q_rank = layers[0].q_a.empty() ? 0 : layers[0].q_a.rows();
    const Tensor q_a = q_rank > 0 ? carve(b.qkv, at, t, q_rank) : Tensor{};
    backend.rms_norm(b.residual, layers[0].attn_norm, eps, b.hidden);
    for (size_t l = 0; l < layers.size(); ++l) {
      const LayerWeights& w = layers[l];
      // Attention: the query, the latent and its rope key; norm, rope and the cache write;
      // attention over the cached latents; o_proj.
      if (q_rank > 0) {
        backend.matmul(b.hidden, w.q_a, nullptr, q_a);
        backend.rms_norm(q_a, w.q_a_norm, kLatentNormEps, q_a);
        backend.matmul(q_a, w.wqkv, nullptr, q);
      } else {
        backend.matmul(b.hidden, w.wqkv, nullptr, q);
      }
      backend.matmul(b.hidden, w.kv_a, nullptr, latent);
      in.mla->mla_rope_and_cache(q, latent, w.kv_a_norm, kLatentNormEps, in.positions,
                                 in.slot_mapping, in.inv_freq, in.kv[l], shape);
      in.mla->mla_attention(q, w.kv_b, in.kv[l], *in.attention, shape, b.attn);
      backend.matmul(b.attn, w.wo, nullptr, b.tmp);
      if (in.tp != nullptr) in.tp->all_reduce_sum(b.tmp);  // each rank's heads' share of o
      backend.add_rms_norm(b.residual, b.tmp, w.ffn_norm, eps, b.hidden);
      // The MLP into b.tmp.
      if (w.expert_gate_up.empty()) {  // dense: intermediate_size, in the front of the buffers
        const int64_t f = w.w_down.cols();
        const Tensor gate_up(b.gate_up.data, b.gate_up.dtype, {t, 2 * f});
        const Tensor act(b.act.data, b.act.dtype, {t, f});
        backend.matmul(b.hidden, w.w_gate_up, nullptr, gate_up);
        backend.silu_mul(gate_up, act);
        backend.matmul(act, w.w_down, nullptr, b.tmp);
      } else {
        moe(backend, w, in, b, l, scratch);
      }
      // Each rank's columns of the MLP (dense, or every expert's and the shared ones').
      if (in.tp != nullptr) in.tp->all_reduce_sum(b.tmp);
      if (l + 1 < layers.size())
        backend.add_rms_norm(b.residual, b.tmp, layers[l + 1].attn_norm, eps, b.hidden);
    }
  }

 private:
  // (gate, up) stacked into gate_up_role, down into down_role, under prefix.
  static void add_swiglu(WeightRole gate_up_role, WeightRole down_role, const std::string& prefix,
                         int64_t f, int64_t d, int layer, int expert, WeightSchema& s) {
    s.entries.push_back(
        {gate_up_role,
         layer,
         {{prefix + "gate_proj.weight", {f, d}, 0}, {prefix + "up_proj.weight", {f, d}, f}},
         expert});
    s.entries.push_back({down_role, layer, {{prefix + "down_proj.weight", {d, f}, 0}}, expert});
  }

  // b.tmp = the routed experts' weighted sum + the shared experts' MLP of b.hidden (in that
  // order, as DeepseekV2Moe adds them); scratch (T, D) is overwritten.
  static void moe(Backend& backend, const LayerWeights& w, const StepInputs& in,
                  const StepBuffers& b, size_t layer, const Tensor& scratch) {
    IB_ASSERT(in.moe != nullptr, "deepseek2: an MoE layer needs the backend's MoE ops");
    const int64_t e = static_cast<int64_t>(w.expert_gate_up.size());
    backend.matmul(b.hidden, w.router, nullptr, b.router_logits);
    const Tensor counts = in.expert_tokens.slice_rows(static_cast<int64_t>(layer), 1).reshaped({e});
    const Tensor ids = layer_expert_ids(b, layer);
    in.moe->moe_route_grouped(b.router_logits, in.moe_routing, ids, b.expert_weights, counts);
    if (in.moe_routing.always_on > 0) {  // the shared experts after the routed ones
      IB_ASSERT(w.moe_gate_up.size() == static_cast<size_t>(e + in.moe_routing.always_on),
                "deepseek2: the shared experts were not prepared as always-on experts");
      in.moe->moe_experts(b.hidden, ids, b.expert_weights, w.moe_gate_up, w.moe_down, b.tmp);
      return;
    }
    if (w.shared_down.empty()) {
      in.moe->moe_experts(b.hidden, ids, b.expert_weights, w.expert_gate_up, w.expert_down, b.tmp);
      return;
    }
    const int64_t fs = w.shared_down.cols();
    const Tensor shared_gate_up(b.gate_up.data, b.gate_up.dtype, {b.gate_up.rows(), 2 * fs});
    const Tensor shared_act(b.act.data, b.act.dtype, {b.act.rows(), fs});
    backend.matmul(b.hidden, w.shared_gate_up, nullptr, shared_gate_up);
    backend.silu_mul(shared_gate_up, shared_act);
    in.moe->moe_experts(b.hidden, ids, b.expert_weights, w.expert_gate_up, w.expert_down, b.tmp);
    backend.matmul(shared_act, w.shared_down, nullptr, b.hidden);
    // b.tmp += shared (one rounding, as routed + shared); the norm it also writes is scratch.
    backend.add_rms_norm(b.tmp, b.hidden, w.ffn_norm, in.rms_eps, scratch);
  }
};

}  // namespace

const Architecture& deepseek2_architecture() {
  static const DeepseekV2 arch;
  return arch;
}

}  // namespace ib::arch
