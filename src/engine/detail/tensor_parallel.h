// Internal to engine/: a tensor-parallel group's ranks (issue 19) — each rank's shard of a model's
// weights (model/tensor_parallel.h says which rows and columns), and a step executed on every
// rank at once, one thread a rank, as the single scheduler's batch.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "backend/backend_factory.h"
#include "engine/detail/model_runner.h"
#include "engine/lora.h"
#include "engine/model_weights.h"
#include "model/tensor_parallel.h"

namespace ib::detail {

// Rank `rank`'s shard of weights (dense, loaded for config on `from`), allocated on `to` (tag
// kWeights): its rows of q/k/v (and their bias), gate/up, the LM head and the embedding (V / N
// rows and a row of zeros after them; tied: the LM head is a view of those rows), its columns
// of o and down; the norms whole. A
// user error for weights the plan cannot split yet (quantized formats, mixture-of-experts,
// multi-head latent attention), naming the fix.
Result<ModelWeights> shard_weights(const ModelConfig& config, const ModelWeights& weights,
                                   Backend& from, const TensorParallelPlan& plan, int rank,
                                   Backend& to);

// Rank `rank`'s part of a LoRA adapter for config split by plan, split as the base weights: the
// rows of B for q, k, v, gate and up (A whole), the columns of A for o and down (B whole: each
// rank's update is its share of the sum over the ranks that follows those two).
LoraAdapter shard_lora_adapter(const LoraAdapter& adapter, const ModelConfig& config,
                               const TensorParallelPlan& plan, int rank);

// One persistent thread for each rank but 0 (which runs on the caller's), each attached to its
// rank's communicator (Communicator::attach_thread) before its first task.
class RankThreads {
 public:
  explicit RankThreads(std::vector<Communicator*> comms);  // ranks 1 .. N-1, in order
  ~RankThreads();
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;
  // task(r) on rank r's thread for r >= 1 and task(0) on the calling thread, all at once; returns
  // when every one has returned. One caller at a time.
  void run(const std::function<void(int)>& task);

 private:
  void work(int rank, Communicator* comm);

  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void(int)>* task_ = nullptr;
  uint64_t generation_ = 0;  // tasks given so far
  int finished_ = 0;         // threads done with the current one
  bool stop_ = false;
};

// The ranks of a tensor-parallel engine beyond rank 0, which runs on the engine's own backend:
// each with a CPU backend, its weight shard and its runner (sharing the engine's limits).
struct TensorParallelRanks {
  ModelConfig rank_config;                            // what every rank runs (rank_config)
  std::vector<std::unique_ptr<Communicator>> comms;   // one a rank, rank 0's first
  std::vector<std::unique_ptr<Backend>> backends;     // ranks 1 .. N-1
  std::vector<std::unique_ptr<ModelRunner>> runners;  // ranks 1 .. N-1
  std::unique_ptr<RankThreads> threads;               // ranks 1 .. N-1
};

// Each rank's weights before its runner: the plan's rank config, the group (backend_factory.h's
// create_rank_group: CPU threads, or the GPUs after the engine's over NCCL) and weights[r], rank
// 0's on the engine's backend.
struct RankShards {
  ModelConfig rank_config;
  RankGroup group;
  std::vector<ModelWeights> weights;  // ranks 0 .. N-1
};

// From weights loaded whole on `backend` (freed on return). User errors for a model or weights
// that do not split (plan_tensor_parallel, shard_weights) and for ranks the devices cannot hold
// (check_rank_devices).
Result<RankShards> shard_over_ranks(const ModelConfig& model, int size, ModelWeights whole,
                                    Backend& backend);

// Dummy weights or a safetensors checkpoint (options.format kDummy, kSafetensors; dense,
// quantized at load, or quantized as published: AWQ, GPTQ, FP8, INT8, NF4) loaded on
// `backend` layers_per_part layers at a time (WeightOptions::first_layer; the checkpoint checked
// against the whole model's schema every time), each part split over the ranks and freed before
// the next, so no device holds more than its shard and one part: a model that one GPU cannot
// hold whole still loads over several. The same values as shard_over_ranks of the whole model;
// its errors.
Result<RankShards> load_over_ranks(const ModelConfig& model, int size, const WeightOptions& options,
                                   Backend& backend, int layers_per_part);

// The runners of ranks 1 .. N-1 on shards' backends and weights (moved out of shards; rank 0's
// runner is the engine's own, on shards.weights[0]) and their threads.
Result<TensorParallelRanks> start_ranks(RankShards& shards, const RunnerLimits& limits);

// Every rank's runner in rank order: rank 0's (the engine's own), then ranks'.
std::vector<ModelRunner*> all_runners(ModelRunner& rank0, const TensorParallelRanks& ranks);

// Records every rank's decode graphs at once, each on its rank's thread: each bucket's warm-up
// step runs the collectives, which need every rank. The first failing rank's error.
Status capture_on_ranks(RankThreads& threads, std::span<ModelRunner* const> ranks,
                        const GraphOptions& options, int max_model_len);

// Executes batch on every rank's runner at once (rank 0 on the calling thread, the others on
// their threads) and returns rank 0's output, or the first failing rank's error. Every rank's
// runner must have been created with its communicator of one group, in rank order.
Result<RunnerOutput> execute_on_ranks(RankThreads& threads, std::span<ModelRunner* const> ranks,
                                      std::span<const RunnerSeq> batch, bool capture_logits);

}  // namespace ib::detail
