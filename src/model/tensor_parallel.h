// Tensor parallelism's plan (issue 19, Megatron-style): which part of each weight a rank of
// `--tensor-parallel-size N` holds. Attention splits by heads (KV heads replicated where N exceeds
// them), the MLP column then row (gate/up by rows, down by columns), the experts the same way
// within each expert, and the embedding and the LM head by vocabulary.
// One all-reduce follows the attention's o and one the MLP's down; the LM head's logits are
// gathered.
#pragma once

#include <cstdint>
#include <vector>

#include "core/result.h"
#include "model/config.h"

namespace ib {

// Rows [begin, begin + count) of a weight (or columns, for the row-parallel ones).
struct IndexRange {
  int64_t begin = 0;
  int64_t count = 0;
  bool operator==(const IndexRange&) const = default;
};

struct TensorParallelPlan {
  int size = 1;               // N ranks
  int heads_per_rank = 0;     // num_heads / N
  int kv_heads_per_rank = 0;  // num_kv_heads / N, or 1 where N exceeds num_kv_heads
  int kv_replicas = 1;        // ranks holding each KV head: N / num_kv_heads where N exceeds it
  int64_t intermediate_per_rank = 0;         // intermediate_size / N
  int64_t expert_intermediate_per_rank = 0;  // MoE: each expert's intermediate / N
  int64_t shared_intermediate_per_rank = 0;  // DeepSeek: the shared experts' (together) / N
  int64_t vocab_per_rank = 0;                // vocab_size / N
};

// The plan for `size` ranks, or a user error naming the flag, the model's count that `size` does
// not divide and the sizes that would work (1, 2, 4, 8 that do).
Result<TensorParallelPlan> plan_tensor_parallel(const ModelConfig& config, int size);

// Before anything loads (--tensor-parallel-size): the plan's errors. Ok at size 1. The devices
// are backend_factory.h's check_rank_devices.
Status check_tensor_parallel(const ModelConfig& config, int size);

// What one rank runs: config with its heads, KV heads and intermediate sizes divided as plan says
// (hidden size, head_dim, layers and vocabulary unchanged: the LM head's split is its own).
ModelConfig rank_config(const ModelConfig& config, const TensorParallelPlan& plan);

// Rank r's rows of the fused q/k/v weight ((Q + 2 KV, D), Q = heads x head_dim, KV = kv heads x
// head_dim), in the order the rank's own fused weight stacks them: its q heads, its K heads, its
// V heads. Also the rows of the q/k/v bias.
std::vector<IndexRange> qkv_rows_of_rank(const ModelConfig& config, const TensorParallelPlan& plan,
                                         int rank);
// Rank r's columns of o ((D, Q)): its q heads' values.
IndexRange o_columns_of_rank(const ModelConfig& config, const TensorParallelPlan& plan, int rank);
// Rank r's rows of a fused gate/up ((2 F, D), gate rows then up rows) of intermediate F: its
// part of gate, then the same part of up. per_rank: plan's intermediate for that weight.
std::vector<IndexRange> gate_up_rows_of_rank(int64_t per_rank, int rank, int64_t intermediate);
// Rank r's columns of down ((D, F)).
IndexRange down_columns_of_rank(int64_t per_rank, int rank);
// Multi-head latent attention (DeepSeek-V2; config.mla) by heads: rank r's rows of the query
// projection ((H (N + P), D or Rq): each head's nope and rope parts), of kv_b ((H (N + V), R):
// each head's k_nope and v rows) and its columns of o ((D, H V)). The latent projections (q_a,
// kv_a) and their norms stay whole: every rank caches the same latent.
struct MlaRanges {
  IndexRange query, kv_b, o;
};
MlaRanges mla_ranges_of_rank(const ModelConfig& config, const TensorParallelPlan& plan, int rank);
// Rank r's rows of the LM head ((V, D)).
IndexRange vocab_rows_of_rank(const ModelConfig& config, const TensorParallelPlan& plan, int rank);

}  // namespace ib
