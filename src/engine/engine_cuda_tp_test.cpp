// Tensor parallelism on CUDA (issue 19): the small model split over 2 and 4 GPUs (one CudaBackend
// a rank, NCCL between them; at 4 ranks each of the 2 KV heads serves two ranks) against the
// double-precision reference on the same weights, teacher-forced on the tokens it chose — fp32
// within 1e-4 relative L2 per row, bf16 within 2e-2 — and in fp32 the tokens and logits (1e-4) of
// the same engine on one GPU. Decode graphs (captured on every rank at once, the NCCL calls
// inside) and op by op; in bf16 the ranks decode on the fused ops (fp32: unfused), each fused
// residual add summed over the ranks after it. Skipped without enough GPUs or without NCCL in
// the build.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "backend/backend_factory.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "engine/detail/engine_cuda_test_support.h"
#include "engine/engine.h"

namespace ib {
namespace {

using testing::rel_l2;

struct TpCase {
  DType dtype;
  bool graphs;
  int ranks;
};

class CudaTensorParallel : public ::testing::TestWithParam<TpCase> {};

INSTANTIATE_TEST_SUITE_P(
    Ranks, CudaTensorParallel,
    ::testing::Values(TpCase{DType::kF32, false, 2}, TpCase{DType::kF32, true, 2},
                      TpCase{DType::kBF16, true, 2}, TpCase{DType::kBF16, false, 2},
                      TpCase{DType::kF32, true, 4}, TpCase{DType::kBF16, true, 4}),
    [](const ::testing::TestParamInfo<TpCase>& p) {
      return std::string(p.param.dtype == DType::kF32 ? "fp32" : "bf16") +
             (p.param.graphs ? "_graphs" : "_eager") + "_tp" + std::to_string(p.param.ranks);
    });

TEST_P(CudaTensorParallel, MatchesTheReferenceAndOneGpu) {
  IB_REQUIRE_CUDA();
  const TpCase k = GetParam();
  if (!nccl_compiled()) GTEST_SKIP() << "this build has no NCCL";
  if (cuda_device_count() < k.ranks)
    GTEST_SKIP() << "needs " << k.ranks << " CUDA devices; " << cuda_device_count() << " visible";
  const ModelConfig c = testing::small_cuda_config("small-cuda-tp");
  CpuBackend cpu(2);
  ModelWeights cpu_w = testing::random_weights(c, cpu, 7);
  BackendOptions bo;
  bo.device = "cuda:0";
  bo.dtype = k.dtype;
  // Two engines on GPU 0 (one of them rank 0 of the group): each its backend and weights.
  std::unique_ptr<Backend> gpus[2];
  std::unique_ptr<Engine> engines[2];  // one GPU, then k.ranks
  for (int i = 0; i < 2; ++i) {
    auto gpu = create_backend(bo);
    ASSERT_TRUE(gpu.ok()) << gpu.error().message;
    gpus[i] = std::move(gpu).value();
    auto w = load_weights(c, WeightOptions{LoadFormat::kDummy, "", 0}, *gpus[i]);
    ASSERT_TRUE(w.ok()) << w.error().message;
    testing::share_weights(c, cpu_w, cpu, *w, *gpus[i], k.dtype);
    EngineConfig config;
    config.capture_logits = true;
    config.max_num_seqs = 8;
    config.max_num_batched_tokens = 64;  // chunks the longest prompt
    config.num_kv_blocks = 64;
    config.use_graphs = k.graphs;
    config.tensor_parallel_size = i == 0 ? 1 : k.ranks;
    auto e = create_engine_with_weights(c, std::move(*w), config, *gpus[i]);
    ASSERT_TRUE(e.ok()) << e.error().message;
    engines[i] = std::move(e).value();
  }
  const testing::HostWeights host = testing::copy_weights_to_host(c, cpu_w, cpu);

  Rng rng(11);
  const std::vector<int> lengths = {1, 5, 16, 17, 40, 90};  // 6 requests: buckets 8, 4, 2, 1
  std::map<uint64_t, std::vector<int32_t>> prompts;
  for (size_t i = 0; i < lengths.size(); ++i) {
    prompts[i] = testing::random_prompt(rng, lengths[i], c.vocab_size);
    for (const auto& e : engines)
      ASSERT_TRUE(
          e->add_request(testing::greedy_request(i, prompts[i], 6 + 3 * static_cast<int>(i))).ok());
  }
  const auto one = testing::run_to_completion(*engines[0]);
  const auto split = testing::run_to_completion(*engines[1]);
  ASSERT_EQ(split.size(), prompts.size());

  double worst_ref = 0, worst_one = 0;
  for (const auto& [id, g] : split) {
    std::vector<int32_t> all = prompts[id];
    all.insert(all.end(), g.tokens.begin(), g.tokens.end());
    const auto ref = testing::reference_logits(c, host, all);
    const size_t p = prompts[id].size();
    for (size_t i = 0; i < g.tokens.size(); ++i)
      worst_ref = std::max(worst_ref, rel_l2(g.logits[i], ref[p - 1 + i]));
    if (k.dtype == DType::kF32) {
      const auto& o = one.at(id);
      EXPECT_EQ(g.tokens, o.tokens) << "request " << id;
      for (size_t i = 0; i < std::min(g.tokens.size(), o.tokens.size()); ++i) {
        const std::vector<double> want(o.logits[i].begin(), o.logits[i].end());
        worst_one = std::max(worst_one, rel_l2(g.logits[i], want));
      }
    }
  }
  EXPECT_LE(worst_ref, k.dtype == DType::kF32 ? 1e-4 : 2e-2);
  EXPECT_LE(worst_one, 1e-4);
  RecordProperty("max_rel_l2_reference", std::to_string(worst_ref));
  RecordProperty("max_rel_l2_one_gpu", std::to_string(worst_one));
  const EngineProfile prof = engines[1]->profile();
  EXPECT_GT(prof.decode.steps, 0);
  if (k.graphs) {
    EXPECT_GT(prof.decode.graph_steps, 0);
  }
}

// 8-bit weights over 2 GPUs (fp8 W8A8, int8 W8A16, quantized at load from the same dummy weights
// on each engine): the ranks' backends get their scratch for the format (as the loading backend
// does) and the split engine's logits are one GPU's within bf16's noise (fp8: each rank quantizes
// its slice of o's and down's inputs with its own per-token scale). Decode graphs.
TEST(CudaTensorParallelQuantized, MatchesOneGpu) {
  IB_REQUIRE_CUDA();
  if (!nccl_compiled()) GTEST_SKIP() << "this build has no NCCL";
  if (cuda_device_count() < 2)
    GTEST_SKIP() << "needs 2 CUDA devices; " << cuda_device_count() << " visible";
  const ModelConfig c = testing::small_cuda_config("small-cuda-tp-quant");
  for (const std::string quantization : {"int8", "fp8"}) {
    SCOPED_TRACE(quantization);
    BackendOptions bo;
    bo.device = "cuda:0";
    bo.dtype = DType::kBF16;
    std::unique_ptr<Backend> gpus[2];
    std::unique_ptr<Engine> engines[2];
    for (int i = 0; i < 2; ++i) {
      auto gpu = create_backend(bo);
      ASSERT_TRUE(gpu.ok()) << gpu.error().message;
      gpus[i] = std::move(gpu).value();
      EngineConfig config;
      config.capture_logits = true;
      config.max_num_seqs = 8;
      config.num_kv_blocks = 64;
      config.quantization = quantization;
      config.tensor_parallel_size = i + 1;
      auto e = create_engine(c, WeightOptions{LoadFormat::kDummy, "", 3}, config, *gpus[i]);
      ASSERT_TRUE(e.ok()) << e.error().message;
      engines[i] = std::move(e).value();
    }
    Rng rng(5);
    for (uint64_t id = 0; id < 4; ++id) {
      const auto prompt = testing::random_prompt(rng, 6 + 9 * static_cast<int>(id), c.vocab_size);
      for (const auto& e : engines)
        ASSERT_TRUE(e->add_request(testing::greedy_request(id, prompt, 6)).ok());
    }
    const auto one = testing::run_to_completion(*engines[0]);
    const auto split = testing::run_to_completion(*engines[1]);
    double worst = 0;
    for (const auto& [id, g] : split) {
      const auto& o = one.at(id);
      // Compared where both chose the same tokens so far (a near tie may flip in bf16).
      for (size_t i = 0; i < std::min(g.tokens.size(), o.tokens.size()); ++i) {
        const std::vector<double> want(o.logits[i].begin(), o.logits[i].end());
        worst = std::max(worst, rel_l2(g.logits[i], want));
        if (g.tokens[i] != o.tokens[i]) break;
      }
    }
    // A broken split is off by order 1; fp8 at TP 2 differed from one rank by 0.04-0.06 per row
    // on the CPU (tensor_parallel_test), bf16 adds its rounding.
    EXPECT_LE(worst, quantization == "fp8" ? 0.15 : 5e-2);
    RecordProperty("max_rel_l2_one_gpu_" + quantization, std::to_string(worst));
  }
}

}  // namespace
}  // namespace ib
