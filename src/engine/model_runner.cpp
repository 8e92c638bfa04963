// ModelRunner: embedding -> the architecture's layers (engine/arch) -> final norm on the rows to
// sample -> lm_head -> fp32 logits -> sample.
#include "engine/detail/model_runner.h"

#include "engine/detail/weight_storage.h"
#include "engine/lora.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace ib::detail {
namespace {

// Word (4-byte) offsets of this step's metadata inside the staging area / meta buffer.
struct MetaLayout {
  int64_t seed = 0;  // int64 (R): first, so it is 8-byte aligned
  int64_t token_ids = 0, positions = 0, slot_mapping = 0, query_start = 0, context_lens = 0;
  int64_t block_tables = 0, sample_rows = 0, top_k = 0, step = 0, temperature = 0, top_p = 0;
  int64_t lora_slots = 0;
  int64_t mrope = 0;  // (3, T) multimodal-RoPE models only
  int64_t words = 0;
};

MetaLayout layout_for(int64_t t, int64_t s, int64_t width, int64_t r, bool mrope) {
  MetaLayout m;
  int64_t at = 0;
  auto take = [&](int64_t words) {
    const int64_t start = at;
    at += words;
    return start;
  };
  m.seed = take(2 * r);
  m.token_ids = take(t);
  m.positions = take(t);
  m.slot_mapping = take(t);
  m.query_start = take(s + 1);
  m.context_lens = take(s);
  m.block_tables = take(s * width);
  m.sample_rows = take(r);
  m.top_k = take(r);
  m.step = take(r);
  m.temperature = take(r);
  m.top_p = take(r);
  m.lora_slots = take(t);
  m.mrope = take(mrope ? 3 * t : 0);
  m.words = at;
  return m;
}

// A token's 3-D position at index pos of its sequence, into rows (row k at k * stride) and
// positions (row 0): the prompt's from seq.mrope_positions, later ones (and every one of a
// sequence without them) pos + delta in all three.
void mrope_positions(const RunnerSeq& seq, int64_t pos, int32_t* rows, int64_t stride,
                     int32_t* positions) {
  const auto prompt = static_cast<int64_t>(seq.mrope_positions.size() / 3);
  for (int64_t k = 0; k < 3; ++k) {
    rows[k * stride] = pos < prompt ? seq.mrope_positions[static_cast<size_t>(k * prompt + pos)]
                                    : static_cast<int32_t>(pos + seq.mrope_delta);
  }
  *positions = rows[0];
}

int32_t float_bits(float f) {
  int32_t w;
  std::memcpy(&w, &f, sizeof(w));
  return w;
}

}  // namespace

ModelRunner::ModelRunner(const ModelConfig& model, const Architecture& arch, ModelWeights weights,
                         const RunnerLimits& limits, Backend& backend)
    : model_(model), arch_(arch), weights_(std::move(weights)), limits_(limits), backend_(backend) {
  attn_shape_ = attention_shape(model);
  attn_shape_.block_sparse = limits.block_sparse;
  const int64_t q = int64_t{model.num_heads} * model.head_dim;
  qkv_width_ = arch.qkv_buffer_width(model);
  attn_width_ = q;
  ffn_width_ = model.intermediate_size;
  if (model.mla.kv_lora_rank > 0) {
    mla_shape_ = mla_shape(model);
    attn_width_ = int64_t{model.num_heads} * model.mla.v_head_dim;
    ffn_width_ = std::max<int64_t>(
        ffn_width_, int64_t{model.moe.expert_intermediate_size} * model.moe.num_shared_experts);
  }
}

Status ModelRunner::check_lora_runs(const ModelConfig& model, Backend& backend) {
  if (backend.lora_ops() == nullptr) {
    return user_error("--enable-lora: the " + backend.device_info().kind +
                      " backend has no LoRA kernels; run LoRA on --device cpu or cuda, or fold a "
                      "single adapter into the weights with --merge-lora");
  }
  if (model.moe.num_experts > 0) {
    return user_error("--enable-lora: LoRA on mixture-of-experts models (" + model.name +
                      ") is not supported; use a dense model");
  }
  if (model.family == "gemma2") {  // engine/arch/gemma2.cpp applies no adapter to its MLP yet
    return user_error("--enable-lora: LoRA on Gemma-2 (" + model.name +
                      ") is not supported yet; use --merge-lora to fold one adapter into the "
                      "weights, or a Llama, Mistral, Qwen2 or Phi-3 model");
  }
  return Ok{};
}

