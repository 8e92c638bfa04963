// Engine: request validation, the step loop (schedule -> forward -> sample -> events) and
// create_engine (weights, activations, then the KV pool from what memory is left).
#include "engine/engine.h"

#include <algorithm>
#include <map>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/clock.h"
#include "engine/detail/block_pool.h"
#include "engine/detail/kv_cache.h"
#include "engine/detail/model_runner.h"
#include "engine/detail/scheduler.h"
#include "engine/detail/step_profiler.h"
#include "engine/detail/tensor_parallel.h"

namespace ib {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kAborted:
      return "abort";
  }
  return "?";
}

namespace {

using detail::Sequence;

// --merge-lora is bounded by memory only, not by the slots' --max-lora-rank.
constexpr int kMaxMergedRank = 1 << 16;

class EngineImpl final : public Engine {
 public:
  EngineImpl(const ModelConfig& model, const EngineConfig& config, Backend& backend,
             std::unique_ptr<detail::ModelRunner> runner, const detail::KvPoolPlan& plan)
      : model_(model),
        config_(config),
        backend_(backend),
        runner_(std::move(runner)),
        block_bytes_(plan.block_bytes),
        capacity_blocks_(plan.num_blocks),
        min_growth_blocks_(std::max(1, plan.initial_blocks)),
        pool_(plan.initial_blocks),
        scheduler_(
            detail::SchedulerConfig{config.block_size, config.max_num_seqs,
                                    config.max_num_batched_tokens, config.batching,
                                    config.static_batch_size, detail::every_layer_window(model)},
            pool_) {
    if (config.kv_growth == KvGrowth::kOnDemand) {
      scheduler_.set_grow([this](int missing) { return grow_pool(missing); });
    }
  }

  // The adapter (null: none) into LoRA slot `slot` of every rank: under tensor parallelism each
  // rank's part of it (shard_lora_adapter), written on the rank's own thread (its device).
  void set_lora_slot_on_ranks(int slot, const LoraAdapter* adapter) {
    if (tp_.runners.empty()) {
      runner_->set_lora_slot(slot, adapter);
      return;
    }
    const TensorParallelPlan plan =
        plan_tensor_parallel(model_, static_cast<int>(tp_runners_.size())).value();
    tp_.threads->run([&](int r) {
      if (adapter == nullptr) {
        tp_runners_[static_cast<size_t>(r)]->set_lora_slot(slot, nullptr);
        return;
      }
      const LoraAdapter part = detail::shard_lora_adapter(*adapter, model_, plan, r);
      tp_runners_[static_cast<size_t>(r)]->set_lora_slot(slot, &part);
    });
  }

  void set_tensor_parallel_ranks(detail::TensorParallelRanks ranks) {
    tp_ = std::move(ranks);
    if (!tp_.runners.empty()) tp_runners_ = detail::all_runners(*runner_, tp_);
  }

  Status add_request(GenerationRequest request) override {
    const std::string who = "request " + std::to_string(request.id) + ": ";
    const auto prompt_len = static_cast<int64_t>(request.prompt_tokens.size());
    if (prompt_len == 0) return user_error(who + "empty prompt; give at least one token");
    if (request.max_tokens <= 0) {
      return user_error(who + "max_tokens must be positive (got " +
                        std::to_string(request.max_tokens) + ")");
    }
    const int64_t total = prompt_len + request.max_tokens;
    if (total > config_.max_model_len) {
      return user_error(who + "prompt (" + std::to_string(prompt_len) + ") + max_tokens (" +
                        std::to_string(request.max_tokens) + ") = " + std::to_string(total) +
                        " tokens exceeds max_model_len " + std::to_string(config_.max_model_len) +
                        "; shorten the prompt or the output, or raise --max-model-len");
    }
    // The last generated token is never fed back, so the cache must hold total - 1 tokens (with a
    // sliding window on every layer, only those a window and a chunk span at once).
    if (scheduler_.max_blocks_held(total - 1) > capacity_blocks_) {
      return user_error(
          who + "needs " + std::to_string(total - 1) + " tokens of KV cache but the pool holds " +
          std::to_string(int64_t{capacity_blocks_} * config_.block_size) +
          "; shorten the request, or raise " +
          (backend_.device_info().kind == "cpu" ? std::string("--kv-cache-memory")
                                                : std::string("--gpu-memory-utilization")));
    }
    for (int32_t t : request.prompt_tokens) {
      if (t < 0 || t >= model_.vocab_size) {
        return user_error(who + "token id " + std::to_string(t) +
                          " is outside the vocabulary [0, " + std::to_string(model_.vocab_size) +
                          ")");
      }
    }
    if (request.prompt_logits_from < -1 || request.prompt_logits_from >= prompt_len) {
      return user_error(who + "prompt_logits_from " + std::to_string(request.prompt_logits_from) +
                        " is outside [-1, " + std::to_string(prompt_len) + ")");
    }
    const SamplingParams& s = request.sampling;
    if (!(s.top_p > 0.0f && s.top_p <= 1.0f)) {
      return user_error(who + "top_p must be in (0, 1] (got " + std::to_string(s.top_p) + ")");
    }
    IB_ASSIGN_OR_RETURN(std::vector<int64_t> image_tokens, check_images(request, who));
    IB_ASSIGN_OR_RETURN(const int mrope_delta, check_mrope_positions(request, who));
    int lora_slot = -1;
    if (!request.lora_name.empty()) {
      const auto it = lora_slots_.find(request.lora_name);
      if (it == lora_slots_.end()) {
        return user_error(who + "unknown LoRA adapter '" + request.lora_name + "'" +
                          (config_.enable_lora ? "; load it first (--lora-modules or "
                                                 "/v1/load_lora_adapter)"
                                               : "; LoRA is off (--enable-lora)"));
      }
      lora_slot = it->second;
    }
    if (!live_ids_.insert(request.id).second) {
      return user_error(who + "id is already in use by a live request; ids must be unique");
    }
    auto seq = std::make_unique<Sequence>(request, model_.eos_token_ids);
    seq->lora_slot = lora_slot;
    seq->images = std::move(request.images);
    seq->image_embeds.resize(seq->images.size());
    seq->image_tokens = std::move(image_tokens);
    seq->mrope_positions = std::move(request.mrope_positions);
    seq->mrope_delta = mrope_delta;
    if (lora_slot >= 0) ++lora_users_[static_cast<size_t>(lora_slot)];
    lora_of_request_[request.id] = lora_slot;
    scheduler_.add(std::move(seq));
    return Ok{};
  }

