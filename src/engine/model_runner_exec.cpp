// ModelRunner: one step's execution (a decode graph's replay or the ops one by one), the decode
// graph capture, and the bytes a step must move.
#include <algorithm>

#include "core/clock.h"
#include "engine/detail/model_runner.h"

namespace ib::detail {
namespace {

// vLLM's capture sizes: 1, 2, 4, then every multiple of 8, up to the cap.
std::vector<int> bucket_sizes(int cap) {
  std::vector<int> sizes;
  for (int b : {1, 2, 4}) {
    if (b <= cap) sizes.push_back(b);
  }
  for (int b = 8; b <= cap; b += 8) sizes.push_back(b);
  if (sizes.empty() || sizes.back() != cap) sizes.push_back(cap);
  return sizes;
}

}  // namespace

Status ModelRunner::capture_decode_graphs(const GraphOptions& options, int max_model_len) {
  IB_ASSERT(!kv_.layers.empty(), "ModelRunner: capture before attach_kv_cache");
  if (!backend_.supports_graphs()) return Ok{};
  const int cap =
      std::min({options.max_batch, limits_.max_num_seqs, limits_.max_num_batched_tokens});
  if (cap <= 0) return Ok{};
  graph_max_context_ = std::max(1, std::min(options.max_context, max_model_len));
  graph_width_ = (graph_max_context_ + limits_.block_size - 1) / limits_.block_size;
  const std::vector<int> sizes = bucket_sizes(cap);
  // The warm-up passes route tokens too: the routing counts are put back as they were after.
  const std::vector<int64_t> expert_tokens_before = expert_tokens();
  // Largest first, as vLLM does; each bucket runs once eagerly (kernels loaded, GEMM plans
  // chosen, nothing allocated during capture) before it is recorded.
  for (auto it = sizes.rbegin(); it != sizes.rend(); ++it) {
    const int b = *it;
    upload_metadata({}, b);
    // With LoRA slots every graph holds the adapters' ops: a replayed step may mix adapters and
    // the base model (slot -1: the padded rows and base requests, which the ops leave alone).
    step_uses_lora_ = limits_.lora_slots > 0;
    forward(b, b);
    backend_.synchronize();
    IB_TRY(backend_.device_status());
    IB_TRY(backend_.begin_capture());
    forward(b, b);
    IB_ASSIGN_OR_RETURN(graphs_[b], backend_.end_capture());
  }
  if (!expert_tokens_before.empty()) {
    backend_.copy_from_host(expert_tokens_, expert_tokens_before.data(), DType::kI64);
    counters_seen_ = expert_tokens_before;
    experts_read_.clear();
  }
  return backend_.device_status();
}

int ModelRunner::graph_bucket_for(std::span<const RunnerSeq> batch) const {
  if (graphs_.empty() || batch.empty()) return 0;
  for (const RunnerSeq& seq : batch) {
    if (seq.num_tokens != 1 || !seq.sample || seq.sampling.temperature > 0.0f ||
        seq.start_pos + 1 > graph_max_context_ || seq.logits_rows > 0 ||
        !seq.input_embeds.empty()) {
      return 0;
    }
  }
  const auto it = graphs_.lower_bound(static_cast<int>(batch.size()));
  return it == graphs_.end() ? 0 : it->first;
}

Result<RunnerOutput> ModelRunner::execute(std::span<const RunnerSeq> batch, bool capture_logits,
                                          bool capture_routing) {
  IB_ASSERT(!kv_.layers.empty(), "ModelRunner::execute before attach_kv_cache");
  if (batch.empty()) return RunnerOutput{};
  const int bucket = graph_bucket_for(batch);
  int rows = 0;
  if (bucket > 0) {
    upload_metadata(batch, bucket);
    rows = static_cast<int>(batch.size());
    backend_.timer_start();
    graphs_.at(bucket)->replay();
    backend_.timer_stop();
  } else {
    rows = upload_metadata(batch);
    backend_.timer_start();
    forward(attn_meta_.num_tokens, rows, batch);
    backend_.timer_stop();
  }
  IB_TRY(tp_step_.status);  // a tensor-parallel rank's failed collective, naming it
  const int64_t launched_ns = now_ns();
  IB_ASSIGN_OR_RETURN(RunnerOutput out, read_results(rows, capture_logits));
  out.launched_ns = launched_ns;
  if (std::any_of(batch.begin(), batch.end(),
                  [](const RunnerSeq& q) { return q.logits_rows > 0; })) {
    IB_TRY(read_prompt_logits(batch, out));
    IB_TRY(tp_step_.status);
  }
  if (capture_routing && !expert_ids_.empty()) IB_TRY(read_routing(batch, out));
  if (!expert_tokens_.empty()) note_experts_read();
  out.graph = bucket > 0;
  if (rows == 0) backend_.synchronize();
  out.device_ns = backend_.timer_elapsed_ns();
  out.synced_ns = now_ns();
  IB_TRY(backend_.device_status());
  return out;
}

void ModelRunner::note_experts_read() {
  const std::vector<int64_t> now = expert_tokens();
  const int64_t e = model_.moe.num_experts;
  experts_read_.clear();
  if (counters_seen_.size() == now.size()) {
    bool went_down = false;
    std::vector<int64_t> read(now.size() / static_cast<size_t>(e), 0);
    for (size_t i = 0; i < now.size(); ++i) {
      went_down |= now[i] < counters_seen_[i];
      if (now[i] > counters_seen_[i]) ++read[i / static_cast<size_t>(e)];
    }
    if (!went_down) experts_read_ = std::move(read);
  }
  counters_seen_ = now;
}

Status ModelRunner::read_routing(std::span<const RunnerSeq> batch, RunnerOutput& out) {
  std::vector<int64_t> rows;  // each sampled row's token in the step
  int64_t tokens = 0;
  for (const RunnerSeq& seq : batch) {
    tokens += seq.num_tokens;
    if (seq.sample) rows.push_back(tokens - 1);
  }
  // Each row's router top-k (the always-on experts after it are left out).
  const int64_t layers = expert_ids_.dim(0), t_max = expert_ids_.dim(1), width = expert_ids_.dim(2);
  const int64_t k = model_.moe.experts_per_token;
  std::vector<int32_t> host(static_cast<size_t>(tokens * width));
  out.routing.assign(rows.size(), std::vector<int32_t>(static_cast<size_t>(layers * k)));
  for (int64_t l = 0; l < layers; ++l) {
    backend_.copy_to_host(
        expert_ids_.slice_rows(l, 1).reshaped({t_max, width}).slice_rows(0, tokens), host.data());
    for (size_t r = 0; r < rows.size(); ++r) {
      std::copy_n(host.begin() + rows[r] * width, k, out.routing[r].begin() + l * k);
    }
  }
  return backend_.device_status();
}

Result<RunnerOutput> ModelRunner::read_results(int rows, bool capture_logits) {
  RunnerOutput out;
  if (rows == 0) return out;
  out.tokens.resize(static_cast<size_t>(rows));
  backend_.copy_to_host(out_tokens_.slice_rows(0, rows), out.tokens.data());
  if (capture_logits) {
    const auto v = static_cast<size_t>(model_.vocab_size);
    std::vector<float> all(static_cast<size_t>(rows) * v);
    backend_.copy_to_host(logits_buf_.view(DType::kF32, {rows, model_.vocab_size}), all.data());
    for (size_t i = 0; i < static_cast<size_t>(rows); ++i) {
      out.logits.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(i * v),
                              all.begin() + static_cast<std::ptrdiff_t>((i + 1) * v));
    }
  }
  IB_TRY(backend_.device_status());
  return out;
}

