// A tensor-parallel group's weight shards and lock-step execution (detail/tensor_parallel.h).
#include "engine/detail/tensor_parallel.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "backend/backend_factory.h"

namespace ib::detail {
namespace {

// Copies one rank's part of dense weights from one backend to another through the host: whole
// tensors, row ranges stacked in order, or a column range of every row.
class ShardCopier {
 public:
  ShardCopier(Backend& from, Backend& to, ModelWeights& out) : from_(from), to_(to), out_(out) {}

  Result<Tensor> whole(const Tensor& src) {
    if (src.empty()) return Tensor{};
    return rows(src, {{0, src.dim(0)}});
  }

  // src (N, ...) -> (sum of counts, ...): the ranges' rows, in order.
  Result<Tensor> rows(const Tensor& src, const std::vector<IndexRange>& ranges) {
    if (src.empty()) return Tensor{};
    const std::vector<char> host = read(src);
    const size_t row_bytes = src.bytes() / static_cast<size_t>(src.dim(0));
    std::vector<char> part;
    for (const IndexRange& r : ranges) {
      const char* first = host.data() + static_cast<size_t>(r.begin) * row_bytes;
      part.insert(part.end(), first, first + static_cast<size_t>(r.count) * row_bytes);
    }
    const int64_t n = static_cast<int64_t>(part.size() / row_bytes);
    return src.rank == 1 ? write(part, src.dtype, {n}) : write(part, src.dtype, {n, src.dim(1)});
  }

  // src (V, D) -> (count + 1, D): the range's rows and a row of zeros after them (the row a rank
  // looks up for the tokens outside its range).
  Result<Tensor> rows_and_zero_row(const Tensor& src, IndexRange range) {
    const std::vector<char> host = read(src);
    const size_t row_bytes = src.bytes() / static_cast<size_t>(src.dim(0));
    std::vector<char> part(static_cast<size_t>(range.count + 1) * row_bytes, 0);
    std::memcpy(part.data(), host.data() + static_cast<size_t>(range.begin) * row_bytes,
                static_cast<size_t>(range.count) * row_bytes);
    return write(part, src.dtype, {range.count + 1, src.dim(1)});
  }

  // src (N, K) -> (N, count): columns [begin, begin + count) of every row.
  Result<Tensor> columns(const Tensor& src, IndexRange cols) {
    const std::vector<char> host = read(src);
    const size_t e = dtype_size(src.dtype);
    const auto n = static_cast<size_t>(src.dim(0)), k = static_cast<size_t>(src.dim(1));
    std::vector<char> part(n * static_cast<size_t>(cols.count) * e);
    for (size_t row = 0; row < n; ++row)
      std::memcpy(part.data() + row * static_cast<size_t>(cols.count) * e,
                  host.data() + (row * k + static_cast<size_t>(cols.begin)) * e,
                  static_cast<size_t>(cols.count) * e);
    return write(part, src.dtype, {src.dim(0), cols.count});
  }

 private:
  std::vector<char> read(const Tensor& src) {
    std::vector<char> host(src.bytes());
    from_.copy_to_host(src, host.data());
    return host;
  }

  Result<Tensor> write(const std::vector<char>& host, DType dtype,
                       std::initializer_list<int64_t> shape) {
    Tensor probe(nullptr, dtype, shape);
    IB_ASSIGN_OR_RETURN(Buffer buf, to_.alloc(probe.bytes(), MemoryTag::kWeights));
    Tensor t = buf.view(dtype, shape);
    to_.copy_from_host(t, host.data(), dtype);
    out_.bytes += static_cast<int64_t>(buf.bytes());
    out_.storage.push_back(std::move(buf));
    return t;
  }