Result<std::unique_ptr<ModelRunner>> ModelRunner::create(const ModelConfig& model,
                                                         ModelWeights weights,
                                                         const RunnerLimits& limits,
                                                         Backend& backend, Communicator* comm) {
  IB_ASSIGN_OR_RETURN(const Architecture* arch, find_architecture(model));
  IB_TRY(check_moe_runs(model, WeightFormat::kDense, backend));
  IB_TRY(arch->check_backend(model, backend));
  if (limits.lora_slots > 0) IB_TRY(check_lora_runs(model, backend));
  if (comm != nullptr && comm->size() > 1) {
    if (!arch->runs_tensor_parallel())
      return user_error("--tensor-parallel-size " + std::to_string(comm->size()) + ": " +
                        model.name + " (" + model.family +
                        ") does not run tensor parallel yet; run it with --tensor-parallel-size 1");
  } else {
    comm = nullptr;
  }
  std::unique_ptr<ModelRunner> runner(
      new ModelRunner(model, *arch, std::move(weights), limits, backend));
  runner->comm_ = comm;
  runner->tp_step_.comm = comm;
  if (comm != nullptr) {
    runner->embed_rows_ = runner->weights_.embed.rows() - 1;
    runner->embed_first_row_ = comm->rank() * runner->embed_rows_;
  }
  IB_TRY(runner->allocate());
  arch->prepare_weights(backend, runner->weights_);
  // Under tensor parallelism the fused ops' residual adds are summed over the ranks after them
  // (arch/detail/dense_decoder.h's add_row_parallel).
  FusedDecodeOps* fused = backend.fused_decode_ops();
  // With LoRA slots only where the fused ops take the updates (else the unfused ops and LoraOps).
  const bool lora_ok = limits.lora_slots == 0 || (fused && fused->fused_lora(limits.lora_rank));
  // Mixture-of-experts models decode on them where the backend also ends each layer in one
  // kernel for the experts' combine and the residual add (IB_MOE_ADD_NORM).
  const MoeOps* moe = backend.moe_ops();
  const bool moe_ok =
      model.moe.num_experts == 0 || (moe != nullptr && moe->fuses_experts_add_norm());
  if (fused && moe_ok && arch->runs_fused_decode() && lora_ok &&
      fused->fused_decode_fits(runner->attn_shape_, model.hidden_size, model.intermediate_size)) {
    // Dense weights take their gains folded in; quantized ones keep them (folding would
    // quantize twice) and the fused ops apply them.
    const bool dense = std::all_of(
        runner->weights_.layers.begin(), runner->weights_.layers.end(), [](const LayerWeights& l) {
          return l.wqkv.format == WeightFormat::kDense && l.wo.format == WeightFormat::kDense &&
                 l.w_gate_up.format == WeightFormat::kDense &&
                 l.w_down.format == WeightFormat::kDense;
        });
    if (dense) runner->fold_norm_gains();
    runner->fused_ops_ = fused;
    if (dense && limits.lora_slots > 0 && comm == nullptr && fused->fused_lora_lookahead())
      IB_TRY(runner->allocate_lora_lookahead());
  }
  return runner;
}

// rms_norm(h) * g @ w^T = rms_norm(h) @ (w * g)^T: each layer's two norm gains move into the
// columns of the matmul after them and become ones, so the weights still describe the same
// model for the unfused ops (prefill) and the fused decode GEMVs need no gain. A
// mixture-of-experts layer keeps its MLP norm's gain (the router and the experts read the
// normalised x). With LoRA slots the gains are kept (lora_gains_): each adapter's A of q/k/v and
// gate/up takes them in its columns too when it is loaded (set_lora_slot).
void ModelRunner::fold_norm_gains() {
  for (size_t i = 0; i < weights_.layers.size(); ++i) {
    LayerWeights& l = weights_.layers[i];
    if (!lora_gains_.empty()) {
      backend_.copy_on_device(lora_gains_[i][0], l.attn_norm);
      backend_.copy_on_device(lora_gains_[i][1], l.ffn_norm);
    }
    backend_.scale_columns(l.wqkv, l.attn_norm);
    backend_.fill_constant(l.attn_norm, 1.0f);
    if (l.w_gate_up.empty()) continue;  // experts
    backend_.scale_columns(l.w_gate_up, l.ffn_norm);
    backend_.fill_constant(l.ffn_norm, 1.0f);
  }
  gains_folded_ = true;
}

