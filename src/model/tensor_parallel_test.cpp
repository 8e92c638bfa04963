// Tensor parallelism's plan on the published shapes: the splits of heads, KV heads (replicated
// where the ranks outnumber them), MLP and expert columns and the vocabulary; that the ranks'
// parts tile each weight exactly once (KV heads once per replica); and the errors for sizes that
// do not split a model or exceed the GPUs.
#include "model/tensor_parallel.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/presets.h"

namespace ib {
namespace {

ModelConfig preset(const std::string& name) {
  Result<ModelConfig> c = find_preset(name);
  EXPECT_TRUE(c.ok()) << name;
  return c.ok() ? c.value() : ModelConfig{};
}

TEST(TensorParallelPlan, Llama3_70bAtTwoAndEight) {
  const ModelConfig c = preset("llama-3-70b");  // 64 heads, 8 KV heads, F 28,672, V 128,256
  const TensorParallelPlan two = plan_tensor_parallel(c, 2).value();
  EXPECT_EQ(two.heads_per_rank, 32);
  EXPECT_EQ(two.kv_heads_per_rank, 4);
  EXPECT_EQ(two.kv_replicas, 1);
  EXPECT_EQ(two.intermediate_per_rank, 14336);
  EXPECT_EQ(two.vocab_per_rank, 64128);
  const ModelConfig r = rank_config(c, two);
  EXPECT_EQ(r.num_heads, 32);
  EXPECT_EQ(r.num_kv_heads, 4);
  EXPECT_EQ(r.intermediate_size, 14336);
  EXPECT_EQ(r.hidden_size, c.hidden_size);
  EXPECT_EQ(r.head_dim, c.head_dim);
  EXPECT_EQ(r.vocab_size, c.vocab_size);
  const TensorParallelPlan eight = plan_tensor_parallel(c, 8).value();
  EXPECT_EQ(eight.kv_heads_per_rank, 1);
  EXPECT_EQ(eight.kv_replicas, 1);
  // Rank 3 of 8: q heads 24-31, KV head 3 (K at Q + 3 x 128, V at Q + KV + 3 x 128).
  const int64_t q = 64 * 128, kv = 8 * 128;
  EXPECT_EQ(
      qkv_rows_of_rank(c, eight, 3),
      (std::vector<IndexRange>{{24 * 128, 8 * 128}, {q + 3 * 128, 128}, {q + kv + 3 * 128, 128}}));
  EXPECT_EQ(o_columns_of_rank(c, eight, 3), (IndexRange{24 * 128, 8 * 128}));
  EXPECT_EQ(gate_up_rows_of_rank(eight.intermediate_per_rank, 3, c.intermediate_size),
            (std::vector<IndexRange>{{3 * 3584, 3584}, {28672 + 3 * 3584, 3584}}));
  EXPECT_EQ(down_columns_of_rank(eight.intermediate_per_rank, 3), (IndexRange{3 * 3584, 3584}));
}

TEST(TensorParallelPlan, KvHeadsReplicatedWhereTheRanksOutnumberThem) {
  ModelConfig c = preset("llama-3-8b");  // 32 heads, 8 KV heads
  c.num_kv_heads = 2;                    // as a 2-KV-head model would have
  const TensorParallelPlan p = plan_tensor_parallel(c, 8).value();
  EXPECT_EQ(p.heads_per_rank, 4);
  EXPECT_EQ(p.kv_heads_per_rank, 1);
  EXPECT_EQ(p.kv_replicas, 4);
  const int64_t q = 32 * 128, kv = 2 * 128;
  for (int rank = 0; rank < 8; ++rank) {
    const int64_t head = rank / 4;  // ranks 0-3 hold KV head 0, ranks 4-7 KV head 1
    EXPECT_EQ(qkv_rows_of_rank(c, p, rank)[1], (IndexRange{q + head * 128, 128})) << rank;
    EXPECT_EQ(qkv_rows_of_rank(c, p, rank)[2], (IndexRange{q + kv + head * 128, 128})) << rank;
  }
}

// Over the ranks, every row of q/k/v (K and V rows once per replica), gate/up, the vocabulary,
// and every column of o and down is held exactly that many times.
TEST(TensorParallelPlan, RanksTileEveryWeight) {
  for (const char* name : {"llama-3-8b", "qwen2-7b", "mistral-7b-v0.1", "mixtral-8x7b"}) {
    const ModelConfig c = preset(name);
    for (int n : {1, 2, 4, 8}) {
      const Result<TensorParallelPlan> plan = plan_tensor_parallel(c, n);
      if (!plan.ok()) continue;  // qwen2-7b: 28 heads, 4 KV heads
      const TensorParallelPlan& p = plan.value();
      const int64_t q = int64_t{c.num_heads} * c.head_dim;
      const int64_t kv = int64_t{c.num_kv_heads} * c.head_dim;
      std::vector<int> qkv_held(static_cast<size_t>(q + 2 * kv), 0), o_held(q, 0),
          gate_up_held(2 * static_cast<size_t>(c.intermediate_size), 0),
          down_held(static_cast<size_t>(c.intermediate_size), 0),
          vocab_held(static_cast<size_t>(c.vocab_size), 0);
      const auto mark = [](std::vector<int>& held, IndexRange r) {
        for (int64_t i = r.begin; i < r.begin + r.count; ++i) ++held[static_cast<size_t>(i)];
      };
      for (int rank = 0; rank < n; ++rank) {
        for (IndexRange r : qkv_rows_of_rank(c, p, rank)) mark(qkv_held, r);
        mark(o_held, o_columns_of_rank(c, p, rank));
        for (IndexRange r :
             gate_up_rows_of_rank(p.intermediate_per_rank, rank, c.intermediate_size))
          mark(gate_up_held, r);
        mark(down_held, down_columns_of_rank(p.intermediate_per_rank, rank));
        mark(vocab_held, vocab_rows_of_rank(c, p, rank));
      }
      for (size_t i = 0; i < qkv_held.size(); ++i)
        ASSERT_EQ(qkv_held[i], static_cast<int64_t>(i) < q ? 1 : p.kv_replicas)
            << name << " N " << n << " qkv row " << i;
      for (const std::vector<int>* held : {&o_held, &gate_up_held, &down_held, &vocab_held})
        for (size_t i = 0; i < held->size(); ++i)
          ASSERT_EQ((*held)[i], 1) << name << " N " << n << " index " << i;
    }
  }
}

TEST(TensorParallelPlan, TheVocabularySplitsEvenly) {
  ModelConfig c = preset("llama-3-8b");
  c.vocab_size = 10;  // the gathered logits need equal parts
  const Result<TensorParallelPlan> p = plan_tensor_parallel(c, 4);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().message,
            "--tensor-parallel-size 4: llama-3-8b has 10 tokens in its vocabulary, which 4 does "
            "not divide; sizes that split it: 1, 2");
}

TEST(TensorParallelPlan, ExpertsSplitWithinEachExpert) {
  const ModelConfig c = preset("mixtral-8x7b");  // 8 experts of 14,336 columns
  const TensorParallelPlan p = plan_tensor_parallel(c, 4).value();
  EXPECT_EQ(p.expert_intermediate_per_rank, 3584);
  EXPECT_EQ(rank_config(c, p).moe.expert_intermediate_size, 3584);
  EXPECT_EQ(rank_config(c, p).moe.num_experts, 8);
}

TEST(TensorParallelPlan, SizesThatDoNotSplitTheModelAreRefused) {
  const Result<TensorParallelPlan> three = plan_tensor_parallel(preset("llama-3-8b"), 3);
  ASSERT_FALSE(three.ok());
  EXPECT_EQ(three.error().kind, ErrorKind::kUser);
  EXPECT_EQ(three.error().message,
            "--tensor-parallel-size 3: llama-3-8b has 32 attention heads, which 3 does not "
            "divide; sizes that split it: 1, 2, 4, 8");
  // Qwen2-7B: 28 heads (and 4 KV heads) split by 1, 2 and 4, not by 8.
  const Result<TensorParallelPlan> eight = plan_tensor_parallel(preset("qwen2-7b"), 8);
  ASSERT_FALSE(eight.ok());
  EXPECT_EQ(eight.error().message,
            "--tensor-parallel-size 8: qwen2-7b has 28 attention heads, which 8 does not divide; "
            "sizes that split it: 1, 2, 4");
  ModelConfig odd = preset("llama-3-8b");
  odd.num_kv_heads = 3;
  odd.num_heads = 24;
  const Result<TensorParallelPlan> kv = plan_tensor_parallel(odd, 2);
  ASSERT_FALSE(kv.ok());
  EXPECT_NE(kv.error().message.find("has 3 KV heads, which 2 does not divide"), std::string::npos)
      << kv.error().message;
  const Result<TensorParallelPlan> zero = plan_tensor_parallel(preset("llama-3-8b"), 0);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.error().message, "--tensor-parallel-size 0: the ranks must be at least 1");
}