  Status add_lora(const std::string& name, const LoraAdapter& adapter) override {
    if (!config_.enable_lora) {
      return user_error("LoRA adapter '" + name + "': LoRA is off; start with --enable-lora");
    }
    if (name.empty()) return user_error("a LoRA adapter needs a name");
    if (lora_slots_.count(name) > 0) {
      return user_error("LoRA adapter '" + name + "' is already loaded; unload it first or " +
                        "choose another name");
    }
    if (adapter.rank > config_.max_lora_rank) {
      return user_error("LoRA adapter '" + name + "': rank " + std::to_string(adapter.rank) +
                        " exceeds --max-lora-rank " + std::to_string(config_.max_lora_rank));
    }
    int slot = -1;
    for (size_t i = 0; i < lora_slot_used_.size(); ++i) {
      if (!lora_slot_used_[i]) {
        slot = static_cast<int>(i);
        break;
      }
    }
    if (slot < 0) {
      return user_error("LoRA adapter '" + name + "': all --max-loras " +
                        std::to_string(config_.max_loras) +
                        " slots are in use; unload an adapter first, or raise --max-loras");
    }
    set_lora_slot_on_ranks(slot, &adapter);
    lora_slot_used_[static_cast<size_t>(slot)] = true;
    lora_slots_[name] = slot;
    lora_order_.push_back(name);
    return backend_.device_status();
  }

  Status remove_lora(const std::string& name) override {
    const auto it = lora_slots_.find(name);
    if (it == lora_slots_.end()) {
      return user_error("LoRA adapter '" + name + "' is not loaded");
    }
    const auto slot = static_cast<size_t>(it->second);
    if (lora_users_[slot] > 0) {
      return user_error("LoRA adapter '" + name + "' is in use by " +
                        std::to_string(lora_users_[slot]) +
                        " request(s); unload it when they have finished");
    }
    set_lora_slot_on_ranks(it->second, nullptr);
    lora_slot_used_[slot] = false;
    lora_slots_.erase(it);
    lora_order_.erase(std::find(lora_order_.begin(), lora_order_.end(), name));
    return backend_.device_status();
  }

  std::vector<std::string> lora_names() const override { return lora_order_; }

  Status set_vision_encoder(std::unique_ptr<VisionEncoder> encoder) override {
    if (vision_ != nullptr) return user_error("the engine already has a vision encoder");
    if (has_unfinished()) return user_error("set the vision encoder before the first request");
    vision_ = std::move(encoder);
    return Ok{};
  }
  const VisionEncoder* vision_encoder() const override { return vision_.get(); }

  void abort_request(uint64_t id) override {
    std::unique_ptr<Sequence> seq = scheduler_.remove(id);
    if (!seq) return;
    forget(id);
    TokenEvent e;
    e.request_id = id;
    e.token = -1;
    e.output_index = seq->num_output();
    e.finish = FinishReason::kAborted;
    pending_aborts_.push_back(std::move(e));
  }

