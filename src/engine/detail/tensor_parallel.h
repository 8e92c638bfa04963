// Internal to engine/: a tensor-parallel group's ranks (issue 19) — each rank's shard of a model's
// weights (model/tensor_parallel.h says which rows and columns), and a step executed on every
// rank at once, one thread a rank, as the single scheduler's batch.
#pragma once

#include <span>

#include "engine/detail/model_runner.h"
#include "model/tensor_parallel.h"

namespace ib::detail {

// Rank `rank`'s shard of weights (dense, loaded for config on `from`), allocated on `to` (tag
// kWeights): its rows of q/k/v (and their bias), gate/up and the LM head (the embedding's rows
// where the model ties them), its columns of o and down; the embedding and the norms whole. A
// user error for weights the plan cannot split yet (quantized formats, mixture-of-experts,
// multi-head latent attention), naming the fix.
Result<ModelWeights> shard_weights(const ModelConfig& config, const ModelWeights& weights,
                                   Backend& from, const TensorParallelPlan& plan, int rank,
                                   Backend& to);

// Executes batch on every rank's runner at once (rank 0 on the calling thread, the others on one
// thread each) and returns rank 0's output, or the first failing rank's error. Every rank's
// runner must have been created with its communicator of one group, in rank order.
Result<RunnerOutput> execute_on_ranks(std::span<ModelRunner* const> ranks,
                                      std::span<const RunnerSeq> batch, bool capture_logits);

}  // namespace ib::detail