Status ModelRunner::read_prompt_logits(std::span<const RunnerSeq> batch, RunnerOutput& out) {
  const DType dt = backend_.activation_dtype();
  const int64_t t = attn_meta_.num_tokens;
  const int64_t d = model_.hidden_size;
  const int64_t v = model_.vocab_size;
  const int64_t r = std::min(limits_.max_num_seqs, limits_.max_num_batched_tokens);
  // The last layer's state, as forward() left it (the sublayer output is fused into the residual
  // on fused decode steps).
  const bool fused = fused_ops_ && fused_ops_->fused_decode(t);
  const Tensor residual = residual_buf_.view(dt, {t, d});  // (T, D)
  const Tensor sublayer = tmp_buf_.view(dt, {t, d});       // (T, D)
  out.prompt_logits.resize(batch.size());
  int64_t token = 0;  // the entry's first token in the step
  for (size_t i = 0; i < batch.size(); ++i) {
    const RunnerSeq& seq = batch[i];
    std::vector<float>& host = out.prompt_logits[i];
    host.resize(static_cast<size_t>(seq.logits_rows * v));  // (logits_rows, V)
    for (int64_t done = 0; done < seq.logits_rows; done += r) {
      const int64_t n = std::min<int64_t>(r, seq.logits_rows - done);
      const int64_t first = token + seq.logits_offset + done;
      const Tensor sublayer_rows = sublayer.slice_rows(first, n);
      const Tensor logits = logits_buf_.view(DType::kF32, {n, v});  // (n, V) f32
      lm_head_rows(residual.slice_rows(first, n), fused ? nullptr : &sublayer_rows,
                   rows_buf_.view(dt, {n, d}), logits);
      backend_.copy_to_host(logits, host.data() + done * v);
    }
    token += seq.num_tokens;
  }
  return backend_.device_status();
}