  Result<StepOutput> step() override {
    StepOutput out;
    out.stats.start_ns = now_ns();
    step_oom_ = false;
    const detail::SchedulerOutput sched = scheduler_.schedule();
    out.stats.oom = step_oom_;
    if (sched.num_preempted > 0 && first_preemption_step_ < 0) first_preemption_step_ = steps_;
    IB_TRY(encode_images(sched, out.stats));
    std::vector<detail::RunnerSeq> batch;
    for (const detail::ScheduledSeq& s : sched.seqs) {
      if (s.seq->first_scheduled_ns == 0) s.seq->first_scheduled_ns = out.stats.start_ns;
      const Sequence& seq = *s.seq;
      const auto [logits_offset, logits_rows] = prompt_logit_rows(seq, s.num_tokens);
      batch.push_back({seq.tokens.data() + seq.num_computed, s.num_tokens, seq.num_computed,
                       &seq.block_table, s.sample, seq.sampling, seq.num_output(), logits_offset,
                       logits_rows, seq.lora_slot, input_embeds(seq, s.num_tokens),
                       seq.mrope_positions, seq.mrope_delta});
    }
    detail::RunnerOutput result;
    if (!batch.empty()) {
      out.stats.run_start_ns = now_ns();
      if (tp_.runners.empty()) {
        IB_ASSIGN_OR_RETURN(
            result, runner_->execute(batch, config_.capture_logits, config_.capture_routing));
      } else {
        IB_ASSIGN_OR_RETURN(result, detail::execute_on_ranks(*tp_.threads, tp_runners_, batch,
                                                             config_.capture_logits));
      }
      out.stats.launched_ns = result.launched_ns;
      out.stats.synced_ns = result.synced_ns;
      ++steps_;
      out.stats.bytes_moved = runner_->traffic(batch).total();
      // Tensor parallelism: every rank's reads and writes (each its shard and its KV heads).
      for (const auto& r : tp_.runners) out.stats.bytes_moved += r->traffic(batch).total();
      out.stats.device_ns = result.device_ns.value_or(-1);
      out.stats.graph = result.graph;
      take_prompt_logits(sched, batch, result, out);
    }
    const int64_t token_time_ns = now_ns();
    std::vector<std::unique_ptr<Sequence>> finished = scheduler_.update(sched, result.tokens);

    for (TokenEvent& e : pending_aborts_) {
      e.time_ns = token_time_ns;
      out.events.push_back(std::move(e));
    }
    pending_aborts_.clear();
    size_t row = 0;
    for (const detail::ScheduledSeq& s : sched.seqs) {
      if (!s.sample) continue;
      TokenEvent e;
      e.request_id = s.seq->id;
      e.token = s.seq->tokens.back();
      e.output_index = s.seq->num_output() - 1;
      e.time_ns = token_time_ns;
      e.finish = s.seq->finish;
      if (config_.capture_logits) e.logits = std::move(result.logits[row]);
      if (row < result.routing.size()) e.routing = std::move(result.routing[row]);
      if (e.output_index == 0) e.first_scheduled_ns = s.seq->first_scheduled_ns;
      if (e.output_index == 0 && vision_ != nullptr) {
        int64_t visual = 0;
        for (int64_t n : s.seq->image_tokens) visual += n;
        e.visual_tokens = static_cast<int>(visual);
        e.encode_ns = s.seq->encode_ns;
      }
      out.events.push_back(std::move(e));
      ++row;
    }
    for (const auto& seq : finished) forget(seq->id);

    preemptions_ += sched.num_preempted;
    out.stats.num_seqs = static_cast<int>(sched.seqs.size());
    out.stats.num_prefill_tokens = sched.num_prefill_tokens;
    out.stats.num_decode_tokens = sched.num_decode_tokens;
    out.stats.num_preempted = sched.num_preempted;
    out.stats.duration_ns = now_ns() - out.stats.start_ns;
    if (!batch.empty()) profiler_.add(out.stats);
    return out;
  }

  bool has_unfinished() const override {
    return scheduler_.has_unfinished() || !pending_aborts_.empty();
  }

  EngineStats stats() const override {
    EngineStats s;
    s.steps = steps_;
    s.preemptions = preemptions_;
    s.first_preemption_step = first_preemption_step_;
    s.oom = oom_step_ >= 0;
    s.oom_step = oom_step_;
    s.oom_message = oom_message_;
    s.kv_growths = kv_growths_;
    s.kv_growths_staged = kv_growths_staged_;
    s.kv_growth_s = static_cast<double>(kv_growth_ns_) * 1e-9;
    s.kv_blocks_capacity = capacity_blocks_;
    s.num_waiting = scheduler_.num_waiting();
    s.num_running = scheduler_.num_running();
    s.kv_blocks_total = pool_.num_blocks();
    s.kv_blocks_used = pool_.num_used();
    s.kv_blocks_peak = pool_.peak_used();
    s.kv_block_bytes = block_bytes_;
    s.weight_bytes = runner_->weights().bytes;
    s.max_model_len = config_.max_model_len;
    s.memory = backend_.memory().snapshot();
    if (!tp_.backends.empty()) {
      s.rank_memory.push_back(s.memory);
      for (const auto& b : tp_.backends) s.rank_memory.push_back(b->memory().snapshot());
    }
    s.expert_tokens = runner_->expert_tokens();
    s.num_experts = model_.moe.num_experts;
    s.experts_per_token = model_.moe.experts_per_token;
    return s;
  }

  EngineProfile profile() const override {
    EngineProfile p = profiler_.summary();
    p.num_graphs = runner_->num_graphs();
    p.graph_buckets = runner_->graph_buckets();
    p.graph_bytes = runner_->graph_bytes();
    p.copy_ceiling_bytes_per_s = backend_.copy_ceiling_bytes_per_s();
    return p;
  }

  void reset_profile() override { profiler_ = detail::StepProfiler{}; }