Status ModelRunner::allocate() {
  const DType dt = backend_.activation_dtype();
  const auto e = static_cast<int64_t>(dtype_size(dt));
  const int64_t t = limits_.max_num_batched_tokens;
  const int64_t s = limits_.max_num_seqs;
  const int64_t r = std::min(s, t);
  const int64_t d = model_.hidden_size;
  const int64_t f = ffn_width_;
  auto alloc = [&](Buffer& buf, int64_t bytes) -> Status {
    IB_ASSIGN_OR_RETURN(buf, backend_.alloc(static_cast<size_t>(bytes), MemoryTag::kActivations));
    return Ok{};
  };
  IB_TRY(alloc(residual_buf_, t * d * e));        // (T, D)
  IB_TRY(alloc(hidden_buf_, t * d * e));          // (T, D)
  IB_TRY(alloc(tmp_buf_, t * d * e));             // (T, D): o and down projections
  IB_TRY(alloc(qkv_buf_, t * qkv_width_ * e));    // (T, Q + 2 KV)
  IB_TRY(alloc(attn_buf_, t * attn_width_ * e));  // (T, Q)
  IB_TRY(alloc(gate_up_buf_, t * 2 * f * e));     // (T, 2F)
  IB_TRY(alloc(act_buf_, t * f * e));             // (T, F)
  IB_TRY(alloc(rows_buf_, 3 * r * d * e));        // 3 x (R, D): residual, down output, normed rows
  IB_TRY(alloc(logits_buf_, r * model_.vocab_size * 4));  // (R, V) f32
  if (comm_ != nullptr) IB_TRY(alloc(rank_logits_buf_, r * weights_.lm_head.rows() * 4));
  const int64_t width = (limits_.max_model_len + limits_.block_size - 1) / limits_.block_size;
  out_tokens_offset_ =
      static_cast<int>(layout_for(t, s, width, r, !model_.mrope_section.empty()).words);
  IB_TRY(alloc(meta_buf_, (out_tokens_offset_ + r) * 4));  // + out tokens (R)
  const std::vector<float> inv_freq = rope_inv_freq(model_);
  const auto rope_pairs = static_cast<int64_t>(inv_freq.size());
  IB_TRY(alloc(inv_freq_buf_, rope_pairs * 4 * (model_.mrope_section.empty() ? 1 : 4)));
  // Defined contents where decode graphs run: the rows a kernel skips (bucket padding) stay
  // finite. (The CPU backend leaves its untouched pages unmapped, as before.)
  if (backend_.supports_graphs()) {
    for (const Buffer* b : {&residual_buf_, &hidden_buf_, &tmp_buf_, &qkv_buf_, &attn_buf_,
                            &gate_up_buf_, &act_buf_, &rows_buf_, &logits_buf_}) {
      backend_.fill_constant(b->view(DType::kF32, {static_cast<int64_t>(b->bytes() / 4)}), 0.0f);
    }
  }
  if (model_.moe.num_experts > 0) IB_TRY(allocate_moe());
  if (limits_.lora_slots > 0) IB_TRY(allocate_lora());
  for (const LayerWeights& l : weights_.layers) layer_weight_bytes_ += l.bytes();
  inv_freq_ = inv_freq_buf_.view(DType::kF32, {rope_pairs});
  backend_.copy_from_host(inv_freq_, inv_freq.data(), DType::kF32);
  if (!model_.mrope_section.empty()) {
    // Row k: inv_freq on section k's pairs, 0 elsewhere (a zero angle rotates nothing).
    std::vector<float> masked(static_cast<size_t>(3 * rope_pairs), 0.0f);
    int64_t pair = 0;
    for (size_t k = 0; k < 3; ++k) {
      for (int i = 0; i < model_.mrope_section[k] && pair < rope_pairs; ++i, ++pair) {
        masked[k * static_cast<size_t>(rope_pairs) + static_cast<size_t>(pair)] =
            inv_freq[static_cast<size_t>(pair)];
      }
    }
    mrope_inv_freq_ =
        inv_freq_buf_.view(DType::kF32, {3, rope_pairs}, static_cast<size_t>(rope_pairs) * 4);
    backend_.copy_from_host(mrope_inv_freq_, masked.data(), DType::kF32);
  }
  return Ok{};
}

Status ModelRunner::allocate_moe() {
  const int64_t t = limits_.max_num_batched_tokens;
  const int64_t e = model_.moe.num_experts;
  moe_always_on_ = arch_.moe_always_on(model_, backend_);
  // Each token's routing row: the router's top-k, then the always-on experts.
  const int64_t k = model_.moe.experts_per_token + moe_always_on_;
  const int64_t layers = model_.num_layers;
  // Word offsets: counters (int64, first for alignment), logits, ids (each layer its own),
  // weights.
  const int64_t logits_at = 2 * layers * e, ids_at = logits_at + t * e;
  const int64_t weights_at = ids_at + layers * t * k;
  IB_ASSIGN_OR_RETURN(moe_buf_, backend_.alloc(static_cast<size_t>(weights_at + t * k) * 4,
                                               MemoryTag::kActivations));
  expert_tokens_ = moe_buf_.view(DType::kI64, {layers, e});
  router_logits_ = moe_buf_.view(DType::kF32, {t, e}, static_cast<size_t>(logits_at) * 4);
  expert_ids_ = moe_buf_.view(DType::kI32, {layers, t, k}, static_cast<size_t>(ids_at) * 4);
  expert_weights_ = moe_buf_.view(DType::kF32, {t, k}, static_cast<size_t>(weights_at) * 4);
  backend_.fill_constant(moe_buf_.view(DType::kF32, {2 * layers * e}), 0.0f);  // counters = 0
  // A dense layer's ids stay -1 (capture_routing reads every layer's).
  const std::vector<int32_t> none(static_cast<size_t>(layers * t * k), -1);
  backend_.copy_from_host(expert_ids_, none.data(), DType::kI32);
  return Ok{};
}

