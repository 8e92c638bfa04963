// On-demand KV growth on the CUDA backend: every path of grow_kv_cache (device to device, host
// staged, refused by the cap, refused by the device) keeps the old blocks, and a refused
// cudaMalloc leaves the backend usable; an on-demand engine whose growths take both paths
// decodes the same tokens and logits as a preallocated one. Label gpu: skipped visibly without
// a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backend/backend_factory.h"
#include "engine/detail/engine_cuda_test_support.h"
#include "engine/detail/kv_cache.h"
#include "engine/detail/kv_cache_test_support.h"

namespace ib {
namespace {

using detail::KvGrowthPath;

ModelConfig small_config() {
  return testing::small_cuda_config("small-cuda-growth-test");
}

std::unique_ptr<Backend> f32_cuda_backend() {
  BackendOptions bo;
  bo.device = "cuda";
  bo.dtype = DType::kF32;
  auto gpu = create_backend(bo);
  IB_ASSERT(gpu.ok(), gpu.ok() ? "" : gpu.error().message.c_str());
  return std::move(gpu).value();
}

TEST(CudaKvGrowth, EveryPathKeepsTheOldBlocksAndTheBackendUsable) {
  IB_REQUIRE_CUDA();
  const ModelConfig m = small_config();
  const int bs = 16;
  const int64_t block_bytes = bs * m.kv_bytes_per_token(DType::kF32);
  auto gpu = f32_cuda_backend();
  MemoryTracker& memory = gpu->memory();
  const int64_t baseline = memory.snapshot().allocated_bytes;
  auto kv0 = detail::allocate_kv_cache(m, 4, bs, detail::KvCacheFormat{DType::kF32, {}, {}}, *gpu);
  ASSERT_TRUE(kv0.ok()) << kv0.error().message;
  detail::KvCache kv = std::move(kv0).value();
  detail::HostStaging staging;
  testing::fill_pattern(kv, *gpu);

  // Device to device (no cap).
  auto path = detail::grow_kv_cache(kv, m, 8, bs, *gpu, staging);
  ASSERT_TRUE(path.ok()) << path.error().message;
  EXPECT_EQ(*path, KvGrowthPath::kDeviceCopy);
  testing::expect_pattern(kv, *gpu, 4);
  EXPECT_EQ(staging.bytes(), 0u);
  testing::fill_pattern(kv, *gpu);  // all 8 blocks, for the next path

  // Host staged: the cap holds the 12-block pool, not the 8-block one beside it.
  memory.reset_peak();  // the device-to-device growth held both pools; no cap then
  memory.set_limit_bytes(memory.snapshot().allocated_bytes + 4 * block_bytes);
  path = detail::grow_kv_cache(kv, m, 12, bs, *gpu, staging);
  ASSERT_TRUE(path.ok()) << path.error().message;
  EXPECT_EQ(*path, KvGrowthPath::kHostStaged);
  testing::expect_pattern(kv, *gpu, 8);
  EXPECT_LE(memory.snapshot().peak_allocated_bytes, *memory.limit_bytes());
  testing::fill_pattern(kv, *gpu);  // all 12 blocks

  // Refused by the cap before any copy.
  const void* storage = kv.storage.data();
  const int64_t refused_before = memory.snapshot().num_refused;
  path = detail::grow_kv_cache(kv, m, 13, bs, *gpu, staging);
  ASSERT_FALSE(path.ok());
  EXPECT_NE(path.error().message.find("memory limit"), std::string::npos);
  EXPECT_EQ(kv.storage.data(), storage);
  EXPECT_EQ(memory.snapshot().num_refused, refused_before + 1);
  testing::expect_pattern(kv, *gpu, 12);

  // Refused by the device (more blocks than it has bytes): the pool is restored and the
  // backend stays usable (a failed cudaMalloc is not a sticky error).
  memory.set_limit_bytes(std::nullopt);
  const auto too_many = static_cast<int>(gpu->device_info().total_bytes / block_bytes + 1);
  path = detail::grow_kv_cache(kv, m, too_many, bs, *gpu, staging);
  ASSERT_FALSE(path.ok());
  EXPECT_NE(path.error().message.find("out of device memory"), std::string::npos)
      << path.error().message;
  EXPECT_TRUE(gpu->device_status().ok()) << gpu->device_status().error().message;
  EXPECT_EQ(testing::blocks_of(kv), 12);
  testing::expect_pattern(kv, *gpu, 12);
  path = detail::grow_kv_cache(kv, m, 16, bs, *gpu, staging);
  ASSERT_TRUE(path.ok()) << path.error().message;
  EXPECT_EQ(*path, KvGrowthPath::kDeviceCopy);
  testing::expect_pattern(kv, *gpu, 12);
  EXPECT_TRUE(gpu->device_status().ok());

  kv = detail::KvCache{};
  EXPECT_EQ(memory.snapshot().allocated_bytes, baseline);
}

std::map<uint64_t, testing::Completion> run_requests(Engine& engine, const ModelConfig& c) {
  Rng rng(3);
  const std::vector<int> lengths = {5, 16, 17, 40, 60, 90};  // 21 blocks of 16 at the end
  for (size_t i = 0; i < lengths.size(); ++i) {
    const auto prompt = testing::random_prompt(rng, lengths[i], c.vocab_size);
    EXPECT_TRUE(engine.add_request(testing::greedy_request(i, prompt, 12)).ok());
  }
  return testing::run_to_completion(engine);
}

TEST(CudaKvGrowth, OnDemandEngineDecodesAsPreallocated) {
  IB_REQUIRE_CUDA();
  const ModelConfig c = small_config();
  auto gpu = f32_cuda_backend();
  WeightOptions w;
  w.format = LoadFormat::kDummy;
  w.seed = 5;
  EngineConfig config;
  config.capture_logits = true;
  config.max_num_seqs = 8;
  config.max_num_batched_tokens = 64;
  config.use_graphs = false;
  config.num_kv_blocks = 64;
  auto pre = create_engine(c, w, config, *gpu);
  ASSERT_TRUE(pre.ok()) << pre.error().message;
  const auto want = run_requests(**pre, c);
  pre->reset();

  config.num_kv_blocks = 0;
  config.kv_growth = KvGrowth::kOnDemand;
  config.kv_growth_min_blocks = 1;
  auto dyn = create_engine(c, w, config, *gpu);
  ASSERT_TRUE(dyn.ok()) << dyn.error().message;
  const EngineStats start = (*dyn)->stats();
  // Room for 24 blocks: the pool reaches the 21 it needs, its last growths staged.
  gpu->memory().reset_peak();  // the preallocated engine's peak is not this one's
  gpu->memory().set_limit_bytes(start.memory.allocated_bytes +
                                (24 - start.kv_blocks_total) * start.kv_block_bytes);
  const auto got = run_requests(**dyn, c);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [id, g] : got) {
    const auto& p = want.at(id);
    EXPECT_EQ(g.tokens, p.tokens) << "request " << id;
    for (size_t t = 0; t < std::min(g.logits.size(), p.logits.size()); ++t) {
      float worst = 0;
      for (size_t v = 0; v < g.logits[t].size(); ++v)
        worst = std::max(worst, std::fabs(g.logits[t][v] - p.logits[t][v]));
      EXPECT_LE(worst, 1e-5) << "request " << id << " token " << t;
    }
  }
  const EngineStats s = (*dyn)->stats();
  EXPECT_FALSE(s.oom) << s.oom_message;
  EXPECT_GT(s.kv_growths_staged, 0);
  EXPECT_LT(s.kv_growths_staged, s.kv_growths);
  EXPECT_LE(s.memory.peak_allocated_bytes, *gpu->memory().limit_bytes());
  EXPECT_TRUE(gpu->device_status().ok());
}

}  // namespace
}  // namespace ib