  const ModelConfig& model_config() const override { return model_; }
  const EngineConfig& config() const override { return config_; }
  const std::string& weights_description() const override { return runner_->weights().description; }
  Backend& backend() override { return backend_; }
  TensorParallelGroup tensor_parallel_group() const override {
    TensorParallelGroup g;
    if (tp_.comms.empty()) return g;
    g.communicator = tp_.comms[0]->describe();
    g.devices.push_back(backend_.device_info());
    for (const auto& b : tp_.backends) g.devices.push_back(b->device_info());
    return g;
  }
  std::vector<CalibrationRank> calibration_ranks() override {
    std::vector<CalibrationRank> out{{&runner_->mutable_weights(), &backend_}};
    for (size_t r = 0; r < tp_.runners.size(); ++r)
      out.push_back({&tp_.runners[r]->mutable_weights(), tp_.backends[r].get()});
    return out;
  }
  Status record_graphs_again() override {
    if (has_unfinished()) return user_error("recording graphs needs an idle engine");
    if (runner_->num_graphs() == 0) return Ok{};
    const detail::GraphOptions graphs{config_.max_graph_batch, config_.max_graph_context};
    if (tp_.threads)
      return detail::capture_on_ranks(*tp_.threads, tp_runners_, graphs, config_.max_model_len);
    return runner_->capture_decode_graphs(graphs, config_.max_model_len);
  }

 private:
  // A request has ended: its id is free again and its adapter has one user less.
  void forget(uint64_t id) {
    live_ids_.erase(id);
    const auto it = lora_of_request_.find(id);
    if (it == lora_of_request_.end()) return;
    if (it->second >= 0) --lora_users_[static_cast<size_t>(it->second)];
    lora_of_request_.erase(it);
  }

  // A request's images: an encoder to take them, each of its size, in order on placeholders that
  // fit the prompt, and no placeholder without an image. Returns each image's visual tokens.
  Result<std::vector<int64_t>> check_images(const GenerationRequest& request,
                                            const std::string& who) const {
    std::vector<int64_t> tokens;
    if (request.images.empty()) return tokens;
    if (vision_ == nullptr) {
      return user_error(who + "the model '" + model_.name +
                        "' takes no images (it has no vision tower); send text only");
    }
    const int32_t id = vision_->image_token_id();
    const auto len = static_cast<int64_t>(request.prompt_tokens.size());
    int64_t next_free = 0, total = 0;
    for (size_t i = 0; i < request.images.size(); ++i) {
      const ImageInput& image = request.images[i];
      const std::string name = who + "image " + std::to_string(i) + ": ";
      auto count = vision_->image_tokens(image);
      if (!count.ok()) return user_error(name + count.error().message);
      const int64_t n = *count;
      if (static_cast<int64_t>(image.pixel_values.size()) != vision_->pixel_values(image)) {
        return user_error(name + std::to_string(image.pixel_values.size()) +
                          " pixel values; the vision encoder takes " +
                          std::to_string(vision_->pixel_values(image)));
      }
      if (image.start_pos < next_free || image.start_pos + n > len) {
        return user_error(name + "visual tokens at [" + std::to_string(image.start_pos) + ", " +
                          std::to_string(image.start_pos + n) +
                          ") overlap the previous image's or leave the prompt of " +
                          std::to_string(len) + " tokens");
      }
      for (int64_t p = image.start_pos; p < image.start_pos + n; ++p) {
        if (request.prompt_tokens[static_cast<size_t>(p)] != id) {
          return user_error(name + "prompt position " + std::to_string(p) +
                            " is not the image token " + std::to_string(id) +
                            "; expand each placeholder to " + std::to_string(n) + " image tokens");
        }
      }
      next_free = image.start_pos + n;
      total += n;
      tokens.push_back(n);
    }
    const auto placeholders =
        std::count(request.prompt_tokens.begin(), request.prompt_tokens.end(), id);
    if (placeholders != total) {
      return user_error(who + "the prompt holds " + std::to_string(placeholders) +
                        " image tokens but its " + std::to_string(request.images.size()) +
                        " image(s) take " + std::to_string(total));
    }
    return tokens;
  }

  // A request's 3-D positions: only for a multimodal-RoPE model, three per prompt token, none
  // negative. Returns what the positions after the prompt add to their index (max + 1 - P).
  Result<int> check_mrope_positions(const GenerationRequest& request,
                                    const std::string& who) const {
    const std::vector<int32_t>& p = request.mrope_positions;
    if (p.empty() && !request.images.empty() && !model_.mrope_section.empty()) {
      return user_error(who + "images for model '" + model_.name +
                        "' need its M-RoPE positions (3, prompt length); a Qwen2-VL request "
                        "gets them from prepare_qwen2vl_request");
    }
    if (p.empty()) return 0;
    if (model_.mrope_section.empty()) {
      return user_error(who + "3-D (M-RoPE) positions for model '" + model_.name +
                        "', which has no mrope_section; send none");
    }
    const size_t len = request.prompt_tokens.size();
    if (p.size() != 3 * len) {
      return user_error(who + std::to_string(p.size()) + " M-RoPE positions for a prompt of " +
                        std::to_string(len) + " tokens; give (3, prompt length)");
    }
    if (*std::min_element(p.begin(), p.end()) < 0) {
      return user_error(who + "a negative M-RoPE position");
    }
    const int64_t max_pos = *std::max_element(p.begin(), p.end());
    return static_cast<int>(max_pos + 1 - static_cast<int64_t>(len));
  }