// DeepSeek-V2-Lite's latent attention over 2 ranks: rank 1 takes heads 8-15 of the query (192
// rows each: nope 128 + rope 64), of kv_b (256 rows each: k_nope 128 + v 128) and of o (128
// columns each).
TEST(TensorParallelPlan, LatentAttentionSplitsByHeads) {
  const ModelConfig c = preset("deepseek-v2-lite");
  const TensorParallelPlan plan = plan_tensor_parallel(c, 2).value();
  const MlaRanges r = mla_ranges_of_rank(c, plan, 1);
  EXPECT_EQ(r.query.begin, 8 * 192);
  EXPECT_EQ(r.query.count, 8 * 192);
  EXPECT_EQ(r.kv_b.begin, 8 * 256);
  EXPECT_EQ(r.kv_b.count, 8 * 256);
  EXPECT_EQ(r.o.begin, 8 * 128);
  EXPECT_EQ(r.o.count, 8 * 128);
  // The shared experts (2 x 1,408) split like one MLP of their summed width.
  EXPECT_EQ(plan.shared_intermediate_per_rank, 1408);
  EXPECT_EQ(plan.expert_intermediate_per_rank, 704);
}

TEST(TensorParallelPlan, CheckedBeforeAnythingLoads) {
  EXPECT_TRUE(check_tensor_parallel(preset("llama-3-8b"), 1).ok());
  EXPECT_TRUE(check_tensor_parallel(preset("llama-3-8b"), 2).ok());
  EXPECT_TRUE(check_tensor_parallel(preset("mixtral-8x7b"), 2).ok());  // experts split too
  EXPECT_TRUE(check_tensor_parallel(preset("deepseek-v2-lite"), 4).ok());
  const Status experts = check_tensor_parallel(preset("deepseek-v2-lite"), 3);
  ASSERT_FALSE(experts.ok());
  EXPECT_NE(experts.error().message.find("has 16 attention heads, which 3 does not divide"),
            std::string::npos)
      << experts.error().message;
  EXPECT_FALSE(check_tensor_parallel(preset("llama-3-8b"), 3).ok());
}

}  // namespace
}  // namespace ib