Status ModelRunner::allocate_lora() {
  const DType dt = backend_.activation_dtype();
  const auto e = static_cast<int64_t>(dtype_size(dt));
  const int64_t s = limits_.lora_slots, r = limits_.lora_rank;
  // Scales first (f32, S words), then each layer's stacks, each 256-byte aligned.
  auto aligned = [](int64_t bytes) { return (bytes + 255) / 256 * 256; };
  // Then each layer's two norm gains (fold_norm_gains: kept for the adapters' A).
  const int64_t d = model_.hidden_size;
  int64_t total = aligned(s * 4) + model_.num_layers * 2 * aligned(d * e);
  for (int t = 0; t < kNumLoraTargets; ++t) {
    const LoraTargetShape shape = lora_target_shape(model_, static_cast<LoraTarget>(t));
    total += model_.num_layers * (aligned(s * r * shape.in * e) + aligned(s * shape.out * r * e));
  }
  IB_ASSIGN_OR_RETURN(lora_buf_, backend_.alloc(static_cast<size_t>(total), MemoryTag::kWeights));
  lora_scales_ = lora_buf_.view(DType::kF32, {s});
  size_t at = static_cast<size_t>(aligned(s * 4));
  lora_gains_.resize(static_cast<size_t>(model_.num_layers));
  for (auto& gains : lora_gains_) {
    for (Tensor& g : gains) {
      g = lora_buf_.view(dt, {d}, at);
      at += static_cast<size_t>(aligned(d * e));
    }
  }
  lora_layers_.resize(static_cast<size_t>(model_.num_layers));
  for (LoraLayerStacks& layer : lora_layers_) {
    for (size_t t = 0; t < kNumLoraTargets; ++t) {
      const LoraTargetShape shape = lora_target_shape(model_, static_cast<LoraTarget>(t));
      layer.a[t] = lora_buf_.view(dt, {s, r, shape.in}, at);  // (S, R, in)
      at += static_cast<size_t>(aligned(s * r * shape.in * e));
      layer.b[t] = lora_buf_.view(dt, {s, shape.out, r}, at);  // (S, out, R)
      at += static_cast<size_t>(aligned(s * shape.out * r * e));
      backend_.fill_constant(layer.a[t], 0.0f);
      backend_.fill_constant(layer.b[t], 0.0f);
    }
  }
  backend_.fill_constant(lora_scales_, 0.0f);
  return Ok{};
}

Status ModelRunner::allocate_lora_lookahead() {
  const DType dt = backend_.activation_dtype();
  const auto e = static_cast<int64_t>(dtype_size(dt));
  const int64_t s = limits_.lora_slots, r = limits_.lora_rank;
  const int64_t q = lora_target_shape(model_, LoraTarget::kO).in;     // o's input
  const int64_t f = lora_target_shape(model_, LoraTarget::kDown).in;  // down's input
  auto aligned = [](int64_t bytes) { return (bytes + 255) / 256 * 256; };
  const int64_t layers = model_.num_layers;
  const int64_t total =
      layers * 2 * aligned(s * r * q * e) + (layers - 1) * 3 * aligned(s * r * f * e);
  IB_ASSIGN_OR_RETURN(lora_m_buf_, backend_.alloc(static_cast<size_t>(total), MemoryTag::kWeights));
  size_t at = 0;
  for (size_t l = 0; l < lora_layers_.size(); ++l) {
    auto stack = [&](LoraTarget t, int64_t k) {
      Tensor& m = lora_layers_[l].m[static_cast<size_t>(t)];
      m = lora_m_buf_.view(dt, {s, r, k}, at);
      at += static_cast<size_t>(aligned(s * r * k * e));
      backend_.fill_constant(m, 0.0f);
    };
    stack(LoraTarget::kGate, q);
    stack(LoraTarget::kUp, q);
    if (l == 0) continue;
    for (LoraTarget t : {LoraTarget::kQ, LoraTarget::kK, LoraTarget::kV}) stack(t, f);
  }
  return Ok{};
}