  // Runs the vision encoder once over every image that this step's chunks reach and that has no
  // embeddings yet (a preempted sequence keeps its own); its pixel values are freed after.
  Status encode_images(const detail::SchedulerOutput& sched, StepStats& stats) {
    if (vision_ == nullptr) return Ok{};
    std::vector<std::pair<Sequence*, size_t>> todo;
    std::vector<const ImageInput*> images;
    for (const detail::ScheduledSeq& s : sched.seqs) {
      Sequence& seq = *s.seq;
      for (size_t i = 0; i < seq.images.size(); ++i) {
        const int begin = seq.images[i].start_pos;
        if (seq.image_embeds[i].empty() && begin < seq.num_computed + s.num_tokens &&
            begin + seq.image_tokens[i] > seq.num_computed) {
          todo.emplace_back(&seq, i);
          images.push_back(&seq.images[i]);
        }
      }
    }
    if (todo.empty()) return Ok{};
    const int64_t start = now_ns();
    int64_t rows = 0;
    for (const auto& [seq, i] : todo) rows += seq->image_tokens[i];
    const DType act = backend_.activation_dtype();
    const int64_t d = model_.hidden_size;
    IB_ASSIGN_OR_RETURN(
        Buffer buffer,
        backend_.alloc(static_cast<size_t>(rows * d) * dtype_size(act), MemoryTag::kActivations));
    auto storage = std::make_shared<const Buffer>(std::move(buffer));
    const Tensor all = storage->view(act, {rows, d});  // (visual tokens, D)
    IB_TRY(vision_->encode_images(images, all));
    backend_.synchronize();  // the encoder's time is until the device has finished it
    IB_TRY(backend_.device_status());
    const int64_t elapsed = now_ns() - start;
    Sequence* last = nullptr;
    int64_t from = 0;
    for (const auto& [seq, i] : todo) {
      const int64_t n = seq->image_tokens[i];
      seq->image_embeds[i] = {storage, all.slice_rows(from, n)};
      from += n;
      std::vector<float>().swap(seq->images[i].pixel_values);
      if (seq != last) seq->encode_ns += elapsed;
      last = seq;
    }
    stats.num_images_encoded = static_cast<int>(todo.size());
    stats.encode_ns = elapsed;
    return Ok{};
  }

  // The rows of a scheduled chunk that take visual embeddings instead of the image token's.
  std::vector<detail::InputEmbeds> input_embeds(const Sequence& seq, int num_tokens) const {
    std::vector<detail::InputEmbeds> out;
    const int from = seq.num_computed;
    const int to = seq.num_computed + num_tokens;
    for (size_t i = 0; i < seq.images.size(); ++i) {
      const auto n = static_cast<int>(seq.image_tokens[i]);
      const int begin = std::max(from, seq.images[i].start_pos);
      const int end = std::min(to, seq.images[i].start_pos + n);
      if (begin >= end) continue;
      const Tensor data =
          seq.image_embeds[i].rows.slice_rows(begin - seq.images[i].start_pos, end - begin);
      out.push_back({begin - from, end - begin, data});
    }
    return out;
  }

  // The rows of a scheduled chunk whose prompt logits are due: {offset in the chunk, count}.
  static std::pair<int, int> prompt_logit_rows(const Sequence& seq, int num_tokens) {
    if (seq.prompt_logits_next < 0) return {0, 0};
    const int from = std::max(seq.num_computed, seq.prompt_logits_next);
    const int to = std::min(seq.num_computed + num_tokens, seq.num_prompt_tokens);
    return to > from ? std::pair{from - seq.num_computed, to - from} : std::pair{0, 0};
  }

  // Moves the runner's prompt-logit rows into the step's output; those positions are done.
  static void take_prompt_logits(const detail::SchedulerOutput& sched,
                                 std::span<const detail::RunnerSeq> batch,
                                 detail::RunnerOutput& result, StepOutput& out) {
    for (size_t i = 0; i < batch.size() && i < result.prompt_logits.size(); ++i) {
      if (batch[i].logits_rows == 0) continue;
      Sequence& seq = *sched.seqs[i].seq;
      PromptLogits p;
      p.request_id = seq.id;
      p.start_pos = batch[i].start_pos + batch[i].logits_offset;
      p.num_positions = batch[i].logits_rows;
      p.logits = std::move(result.prompt_logits[i]);
      seq.prompt_logits_next = p.start_pos + p.num_positions;
      out.prompt_logits.push_back(std::move(p));
    }
  }