  Backend& from_;
  Backend& to_;
  ModelWeights& out_;
};

Status check_splittable(const ModelConfig& config, const ModelWeights& weights, int size) {
  IB_TRY(check_layers_split(config, size));
  for (const LayerWeights& l : weights.layers)
    for (const WeightRef* w : {&l.wqkv, &l.wo, &l.w_gate_up, &l.w_down})
      if (w->format != WeightFormat::kDense)
        return user_error(
            "--tensor-parallel-size above 1 with --quantization is not supported yet; use "
            "dense weights");
  if (weights.lm_head.format != WeightFormat::kDense)
    return user_error("--tensor-parallel-size above 1: the LM head must be dense");
  return Ok{};
}

// Appends rank `rank`'s part of `weights` (a model's layers, and with globals its embedding,
// final norm and LM head) to out, allocated on `to`.
Status shard_into(const ModelConfig& config, const ModelWeights& weights, Backend& from,
                  const TensorParallelPlan& plan, int rank, Backend& to, bool globals,
                  ModelWeights& out) {
  IB_TRY(check_splittable(config, weights, plan.size));
  ShardCopier copy(from, to, out);
  if (globals) {
    // The embedding's and the LM head's rows of the rank's vocabulary (tied: the same memory);
    // the embedding's zero row after them serves the other tokens (ModelRunner's lookup).
    const IndexRange vocab = vocab_rows_of_rank(config, plan, rank);
    IB_ASSIGN_OR_RETURN(out.embed, copy.rows_and_zero_row(weights.embed, vocab));
    IB_ASSIGN_OR_RETURN(out.final_norm, copy.whole(weights.final_norm));
    if (config.tie_word_embeddings) {
      out.lm_head = WeightRef(out.embed.slice_rows(0, vocab.count));
    } else {
      IB_ASSIGN_OR_RETURN(out.lm_head.data, copy.rows(weights.lm_head.data, {vocab}));
    }
  }
  const std::vector<IndexRange> qkv = qkv_rows_of_rank(config, plan, rank);
  const IndexRange o = o_columns_of_rank(config, plan, rank);
  const std::vector<IndexRange> gate_up =
      gate_up_rows_of_rank(plan.intermediate_per_rank, rank, config.intermediate_size);
  const IndexRange down = down_columns_of_rank(plan.intermediate_per_rank, rank);
  for (const LayerWeights& l : weights.layers) {
    LayerWeights s;
    s.k_scale = l.k_scale;
    s.v_scale = l.v_scale;
    IB_ASSIGN_OR_RETURN(s.attn_norm, copy.whole(l.attn_norm));
    IB_ASSIGN_OR_RETURN(s.ffn_norm, copy.whole(l.ffn_norm));
    IB_ASSIGN_OR_RETURN(s.post_attn_norm, copy.whole(l.post_attn_norm));
    IB_ASSIGN_OR_RETURN(s.post_ffn_norm, copy.whole(l.post_ffn_norm));
    IB_ASSIGN_OR_RETURN(s.wqkv.data, copy.rows(l.wqkv.data, qkv));
    IB_ASSIGN_OR_RETURN(s.bqkv, copy.rows(l.bqkv, qkv));
    IB_ASSIGN_OR_RETURN(s.wo.data, copy.columns(l.wo.data, o));
    IB_ASSIGN_OR_RETURN(s.w_gate_up.data, copy.rows(l.w_gate_up.data, gate_up));
    IB_ASSIGN_OR_RETURN(s.w_down.data, copy.columns(l.w_down.data, down));
    out.layers.push_back(std::move(s));
  }
  return Ok{};
}

std::string rank_description(const std::string& whole, int rank, int size) {
  return whole + ", tensor-parallel rank " + std::to_string(rank) + " of " + std::to_string(size);
}

Backend& rank_backend(RankShards& shards, Backend& first, int rank) {
  return rank == 0 ? first : *shards.group.backends[static_cast<size_t>(rank - 1)];
}

// The group of `size` ranks with rank 0 on backend, and no weights yet (plan: the split). The
// CLI's checks before loading, again for callers without them.
Result<RankShards> empty_shards(const ModelConfig& model, int size, Backend& backend,
                                TensorParallelPlan& plan) {
  IB_TRY(check_tensor_parallel(model, size));
  IB_ASSIGN_OR_RETURN(plan, plan_tensor_parallel(model, size));
  RankShards shards;
  shards.rank_config = rank_config(model, plan);
  IB_ASSIGN_OR_RETURN(shards.group, create_rank_group(backend, size));
  shards.weights.resize(static_cast<size_t>(size));
  return shards;
}

}  // namespace

Result<ModelWeights> shard_weights(const ModelConfig& config, const ModelWeights& weights,
                                   Backend& from, const TensorParallelPlan& plan, int rank,
                                   Backend& to) {
  ModelWeights out;
  out.description = rank_description(weights.description, rank, plan.size);
  IB_TRY(shard_into(config, weights, from, plan, rank, to, true, out));
  return out;
}

Result<RankShards> shard_over_ranks(const ModelConfig& model, int size, ModelWeights whole,
                                    Backend& backend) {
  TensorParallelPlan plan;
  IB_ASSIGN_OR_RETURN(RankShards shards, empty_shards(model, size, backend, plan));
  // Rank 0 last: its shard is on the same device as the whole weights.
  for (int r = size - 1; r >= 0; --r) {
    ModelWeights& out = shards.weights[static_cast<size_t>(r)];
    out.description = rank_description(whole.description, r, size);
    IB_TRY(shard_into(model, whole, backend, plan, r, rank_backend(shards, backend, r), true, out));
  }
  return shards;
}

Result<RankShards> load_over_ranks(const ModelConfig& model, int size, const WeightOptions& options,
                                   Backend& backend, int layers_per_part) {
  IB_ASSERT((options.format == LoadFormat::kDummy || options.format == LoadFormat::kSafetensors) &&
                layers_per_part > 0,
            "load_over_ranks: dummy or safetensors weights in parts of at least one layer");
  TensorParallelPlan plan;
  IB_ASSIGN_OR_RETURN(RankShards shards, empty_shards(model, size, backend, plan));
  for (int first = 0; first < model.num_layers; first += layers_per_part) {
    ModelConfig part_config = model;
    part_config.num_layers = std::min(layers_per_part, model.num_layers - first);
    WeightOptions part_options = options;
    part_options.first_layer = first;
    part_options.whole_num_layers = model.num_layers;
    // Each part carries the embedding and the LM head (load_weights makes whole models); the
    // first part's are kept.
    IB_ASSIGN_OR_RETURN(const ModelWeights part, load_weights(part_config, part_options, backend));
    for (int r = 0; r < size; ++r) {
      ModelWeights& out = shards.weights[static_cast<size_t>(r)];
      if (first == 0)
        out.description =
            rank_description(part.description + ", loaded " + std::to_string(layers_per_part) +
                                 (layers_per_part == 1 ? " layer" : " layers") + " at a time",
                             r, size);
      IB_TRY(shard_into(part_config, part, backend, plan, r, rank_backend(shards, backend, r),
                        first == 0, out));
    }
  }  // each part freed before the next loads
  return shards;
}

Result<TensorParallelRanks> start_ranks(RankShards& shards, const RunnerLimits& limits) {
  const size_t size = shards.weights.size();
  IB_ASSERT(shards.group.comms.size() == size && shards.group.backends.size() + 1 == size,
            "start_ranks: a group of the shards' size");
  TensorParallelRanks ranks;
  ranks.rank_config = shards.rank_config;
  ranks.comms = std::move(shards.group.comms);
  for (size_t r = 1; r < size; ++r) {
    std::unique_ptr<Backend> backend = std::move(shards.group.backends[r - 1]);
    IB_ASSIGN_OR_RETURN(auto runner,
                        ModelRunner::create(ranks.rank_config, std::move(shards.weights[r]), limits,
                                            *backend, ranks.comms[r].get()));
    ranks.backends.push_back(std::move(backend));
    ranks.runners.push_back(std::move(runner));
  }
  std::vector<Communicator*> others;
  for (size_t r = 1; r < ranks.comms.size(); ++r) others.push_back(ranks.comms[r].get());
  ranks.threads = std::make_unique<RankThreads>(std::move(others));
  return ranks;
}

std::vector<ModelRunner*> all_runners(ModelRunner& rank0, const TensorParallelRanks& ranks) {
  std::vector<ModelRunner*> out{&rank0};
  for (const auto& r : ranks.runners) out.push_back(r.get());
  return out;
}

Status capture_on_ranks(RankThreads& threads, std::span<ModelRunner* const> ranks,
                        const GraphOptions& options, int max_model_len) {
  std::vector<Status> status(ranks.size(), Ok{});
  threads.run([&](int r) {
    status[static_cast<size_t>(r)] =
        ranks[static_cast<size_t>(r)]->capture_decode_graphs(options, max_model_len);
  });
  for (const Status& s : status) IB_TRY(s);
  return Ok{};
}

RankThreads::RankThreads(std::vector<Communicator*> comms) {
  for (size_t i = 0; i < comms.size(); ++i)
    threads_.emplace_back([this, i, comm = comms[i]] { work(static_cast<int>(i) + 1, comm); });
}

RankThreads::~RankThreads() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void RankThreads::work(int rank, Communicator* comm) {
  comm->attach_thread();
  uint64_t seen = 0;
  for (;;) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    const std::function<void(int)>* task = task_;
    lock.unlock();
    (*task)(rank);
    lock.lock();
    if (++finished_ == static_cast<int>(threads_.size())) cv_.notify_all();
  }
}

void RankThreads::run(const std::function<void(int)>& task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    task_ = &task;
    finished_ = 0;
    ++generation_;
  }
  cv_.notify_all();
  task(0);
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return finished_ == static_cast<int>(threads_.size()); });
}

Result<RunnerOutput> execute_on_ranks(RankThreads& threads, std::span<ModelRunner* const> ranks,
                                      std::span<const RunnerSeq> batch, bool capture_logits) {
  IB_ASSERT(!ranks.empty(), "execute_on_ranks without ranks");
  std::vector<std::optional<Result<RunnerOutput>>> outs(ranks.size());
  threads.run([&](int r) {
    outs[static_cast<size_t>(r)] = ranks[static_cast<size_t>(r)]->execute(batch, capture_logits);
  });
  for (size_t r = 1; r < outs.size(); ++r)
    if (outs[0]->ok() && !outs[r]->ok()) return outs[r]->error();
  return std::move(*outs[0]);
}

}  // namespace ib::detail