StepTraffic ModelRunner::traffic(std::span<const RunnerSeq> batch) const {
  const auto e = static_cast<int64_t>(dtype_size(backend_.activation_dtype()));
  const int64_t kv_per_token = model_.kv_bytes_per_token(kv_.format.dtype);
  StepTraffic t;
  int64_t tokens = 0;
  bool samples = false;
  for (const RunnerSeq& seq : batch) {
    tokens += seq.num_tokens;
    samples = samples || seq.sample;
    const int64_t context = seq.start_pos + seq.num_tokens;
    int64_t windowed =
        model_.sliding_window > 0 ? std::min<int64_t>(context, model_.sliding_window) : context;
    if (limits_.block_sparse.enabled()) {  // the keys the step's last token sees
      windowed = block_sparse_num_keys(limits_.block_sparse, static_cast<int>(context - 1));
    }
    if (model_.alternating_sliding_window) {  // even layers local, odd layers global
      const int64_t local = (model_.num_layers + 1) / 2;
      t.kv_read_bytes += (local * windowed + (model_.num_layers - local) * context) * kv_per_token /
                         model_.num_layers;
    } else {
      t.kv_read_bytes += windowed * kv_per_token;
    }
  }
  t.kv_write_bytes = tokens * kv_per_token;
  t.weight_bytes = layer_weight_bytes_ + tokens * model_.hidden_size * e;
  if (model_.moe.num_experts > 0) {
    // Of each layer's experts a step reads those its tokens picked: after the step, the experts
    // whose routing counter it raised (note_experts_read); before, or when that is unknown, at
    // most min(E, tokens x k).
    const int64_t experts = model_.moe.num_experts;
    const int64_t bound = std::min<int64_t>(experts, tokens * model_.moe.experts_per_token);
    const bool known = experts_read_.size() == weights_.layers.size();
    for (size_t i = 0; i < weights_.layers.size(); ++i) {
      const LayerWeights& l = weights_.layers[i];
      if (l.expert_gate_up.empty()) continue;  // a dense layer (DeepSeek's first layers)
      const auto one_expert =
          static_cast<int64_t>(l.expert_gate_up[0].bytes() + l.expert_down[0].bytes());
      t.weight_bytes -= (experts - (known ? experts_read_[i] : bound)) * one_expert;
    }
  }
  if (samples) {
    t.weight_bytes += static_cast<int64_t>(weights_.lm_head.bytes() + weights_.final_norm.bytes());
  }
  return t;
}

int64_t ModelRunner::graph_bytes() const {
  int64_t total = 0;
  for (const auto& [b, g] : graphs_) total += g->bytes();
  return total;
}

std::vector<int> ModelRunner::graph_buckets() const {
  std::vector<int> out;
  for (const auto& [b, g] : graphs_) out.push_back(b);
  return out;
}

}  // namespace ib::detail