  // On-demand growth (the scheduler's hook): by at least missing blocks, normally by a chunk
  // (half the pool, at least the initial size); a refused chunk is retried at exactly missing.
  // A refusal of that is the engine's OOM: recorded once, and the pool grows no more. The time
  // spent here, refusals included, adds to kv_growth_s.
  static constexpr int64_t kAllocSlackBytes = 4096;  // the allocator's rounding, and then some
  bool grow_pool(int missing) {
    const int current = pool_.num_blocks();
    if (oom_step_ >= 0 || current + missing > capacity_blocks_) return false;
    const int64_t start_ns = now_ns();
    const int chunk = std::max(min_growth_blocks_, current / 2);
    const int wanted = std::min(capacity_blocks_, current + std::max(missing, chunk));
    // Every rank's cache (tensor parallelism: each its own device's, of the rank's KV heads),
    // rank 0's first; a refusal on any rank refuses the growth. A rank that grew before another
    // refused keeps its larger cache (the pool's blocks index no further than the smallest).
    auto grow = [&](int blocks) -> Result<detail::KvGrowthPath> {
      const ModelConfig& m = tp_.runners.empty() ? model_ : tp_.rank_config;
      detail::KvGrowthPath path = detail::KvGrowthPath::kDeviceCopy;
      for (size_t r = 0; r < tp_.runners.size() + 1; ++r) {
        detail::KvCache& kv = r == 0 ? runner_->kv_cache() : tp_.runners[r - 1]->kv_cache();
        Backend& b = r == 0 ? backend_ : *tp_.backends[r - 1];
        if (!kv.layers.empty() && kv.layers[0].k.dim(0) >= blocks) continue;
        IB_ASSIGN_OR_RETURN(const detail::KvGrowthPath p,
                            detail::grow_kv_cache(kv, m, blocks, config_.block_size, b, staging_));
        if (p == detail::KvGrowthPath::kHostStaged) path = p;
      }
      return path;
    };
    auto grown = grow(wanted);
    int grown_to = wanted;
    // Refused: next the most the cap holds once the old pool is freed (so that a pool near the
    // cap grows there once, instead of by a few blocks, each a full copy, at every step), and
    // last exactly the missing blocks.
    std::vector<int> fallbacks;
    if (const auto limit = backend_.memory().limit_bytes(); limit && block_bytes_ > 0) {
      const int64_t others =
          backend_.memory().snapshot().allocated_bytes - int64_t{current} * block_bytes_;
      const int64_t fit = (*limit - others - kAllocSlackBytes) / block_bytes_;
      if (fit > current + missing && fit < wanted) fallbacks.push_back(static_cast<int>(fit));
    }
    if (wanted > current + missing) fallbacks.push_back(current + missing);
    for (size_t i = 0; i < fallbacks.size() && !grown.ok(); ++i) {
      grown_to = fallbacks[i];
      grown = grow(grown_to);
    }
    kv_growth_ns_ += now_ns() - start_ns;
    if (!grown.ok()) {
      oom_step_ = steps_;
      oom_message_ = grown.error().message;
      step_oom_ = true;
      return false;
    }
    pool_.grow(grown_to);
    ++kv_growths_;
    if (*grown == detail::KvGrowthPath::kHostStaged) ++kv_growths_staged_;
    return true;
  }

  ModelConfig model_;
  EngineConfig config_;  // with max_model_len and num_kv_blocks resolved
  Backend& backend_;
  std::unique_ptr<detail::ModelRunner> runner_;
  // Tensor parallelism: ranks 1 .. N-1 (runner_ is rank 0), and every rank's runner in order.
  detail::TensorParallelRanks tp_;
  std::vector<detail::ModelRunner*> tp_runners_;
  int64_t block_bytes_ = 0;
  int capacity_blocks_ = 0;
  int min_growth_blocks_ = 1;
  detail::BlockPool pool_;
  detail::Scheduler scheduler_;
  std::unordered_set<uint64_t> live_ids_;
  std::vector<TokenEvent> pending_aborts_;
  std::unique_ptr<VisionEncoder> vision_;
  int64_t steps_ = 0;
  int64_t preemptions_ = 0;
  int64_t first_preemption_step_ = -1;
  int64_t oom_step_ = -1;
  std::string oom_message_;
  bool step_oom_ = false;
  int kv_growths_ = 0;
  int kv_growths_staged_ = 0;
  int64_t kv_growth_ns_ = 0;
  detail::HostStaging staging_;  // reused by staged growths (see grow_kv_cache)
  detail::StepProfiler profiler_;
  // LoRA: adapter name -> device slot, in load order; per slot whether it is held and by how
  // many live requests; each live request's slot (-1: base).
  std::map<std::string, int> lora_slots_;
  std::vector<std::string> lora_order_;
  std::vector<bool> lora_slot_used_ = std::vector<bool>(static_cast<size_t>(config_.max_loras));
  std::vector<int> lora_users_ = std::vector<int>(static_cast<size_t>(config_.max_loras));
  std::unordered_map<uint64_t, int> lora_of_request_;
};

// A multi-head latent attention cache holds act values only (backend/ops.h, MlaOps).
Status check_latent_cache_dtype(const ModelConfig& model, const EngineConfig& config,
                                Backend& backend) {
  if (model.mla.kv_lora_rank == 0) return Ok{};
  IB_ASSIGN_OR_RETURN(const DType dtype,
                      kv_cache_dtype_for(config.kv_cache_dtype, backend.activation_dtype()));
  if (dtype == backend.activation_dtype()) return Ok{};
  return user_error("--kv-cache-dtype " + config.kv_cache_dtype + ": model '" + model.name +
                    "' caches multi-head latents in the activation dtype only; drop "
                    "--kv-cache-dtype");
}

// A tensor-parallel engine's dummy weights and safetensors checkpoints load this many layers at
// a time (load_over_ranks): about 13 GiB of Llama-3-70B in bf16 beside rank 0's growing shard.
constexpr int kLayersPerPart = 8;

Result<std::unique_ptr<Engine>> create_engine_impl(const ModelConfig& model, ModelWeights weights,
                                                   std::optional<detail::RankShards> shards,
                                                   const EngineConfig& config, Backend& backend);

}  // namespace

