#include "model/tensor_parallel.h"

#include <string>

namespace ib {
namespace {

// Why `size` ranks cannot split config ("" when they can), devices aside.
std::string split_problem(const ModelConfig& config, int size) {
  const auto count = [&](const char* what, int64_t n) {
    return std::string(config.name.empty() ? "the model" : config.name) + " has " +
           std::to_string(n) + " " + what + ", which " + std::to_string(size) + " does not divide";
  };
  if (config.num_heads % size != 0) return count("attention heads", config.num_heads);
  const int kv = config.num_kv_heads;
  if (kv > 0 && (kv >= size ? kv % size != 0 : size % kv != 0))
    return count("KV heads", kv) + (kv < size ? " (nor is it a multiple of them)" : "");
  if (config.intermediate_size % size != 0)
    return count("MLP columns (intermediate_size)", config.intermediate_size);
  if (config.vocab_size % size != 0) return count("tokens in its vocabulary", config.vocab_size);
  if (config.moe.num_experts > 0 && config.moe.expert_intermediate_size % size != 0)
    return count("columns in each expert (moe_intermediate_size)",
                 config.moe.expert_intermediate_size);
  return "";
}

}  // namespace

Result<TensorParallelPlan> plan_tensor_parallel(const ModelConfig& config, int size) {
  if (size < 1)
    return user_error("--tensor-parallel-size " + std::to_string(size) +
                      ": the ranks must be at least 1");
  if (const std::string problem = split_problem(config, size); !problem.empty()) {
    std::string sizes;
    for (int n : {1, 2, 4, 8})
      if (split_problem(config, n).empty())
        sizes += (sizes.empty() ? "" : ", ") + std::to_string(n);
    return user_error("--tensor-parallel-size " + std::to_string(size) + ": " + problem +
                      "; sizes that split it: " + sizes);
  }
  TensorParallelPlan plan;
  plan.size = size;
  plan.heads_per_rank = config.num_heads / size;
  plan.kv_heads_per_rank = config.num_kv_heads >= size ? config.num_kv_heads / size : 1;
  plan.kv_replicas = config.num_kv_heads >= size ? 1 : size / config.num_kv_heads;
  plan.intermediate_per_rank = config.intermediate_size / size;
  plan.expert_intermediate_per_rank = config.moe.expert_intermediate_size / size;
  plan.shared_intermediate_per_rank =
      int64_t{config.moe.num_shared_experts} * config.moe.expert_intermediate_size / size;
  plan.vocab_per_rank = config.vocab_size / size;
  return plan;
}

Status check_tensor_parallel(const ModelConfig& config, int size) {
  if (size == 1) return Ok{};
  IB_TRY(plan_tensor_parallel(config, size));
  return Ok{};
}

ModelConfig rank_config(const ModelConfig& config, const TensorParallelPlan& plan) {
  ModelConfig c = config;
  c.num_heads = plan.heads_per_rank;
  c.num_kv_heads = plan.kv_heads_per_rank;
  c.intermediate_size = static_cast<int>(plan.intermediate_per_rank);
  c.moe.expert_intermediate_size = static_cast<int>(plan.expert_intermediate_per_rank);
  return c;
}

std::vector<IndexRange> qkv_rows_of_rank(const ModelConfig& config, const TensorParallelPlan& plan,
                                         int rank) {
  const int64_t d = config.head_dim;
  const int64_t q = int64_t{config.num_heads} * d, kv = int64_t{config.num_kv_heads} * d;
  // Rank r's first KV head: replicated KV heads serve kv_replicas consecutive ranks each.
  const int64_t kv_head = rank / plan.kv_replicas * plan.kv_heads_per_rank;
  const int64_t kv_rows = plan.kv_heads_per_rank * d;
  return {{rank * plan.heads_per_rank * d, plan.heads_per_rank * d},
          {q + kv_head * d, kv_rows},
          {q + kv + kv_head * d, kv_rows}};
}

IndexRange o_columns_of_rank(const ModelConfig& config, const TensorParallelPlan& plan, int rank) {
  const int64_t cols = int64_t{plan.heads_per_rank} * config.head_dim;
  return {rank * cols, cols};
}

std::vector<IndexRange> gate_up_rows_of_rank(int64_t per_rank, int rank, int64_t intermediate) {
  return {{rank * per_rank, per_rank}, {intermediate + rank * per_rank, per_rank}};
}

IndexRange down_columns_of_rank(int64_t per_rank, int rank) {
  return {rank * per_rank, per_rank};
}

MlaRanges mla_ranges_of_rank(const ModelConfig& config, const TensorParallelPlan& plan, int rank) {
  const MlaConfig& m = config.mla;
  const int64_t h = plan.heads_per_rank, first = int64_t{rank} * h;
  const int64_t query = m.qk_nope_head_dim + m.qk_rope_head_dim,
                kv_b = m.qk_nope_head_dim + m.v_head_dim;
  return {{first * query, h * query},
          {first * kv_b, h * kv_b},
          {first * m.v_head_dim, h * m.v_head_dim}};
}

IndexRange vocab_rows_of_rank(const ModelConfig& /*config*/, const TensorParallelPlan& plan,
                              int rank) {
  return {rank * plan.vocab_per_rank, plan.vocab_per_rank};
}

}  // namespace ib