// A slot's lookahead matrices (allocate_lora_lookahead), from its stacks as set_lora_slot left
// them (the gains folded into the A of q/k/v and gate/up): gate/up's over o's input (o's weight
// and adapter), q/k/v's over the previous layer's down input (its weight and adapter).
void ModelRunner::set_lora_lookahead(int slot, float scale) {
  LoraOps& ops = *backend_.lora_ops();
  auto slot_of = [&](const Tensor& stack) {  // (S, X, Y) -> slot's (X, Y)
    return stack.slice_rows(slot, 1).reshaped({stack.dim(1), stack.dim(2)});
  };
  auto matrix = [&](size_t l, LoraTarget next, size_t from, LoraTarget cur, const WeightRef& w) {
    const auto n = static_cast<size_t>(next), c = static_cast<size_t>(cur);
    IB_ASSERT(w.format == WeightFormat::kDense && w.data.dim(1) == lora_layers_[l].m[n].dim(2),
              "set_lora_slot: a lookahead matrix needs the dense weight before it");
    ops.lora_lookahead_matrix(slot_of(lora_layers_[l].a[n]), w.data,
                              slot_of(lora_layers_[from].a[c]), slot_of(lora_layers_[from].b[c]),
                              scale, slot_of(lora_layers_[l].m[n]));
  };
  for (size_t l = 0; l < lora_layers_.size(); ++l) {
    for (LoraTarget t : {LoraTarget::kGate, LoraTarget::kUp})
      matrix(l, t, l, LoraTarget::kO, weights_.layers[l].wo);
    if (l == 0) continue;
    for (LoraTarget t : {LoraTarget::kQ, LoraTarget::kK, LoraTarget::kV})
      matrix(l, t, l - 1, LoraTarget::kDown, weights_.layers[l - 1].w_down);
  }
}

void ModelRunner::set_lora_slot(int slot, const LoraAdapter* adapter) {
  IB_ASSERT(slot >= 0 && slot < limits_.lora_slots, "set_lora_slot: no such slot");
  const int64_t r = limits_.lora_rank;
  for (size_t l = 0; l < lora_layers_.size(); ++l) {
    for (size_t t = 0; t < kNumLoraTargets; ++t) {
      const LoraTargetShape shape = lora_target_shape(model_, static_cast<LoraTarget>(t));
      std::vector<float> a(static_cast<size_t>(r * shape.in), 0.0f);   // (R, in)
      std::vector<float> b(static_cast<size_t>(shape.out * r), 0.0f);  // (out, R)
      const LoraMatrices* m = adapter ? &adapter->layers[l][t] : nullptr;
      if (m && !m->empty()) {
        const int64_t rank = adapter->rank;
        IB_ASSERT(rank <= r, "set_lora_slot: rank above the slots' width");
        std::copy(m->a.begin(), m->a.end(), a.begin());  // the first rank rows
        for (int64_t n = 0; n < shape.out; ++n) {
          std::copy_n(m->b.begin() + n * rank, rank, b.begin() + n * r);
        }
      }
      const Tensor a_slot = lora_layers_[l].a[t].slice_rows(slot, 1);  // (1, R, in)
      backend_.copy_from_host(a_slot, a.data(), DType::kF32);
      backend_.copy_from_host(lora_layers_[l].b[t].slice_rows(slot, 1), b.data(), DType::kF32);
      // Folded gains (fold_norm_gains): the norm before q/k/v (gains 0) or gate/up (1) folded
      // into A's columns as into the base weight's.
      const auto target = static_cast<LoraTarget>(t);
      const bool after_norm = target != LoraTarget::kO && target != LoraTarget::kDown;
      if (gains_folded_ && after_norm) {
        const size_t norm = target == LoraTarget::kGate || target == LoraTarget::kUp ? 1 : 0;
        backend_.scale_columns(a_slot.reshaped({r, shape.in}), lora_gains_[l][norm]);
      }
    }
  }
  const float scale = adapter ? adapter->scale : 0.0f;
  backend_.copy_from_host(lora_scales_.slice_rows(slot, 1), &scale, DType::kF32);
  if (lora_m_buf_.data() != nullptr) set_lora_lookahead(slot, scale);
}

std::vector<int64_t> ModelRunner::expert_tokens() const {
  if (expert_tokens_.empty()) return {};
  std::vector<int64_t> counts(static_cast<size_t>(expert_tokens_.numel()));
  backend_.copy_to_host(expert_tokens_, counts.data());
  return counts;
}

int64_t ModelRunner::activation_bytes() const {
  int64_t total = 0;
  for (const Buffer* b : {&residual_buf_, &hidden_buf_, &tmp_buf_, &qkv_buf_, &attn_buf_,
                          &gate_up_buf_, &act_buf_, &rows_buf_, &logits_buf_, &meta_buf_,
                          &inv_freq_buf_, &moe_buf_, &lora_buf_, &lora_m_buf_}) {
    total += static_cast<int64_t>(b->bytes());
  }
  return total;
}