Status check_block_sparse(const ModelConfig& model, std::string_view pattern) {
  if (pattern.empty()) return Ok{};
  if (model.mla.kv_lora_rank > 0) {
    return user_error("--block-sparse-attention: model '" + model.name +
                      "' uses multi-head latent attention, which has no block-sparse form here; "
                      "drop the flag or use a model with multi-head or grouped-query attention");
  }
  if (model.sliding_window > 0) {
    return user_error("--block-sparse-attention: model '" + model.name + "' has a " +
                      std::to_string(model.sliding_window) +
                      "-token sliding window, and the engine does not combine the two masks; "
                      "drop the flag or use a model without a window (Llama, Qwen2, Phi-3-mini)");
  }
  return Ok{};
}

Result<std::unique_ptr<Engine>> create_engine(const ModelConfig& model,
                                              const WeightOptions& weights,
                                              const EngineConfig& config, Backend& backend) {
  IB_TRY(model.validate());
  IB_TRY(model.check_supported());
  IB_TRY(config.validate());
  IB_ASSIGN_OR_RETURN(const Architecture* arch, find_architecture(model));
  IB_TRY(arch->check_backend(model, backend));  // before the weights load
  if (model.mla.kv_lora_rank == 0) IB_TRY(backend.supports_attention(attention_shape(model)));
  IB_TRY(check_latent_cache_dtype(model, config, backend));
  IB_TRY(check_block_sparse(model, config.block_sparse_attention));
  if (config.enable_lora) IB_TRY(detail::ModelRunner::check_lora_runs(model, backend));
  const bool vlm = model.hf_architecture == "LlavaForConditionalGeneration" ||
                   model.hf_architecture == "Qwen2VLForConditionalGeneration";
  if (vlm && backend.vision_ops() == nullptr) {
    return user_error("model '" + model.name + "' is a vision-language model (" +
                      model.hf_architecture + ") and the " + backend.device_info().kind +
                      " backend has no vision ops yet; run it with --device cpu");
  }
  WeightOptions options = weights;
  IB_ASSIGN_OR_RETURN(options.quantization, quantization_weight_format(config.quantization));
  options.asymmetric = quantization_is_asymmetric(config.quantization);
  options.gguf_as_stored = config.quantization == "gguf";
  // Dummy weights and safetensors checkpoints of a tensor-parallel engine: loaded a few layers at
  // a time and split as they come, so no GPU holds the whole model.
  const LoadFormat format = resolved_load_format(options);
  // (A GGUF file loads whole, then splits.)
  if (config.tensor_parallel_size > 1 && !config.merge_lora && !options.gguf_as_stored &&
      (format == LoadFormat::kDummy || format == LoadFormat::kSafetensors)) {
    options.format = format;
    IB_ASSIGN_OR_RETURN(detail::RankShards shards,
                        detail::load_over_ranks(model, config.tensor_parallel_size, options,
                                                backend, kLayersPerPart));
    return create_engine_impl(model, ModelWeights{}, std::move(shards), config, backend);
  }
  IB_ASSIGN_OR_RETURN(ModelWeights w, load_weights(model, options, backend));
  return create_engine_with_weights(model, std::move(w), config, backend);
}

Result<std::unique_ptr<Engine>> create_engine_with_weights(const ModelConfig& model,
                                                           ModelWeights weights,
                                                           const EngineConfig& config,
                                                           Backend& backend) {
  return create_engine_impl(model, std::move(weights), std::nullopt, config, backend);
}

