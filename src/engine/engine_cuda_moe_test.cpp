// Mixtral's routing telemetry on the CUDA engine with decode graphs, plainly and with
// IB_MOE_ADD_NORM (the logits and tokens of Mixtral against the CPU engine are CudaEngineTest's
// *_mixtral cases): the graphs' warm-up passes route tokens but are not counted, and a single
// request, decoded in the batch-1 graph (no padded rows), counts what the CPU engine counts and
// decodes its tokens. Label gpu: skipped visibly without a CUDA device.
#include <gtest/gtest.h>

#include <string>

#include "backend/backend_factory.h"
#include "backend/cpu/cpu_backend.h"
#include "engine/detail/engine_cuda_test_support.h"
#include "engine/engine.h"

namespace ib {
namespace {

// add_norm: the GPU backend made with IB_MOE_ADD_NORM=add_norm (1: the experts' combine, the
// residual add and the next layer's input norm in one kernel; 2: the combine, then the add and
// norm kernel); 0: unset.
void expect_routing_like_the_cpu(int add_norm) {
  const ModelConfig c = testing::small_cuda_mixtral("small-cuda-mixtral");
  CpuBackend cpu(2);
  ModelWeights cpu_w = testing::random_weights(c, cpu, 5);
  BackendOptions bo;
  bo.device = "cuda";
  bo.dtype = DType::kF32;
  auto gpu = testing::create_backend_with_switch(bo, "IB_MOE_ADD_NORM",
                                                 add_norm != 0 ? std::to_string(add_norm) : "");
  ASSERT_TRUE(gpu.ok()) << gpu.error().message;
  ASSERT_NE((*gpu)->moe_ops(), nullptr);
  ASSERT_EQ((*gpu)->moe_ops()->fuses_experts_add_norm(), add_norm != 0);
  auto gpu_w = load_weights(c, WeightOptions{LoadFormat::kDummy, "", 0}, **gpu);
  ASSERT_TRUE(gpu_w.ok()) << gpu_w.error().message;
  testing::share_weights(c, cpu_w, cpu, *gpu_w, **gpu, DType::kF32);
  EngineConfig config;
  config.max_num_seqs = 4;
  config.max_num_batched_tokens = 64;
  config.num_kv_blocks = 32;
  config.use_graphs = true;
  auto cpu_engine = create_engine_with_weights(c, std::move(cpu_w), config, cpu);
  ASSERT_TRUE(cpu_engine.ok()) << cpu_engine.error().message;
  auto gpu_engine = create_engine_with_weights(c, std::move(*gpu_w), config, **gpu);
  ASSERT_TRUE(gpu_engine.ok()) << gpu_engine.error().message;
  const EngineStats before = (*gpu_engine)->stats();
  for (int64_t n : before.expert_tokens) EXPECT_EQ(n, 0) << "the graphs' warm-up was counted";
  Rng rng(4);
  const auto prompt = testing::random_prompt(rng, 12, c.vocab_size);
  for (Engine* e : {cpu_engine->get(), gpu_engine->get()})
    ASSERT_TRUE(e->add_request(testing::greedy_request(0, prompt, 20)).ok());
  const auto cpu_done = testing::run_to_completion(**cpu_engine);
  const auto gpu_done = testing::run_to_completion(**gpu_engine);
  EXPECT_EQ(gpu_done.at(0).tokens, cpu_done.at(0).tokens);
  EXPECT_GT((*gpu_engine)->profile().decode.graph_steps, 0);
  EXPECT_EQ((*gpu_engine)->stats().expert_tokens, (*cpu_engine)->stats().expert_tokens);
}

TEST(CudaEngineMoe, GraphDecodeCountsRoutingLikeTheCpu) {
  IB_REQUIRE_CUDA();
  expect_routing_like_the_cpu(0);
}

TEST(CudaEngineMoe, ExpertsAddNormInOneKernelDecodeLikeTheCpu) {
  IB_REQUIRE_CUDA();
  expect_routing_like_the_cpu(1);
}

TEST(CudaEngineMoe, ExpertsCombineThenAddNormDecodeLikeTheCpu) {
  IB_REQUIRE_CUDA();
  expect_routing_like_the_cpu(2);
}

}  // namespace
}  // namespace ib