int ModelRunner::upload_metadata(std::span<const RunnerSeq> batch, int pad_to) {
  const auto n = static_cast<int64_t>(batch.size());
  int64_t s = n, t = 0, r = 0, width = 1;
  for (const RunnerSeq& seq : batch) {
    t += seq.num_tokens;
    r += seq.sample ? 1 : 0;
    width = std::max<int64_t>(
        width, (seq.start_pos + seq.num_tokens + limits_.block_size - 1) / limits_.block_size);
  }
  if (pad_to > 0) {  // a decode bucket: one token and one sampled row per sequence
    IB_ASSERT(t == n && r == n && n <= pad_to && width <= graph_width_,
              "ModelRunner: batch does not fit the decode bucket");
    s = t = r = pad_to;
    width = graph_width_;
  }
  IB_ASSERT(t <= limits_.max_num_batched_tokens && s <= limits_.max_num_seqs,
            "ModelRunner: batch beyond the engine limits");
  const bool mrope = !model_.mrope_section.empty();
  const MetaLayout m = layout_for(t, s, width, r, mrope);
  staging_.assign(static_cast<size_t>(m.words), -1);
  auto at = [&](int64_t offset, int64_t i) -> int32_t& {
    return staging_[static_cast<size_t>(offset + i)];
  };
  int64_t token = 0, row = 0;
  at(m.query_start, 0) = 0;
  step_uses_lora_ = false;
  step_mrope_flat_ = true;
  for (int64_t i = n; i < s; ++i) {  // bucket padding: no cache write, no keys, greedy
    at(m.token_ids, i) = embedding_row(0);
    at(m.positions, i) = 0;
    at(m.query_start, i + 1) = static_cast<int32_t>(i + 1);
    at(m.context_lens, i) = 0;
    std::memset(&at(m.seed, 2 * i), 0, 8);
    at(m.sample_rows, i) = static_cast<int32_t>(i);
    at(m.top_k, i) = 0;
    at(m.step, i) = 0;
    at(m.temperature, i) = float_bits(0.0f);
    at(m.top_p, i) = float_bits(1.0f);
    at(m.lora_slots, i) = -1;
    if (mrope) at(m.mrope, i) = at(m.mrope, t + i) = at(m.mrope, 2 * t + i) = 0;
  }
  for (int64_t i = 0; i < n; ++i) {
    const RunnerSeq& seq = batch[static_cast<size_t>(i)];
    const std::vector<int32_t>& table = *seq.block_table;
    const int64_t context = seq.start_pos + seq.num_tokens;
    IB_ASSERT(static_cast<int64_t>(table.size()) * limits_.block_size >= context,
              "ModelRunner: block table too short for the scheduled tokens");
    for (int64_t j = 0; j < seq.num_tokens; ++j, ++token) {
      const int64_t pos = seq.start_pos + j;
      at(m.token_ids, token) = embedding_row(seq.tokens[j]);
      at(m.lora_slots, token) = seq.lora_slot;
      at(m.positions, token) = static_cast<int32_t>(pos);
      if (mrope) {
        mrope_positions(seq, pos, &at(m.mrope, token), t, &at(m.positions, token));
        step_mrope_flat_ = step_mrope_flat_ && at(m.mrope, token) == at(m.mrope, t + token) &&
                           at(m.mrope, token) == at(m.mrope, 2 * t + token);
      }
      at(m.slot_mapping, token) = static_cast<int32_t>(
          table[static_cast<size_t>(pos / limits_.block_size)] * limits_.block_size +
          pos % limits_.block_size);
    }
    at(m.query_start, i + 1) = static_cast<int32_t>(token);
    at(m.context_lens, i) = static_cast<int32_t>(context);
    step_uses_lora_ = step_uses_lora_ || seq.lora_slot >= 0;
    for (size_t b = 0; b < table.size() && static_cast<int64_t>(b) < width; ++b) {
      at(m.block_tables, i * width + static_cast<int64_t>(b)) = table[b];
    }
    if (!seq.sample) continue;
    const uint64_t seed = seq.sampling.seed;
    std::memcpy(&at(m.seed, 2 * row), &seed, sizeof(seed));
    at(m.sample_rows, row) = static_cast<int32_t>(token - 1);
    at(m.top_k, row) = seq.sampling.top_k;
    at(m.step, row) = seq.sample_step;
    at(m.temperature, row) = float_bits(seq.sampling.temperature);
    at(m.top_p, row) = float_bits(seq.sampling.top_p);
    ++row;
  }
  backend_.copy_from_host(meta_buf_.view(DType::kI32, {m.words}), staging_.data(), DType::kI32);

  auto i32 = [&](int64_t offset, std::initializer_list<int64_t> shape) {
    return meta_buf_.view(DType::kI32, shape, static_cast<size_t>(offset) * 4);
  };
  token_ids_ = i32(m.token_ids, {t});
  positions_ = i32(m.positions, {t});
  mrope_positions_ = mrope ? i32(m.mrope, {3, t}) : Tensor{};
  slot_mapping_ = i32(m.slot_mapping, {t});
  attn_meta_.num_seqs = static_cast<int>(s);
  attn_meta_.num_tokens = static_cast<int>(t);
  attn_meta_.query_start = i32(m.query_start, {s + 1});
  attn_meta_.context_lens = i32(m.context_lens, {s});
  attn_meta_.block_tables = i32(m.block_tables, {s, width});
  attn_meta_.max_query_len = 0;
  attn_meta_.max_context_len = 0;
  attn_meta_.decode_prefix = 0;  // the scheduler puts running (decoding) sequences first
  while (attn_meta_.decode_prefix < static_cast<int>(batch.size()) &&
         batch[static_cast<size_t>(attn_meta_.decode_prefix)].num_tokens == 1)
    ++attn_meta_.decode_prefix;
  for (const RunnerSeq& seq : batch) {
    attn_meta_.max_query_len = std::max(attn_meta_.max_query_len, seq.num_tokens);
    attn_meta_.max_context_len =
        std::max(attn_meta_.max_context_len, seq.start_pos + seq.num_tokens);
  }
  if (pad_to > 0) {  // the hints of every step the bucket's graph will replay
    attn_meta_.max_query_len = 1;
    attn_meta_.max_context_len = graph_max_context_;
  }
  sample_rows_ = i32(m.sample_rows, {r});
  sampling_meta_.num_rows = static_cast<int>(r);
  sampling_meta_.all_greedy = std::all_of(batch.begin(), batch.end(), [](const RunnerSeq& q) {
    return !q.sample || q.sampling.temperature <= 0.0f;
  });
  sampling_meta_.temperature =
      meta_buf_.view(DType::kF32, {r}, static_cast<size_t>(m.temperature) * 4);
  sampling_meta_.top_k = i32(m.top_k, {r});
  sampling_meta_.top_p = meta_buf_.view(DType::kF32, {r}, static_cast<size_t>(m.top_p) * 4);
  sampling_meta_.seed = meta_buf_.view(DType::kI64, {r}, static_cast<size_t>(m.seed) * 4);
  sampling_meta_.step = i32(m.step, {r});
  out_tokens_ = i32(out_tokens_offset_, {r});
  lora_slot_ids_ = i32(m.lora_slots, {t});
  return static_cast<int>(r);
}