namespace {

Result<std::unique_ptr<Engine>> create_engine_impl(const ModelConfig& model, ModelWeights weights,
                                                   std::optional<detail::RankShards> shards,
                                                   const EngineConfig& config, Backend& backend) {
  IB_TRY(model.validate());
  IB_TRY(model.check_supported());
  IB_TRY(config.validate());
  std::vector<std::pair<std::string, LoraAdapter>> adapters;  // --lora-modules, read first
  for (const std::string& item : config.lora_modules) {
    IB_ASSIGN_OR_RETURN(const LoraModuleSpec spec, parse_lora_module(item));
    IB_ASSIGN_OR_RETURN(
        LoraAdapter adapter,
        load_lora_adapter(spec.path, model,
                          config.merge_lora ? kMaxMergedRank : config.max_lora_rank));
    adapters.emplace_back(spec.name, std::move(adapter));
  }
  IB_TRY(check_block_sparse(model, config.block_sparse_attention));
  if (config.merge_lora) IB_TRY(merge_lora(model, adapters.at(0).second, weights, backend));
  const int requested_len =
      config.max_model_len > 0 ? config.max_model_len : model.max_position_embeddings;
  detail::RunnerLimits limits{config.max_num_batched_tokens, config.max_num_seqs, requested_len,
                              config.block_size};
  IB_ASSIGN_OR_RETURN(limits.block_sparse, parse_block_sparse(config.block_sparse_attention));
  if (config.enable_lora) {
    limits.lora_slots = config.max_loras;
    limits.lora_rank = config.max_lora_rank;
  }
  // Tensor parallelism: every rank runs rank_model; rank 0 on this backend, the others on their
  // own (their KV caches below as large as rank 0's).
  detail::TensorParallelRanks tp;
  const ModelConfig* rank_model = &model;
  if (config.tensor_parallel_size > 1) {  // config.validate() refused what the ranks cannot run
    if (!shards) {
      IB_ASSIGN_OR_RETURN(shards, detail::shard_over_ranks(model, config.tensor_parallel_size,
                                                           std::move(weights), backend));
    }
    weights = std::move(shards->weights[0]);
    IB_ASSIGN_OR_RETURN(tp, detail::start_ranks(*shards, limits));
    rank_model = &tp.rank_config;
  }
  IB_ASSIGN_OR_RETURN(auto runner,
                      detail::ModelRunner::create(*rank_model, std::move(weights), limits, backend,
                                                  tp.comms.empty() ? nullptr : tp.comms[0].get()));

  detail::KvPoolInputs in;
  in.model = rank_model;
  in.config = &config;
  in.device = backend.device_info();
  detail::KvCacheFormat format;
  IB_ASSIGN_OR_RETURN(format.dtype,
                      kv_cache_dtype_for(config.kv_cache_dtype, backend.activation_dtype()));
  if (format.dtype == DType::kF8E4M3) {  // the checkpoint's scales (1.0 where it has none)
    for (const LayerWeights& l : runner->weights().layers) {
      format.k_scales.push_back(l.k_scale);
      format.v_scales.push_back(l.v_scale);
    }
  }
  IB_TRY(check_latent_cache_dtype(model, config, backend));
  in.kv_dtype = format.dtype;
  in.engine_allocated_bytes = backend.memory().snapshot().allocated_bytes;
  in.memory_limit_bytes = backend.memory().limit_bytes();
  in.on_demand = config.kv_growth == KvGrowth::kOnDemand;
  IB_ASSIGN_OR_RETURN(detail::KvPoolPlan plan, detail::plan_kv_pool(in));
  // Tensor parallelism: one pool per GPU, every rank's as large as the tightest rank's (each
  // rank's device and what its tracked allocator already holds).
  for (const auto& rank_backend : tp.backends) {
    detail::KvPoolInputs rank_in = in;
    rank_in.device = rank_backend->device_info();
    rank_in.engine_allocated_bytes = rank_backend->memory().snapshot().allocated_bytes;
    rank_in.memory_limit_bytes = rank_backend->memory().limit_bytes();
    IB_ASSIGN_OR_RETURN(const detail::KvPoolPlan rank_plan, detail::plan_kv_pool(rank_in));
    if (rank_plan.num_blocks < plan.num_blocks) plan = rank_plan;
  }
  IB_ASSIGN_OR_RETURN(detail::KvCache kv,
                      detail::allocate_kv_cache(*rank_model, plan.initial_blocks, config.block_size,
                                                format, backend));
  runner->attach_kv_cache(std::move(kv));
  for (size_t r = 0; r < tp.runners.size(); ++r) {
    IB_ASSIGN_OR_RETURN(detail::KvCache rank_kv,
                        detail::allocate_kv_cache(*rank_model, plan.initial_blocks,
                                                  config.block_size, format, *tp.backends[r]));
    tp.runners[r]->attach_kv_cache(std::move(rank_kv));
  }
  if (config.use_graphs && !in.on_demand) {
    const detail::GraphOptions graphs{config.max_graph_batch, config.max_graph_context};
    if (tp.threads) {  // every rank at once: the warm-up steps' collectives need them all
      IB_TRY(detail::capture_on_ranks(*tp.threads, detail::all_runners(*runner, tp), graphs,
                                      plan.max_model_len));
    } else {
      IB_TRY(runner->capture_decode_graphs(graphs, plan.max_model_len));
    }
  }

  EngineConfig resolved = config;
  resolved.max_model_len = plan.max_model_len;
  resolved.num_kv_blocks = plan.num_blocks;
  if (in.on_demand) resolved.use_graphs = false;
  auto impl = std::make_unique<EngineImpl>(model, resolved, backend, std::move(runner), plan);
  impl->set_tensor_parallel_ranks(std::move(tp));
  std::unique_ptr<Engine> engine = std::move(impl);
  if (!config.merge_lora) {
    for (const auto& [name, adapter] : adapters) IB_TRY(engine->add_lora(name, adapter));
  }
  return engine;
}

}  // namespace
}  // namespace ib