void ModelRunner::forward(int num_tokens, int num_rows, std::span<const RunnerSeq> batch) {
  const DType dt = backend_.activation_dtype();
  const int64_t t = num_tokens;
  const int64_t r = num_rows;
  const int64_t d = model_.hidden_size;
  const int64_t f = ffn_width_;
  const auto eps = static_cast<float>(model_.rms_norm_eps);
  Tensor residual = residual_buf_.view(dt, {t, d});    // (T, D)
  Tensor hidden = hidden_buf_.view(dt, {t, d});        // (T, D)
  Tensor tmp = tmp_buf_.view(dt, {t, d});              // (T, D)
  Tensor qkv = qkv_buf_.view(dt, {t, qkv_width_});     // (T, Q + 2 KV)
  Tensor attn = attn_buf_.view(dt, {t, attn_width_});  // (T, Q)
  Tensor gate_up = gate_up_buf_.view(dt, {t, 2 * f});  // (T, 2F)
  Tensor act = act_buf_.view(dt, {t, f});              // (T, F)

  // Fused: a decode step the backend fuses (the gains folded into dense weights, or passed).
  FusedDecodeOps* fused =
      fused_ops_ && step_mrope_flat_ && fused_ops_->fused_decode(t) ? fused_ops_ : nullptr;
  backend_.embedding(token_ids_, weights_.embed, residual);
  // Input embeddings (a vision encoder's, on rank 0's device) replace their tokens' rows. Under
  // tensor parallelism they go in before the sum over the ranks that completes the lookup: rank 0
  // writes them and the other ranks zero those rows, so no rank reads another's memory.
  const bool writes_embeds = comm_ == nullptr || comm_->rank() == 0;
  int64_t first = 0;  // the share's first row in the step
  for (const RunnerSeq& seq : batch) {
    for (const InputEmbeds& e : seq.input_embeds) {
      IB_ASSERT(e.offset >= 0 && e.rows > 0 && e.offset + e.rows <= seq.num_tokens &&
                    e.data.rows() == e.rows && e.data.row_size() == d && e.data.dtype == dt,
                "ModelRunner: input embeddings outside their share, or not (rows, D) in act");
      const Tensor rows = residual.slice_rows(first + e.offset, e.rows);
      if (writes_embeds) {
        backend_.copy_on_device(rows, e.data);
      } else {
        backend_.fill_constant(rows, 0.0f);
      }
    }
    first += seq.num_tokens;
  }
  if (comm_ != nullptr) tp_step_.all_reduce_sum(residual);  // one rank holds each token's row
  StepInputs in;
  in.positions = positions_;
  in.slot_mapping = slot_mapping_;
  in.inv_freq = inv_freq_;
  in.mrope_positions = mrope_positions_;
  in.mrope_inv_freq = mrope_inv_freq_;
  in.attention = &attn_meta_;
  in.shape = &attn_shape_;
  in.kv = kv_.layers;
  in.rms_eps = eps;
  in.fused = fused;
  in.gains_folded = gains_folded_;
  if (comm_ != nullptr) in.tp = &tp_step_;
  StepBuffers buffers{residual, hidden, tmp, qkv, attn, gate_up, act, {}, {}, {}};
  if (model_.mla.kv_lora_rank > 0) {
    in.mla = backend_.mla_ops();
    in.mla_shape = &mla_shape_;
  }
  if (!expert_tokens_.empty()) {
    in.moe = backend_.moe_ops();
    in.expert_tokens = expert_tokens_;
    in.moe_routing.renormalize = model_.moe.norm_topk_prob;
    if (model_.moe.topk_method == "group_limited_greedy") {
      in.moe_routing.num_groups = model_.moe.num_groups;
      in.moe_routing.topk_groups = model_.moe.topk_groups;
    }
    in.moe_routing.scale = static_cast<float>(model_.moe.routed_scaling_factor);
    in.moe_routing.always_on = moe_always_on_;
    buffers.router_logits = router_logits_.slice_rows(0, t);    // (T, E) f32
    buffers.expert_ids = expert_ids_;                           // (L, T_max, k + on) int32
    buffers.expert_weights = expert_weights_.slice_rows(0, t);  // (T, k + on) f32
  }
  if (step_uses_lora_) {
    in.lora = backend_.lora_ops();
    in.lora_slot_ids = lora_slot_ids_;
    in.lora_scales = lora_scales_;
    in.lora_layers = lora_layers_;
  }
  arch_.forward_layers(backend_, weights_, in, buffers);
  if (r == 0) return;
  // The final norm (unfused: with the last residual add), only on the rows that sample.
  const size_t rows_bytes = static_cast<size_t>(r * d) * dtype_size(dt);
  Tensor res_rows = rows_buf_.view(dt, {r, d});                           // (R, D)
  Tensor tmp_rows = rows_buf_.view(dt, {r, d}, rows_bytes);               // (R, D)
  Tensor norm_rows = rows_buf_.view(dt, {r, d}, 2 * rows_bytes);          // (R, D)
  Tensor logits = logits_buf_.view(DType::kF32, {r, model_.vocab_size});  // (R, V) f32
  backend_.gather_rows(residual, sample_rows_, res_rows);
  if (!fused) backend_.gather_rows(tmp, sample_rows_, tmp_rows);
  lm_head_rows(res_rows, fused ? nullptr : &tmp_rows, norm_rows, logits);
  backend_.sample(logits, sampling_meta_, out_tokens_);
}

void ModelRunner::lm_head_rows(Tensor residual_rows, const Tensor* sublayer_rows, Tensor norm_rows,
                               Tensor logits) {
  const auto eps = static_cast<float>(model_.rms_norm_eps);
  if (sublayer_rows == nullptr) {
    backend_.rms_norm(residual_rows, weights_.final_norm, eps, norm_rows);
  } else {
    backend_.add_rms_norm(residual_rows, *sublayer_rows, weights_.final_norm, eps, norm_rows);
  }
  if (comm_ != nullptr) {
    // This rank's rows of the vocabulary, then every rank's side by side: (R', V).
    const Tensor mine =
        rank_logits_buf_.view(DType::kF32, {logits.rows(), weights_.lm_head.rows()});
    backend_.matmul(norm_rows, weights_.lm_head, nullptr, mine);
    tp_step_.all_gather_columns(mine, logits);
  } else {
    backend_.matmul(norm_rows, weights_.lm_head, nullptr, logits);
  }
  if (model_.final_logit_softcapping > 0) {
    backend_.softcap(logits, static_cast<float>(model_.final_logit_softcapping));
  }
}

}  // namespace ib::detail
