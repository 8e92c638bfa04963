// grow_kv_cache: which path a growth takes (refused up front, device to device, host staged),
// that every path keeps the old blocks' contents, and what the tracker sees (peak, refusals,
// allocations) in each.
#include "engine/detail/kv_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "engine/detail/engine_test_support.h"
#include "engine/detail/kv_cache_test_support.h"

namespace ib::detail {
namespace {

using testing::expect_pattern;
using testing::fill_pattern;

constexpr int kBlockSize = 4;

// A device of device_bytes: the CPU backend's ops, and an allocator that refuses beyond
// device_bytes live bytes, as cudaMalloc does on a full device (the tracker has no say).
class SmallDevice final : public Backend {
 public:
  explicit SmallDevice(size_t device_bytes) : device_bytes_(device_bytes), cpu_(1) {}
  DeviceInfo device_info() const override { return cpu_.device_info(); }
  DType activation_dtype() const override { return cpu_.activation_dtype(); }
  void copy_from_host(Tensor dst, const void* src, DType t) override {
    cpu_.copy_from_host(dst, src, t);
  }
  void copy_to_host(const Tensor& src, void* dst) override { cpu_.copy_to_host(src, dst); }
  void copy_on_device(Tensor dst, const Tensor& src) override { cpu_.copy_on_device(dst, src); }
  void synchronize() override {}
  void scale_columns(const WeightRef& w, const Tensor& gain) override {
    cpu_.scale_columns(w, gain);
  }
  void fill_uniform(Tensor dst, uint64_t seed, uint64_t stream, float scale) override {
    cpu_.fill_uniform(dst, seed, stream, scale);
  }
  void fill_constant(Tensor dst, float value) override { cpu_.fill_constant(dst, value); }
  void embedding(const Tensor& ids, const Tensor& table, Tensor out) override {
    cpu_.embedding(ids, table, out);
  }
  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor out) override {
    cpu_.rms_norm(x, w, eps, out);
  }
  void add_rms_norm(Tensor r, const Tensor& x, const Tensor& w, float eps, Tensor out) override {
    cpu_.add_rms_norm(r, x, w, eps, out);
  }
  void matmul(const Tensor& x, const WeightRef& w, const Tensor* bias, Tensor out) override {
    cpu_.matmul(x, w, bias, out);
  }
  void quantize_weight(const Tensor& dense, const WeightRef& out) override {
    cpu_.quantize_weight(dense, out);
  }
  void weight_row_sums(const WeightRef& w, Tensor out) override { cpu_.weight_row_sums(w, out); }
  void rope_and_cache(Tensor qkv, const Tensor& pos, const Tensor& slots, const Tensor& inv_freq,
                      const KvCacheLayer& kv, const AttentionShape& shape) override {
    cpu_.rope_and_cache(qkv, pos, slots, inv_freq, kv, shape);
  }
  void attention(const Tensor& qkv, const KvCacheLayer& kv, const AttentionMetadata& meta,
                 const AttentionShape& shape, Tensor out) override {
    cpu_.attention(qkv, kv, meta, shape, out);
  }
  void silu_mul(const Tensor& gate_up, Tensor out) override { cpu_.silu_mul(gate_up, out); }
  void gelu_tanh_mul(const Tensor& gate_up, Tensor out) override {
    cpu_.gelu_tanh_mul(gate_up, out);
  }
  void affine(Tensor x, float mul, float add) override { cpu_.affine(x, mul, add); }
  void softcap(Tensor x, float cap) override { cpu_.softcap(x, cap); }
  void gather_rows(const Tensor& x, const Tensor& ids, Tensor out) override {
    cpu_.gather_rows(x, ids, out);
  }
  void sample(const Tensor& logits, const SamplingMetadata& meta, Tensor out) override {
    cpu_.sample(logits, meta, out);
  }

 protected:
  Result<void*> raw_alloc(size_t bytes) override {
    if (live_bytes_ + bytes > device_bytes_) {
      return runtime_error("out of device memory: " + std::to_string(bytes) + " bytes");
    }
    live_bytes_ += bytes;
    return std::aligned_alloc(256, bytes);
  }
  void raw_free(void* ptr, size_t bytes) override {
    std::free(ptr);
    live_bytes_ -= bytes;
  }

 private:
  size_t device_bytes_;
  size_t live_bytes_ = 0;
  CpuBackend cpu_;
};

struct Pool {
  ModelConfig model = testing::tiny_config();
  int64_t block_bytes = int64_t{kBlockSize} * model.kv_bytes_per_token(DType::kF32);
  KvCache kv;
  HostStaging staging;
};

Pool make_pool(Backend& backend, int blocks) {
  Pool p;
  auto kv =
      allocate_kv_cache(p.model, blocks, kBlockSize, KvCacheFormat{DType::kF32, {}, {}}, backend);
  IB_ASSERT(kv.ok(), "allocate_kv_cache failed in a test");
  p.kv = std::move(kv).value();
  fill_pattern(p.kv, backend);
  return p;
}

TEST(KvCacheGrowth, OldAndNewFitTogetherCopiesDeviceToDevice) {
  CpuBackend backend(1);
  Pool p = make_pool(backend, 3);
  const MemorySnapshot before = backend.memory().snapshot();
  // The cap holds the old pool and the new one side by side, exactly.
  backend.memory().set_limit_bytes(before.allocated_bytes + 7 * p.block_bytes);
  auto path = grow_kv_cache(p.kv, p.model, 7, kBlockSize, backend, p.staging);
  ASSERT_TRUE(path.ok()) << path.error().message;
  EXPECT_EQ(*path, KvGrowthPath::kDeviceCopy);
  EXPECT_EQ(testing::blocks_of(p.kv), 7);
  expect_pattern(p.kv, backend, 3);
  const MemorySnapshot after = backend.memory().snapshot();
  EXPECT_EQ(after.peak_allocated_bytes, before.allocated_bytes + 7 * p.block_bytes);
  EXPECT_EQ(after.allocated_bytes, 7 * p.block_bytes);
  EXPECT_EQ(after.num_refused, 0);
  EXPECT_EQ(p.staging.bytes(), 0u);  // no host copy
}

TEST(KvCacheGrowth, OnlyTheNewFitsStagesThroughReusedHostMemory) {
  CpuBackend backend(1);
  Pool p = make_pool(backend, 3);
  // The new pool fits once the old one is freed, not beside it.
  backend.memory().set_limit_bytes(6 * p.block_bytes);
  auto path = grow_kv_cache(p.kv, p.model, 6, kBlockSize, backend, p.staging);
  ASSERT_TRUE(path.ok()) << path.error().message;
  EXPECT_EQ(*path, KvGrowthPath::kHostStaged);
  expect_pattern(p.kv, backend, 3);
  MemorySnapshot s = backend.memory().snapshot();
  EXPECT_EQ(s.peak_allocated_bytes, 6 * p.block_bytes);  // never old + new
  EXPECT_EQ(s.num_refused, 0);
  // Sized for the next growth, which stages the 6-block pool: the same buffer serves it.
  const size_t staging_bytes = p.staging.bytes();
  EXPECT_GE(staging_bytes, static_cast<size_t>(6 * p.block_bytes));
  fill_pattern(p.kv, backend);
  backend.memory().set_limit_bytes(9 * p.block_bytes);
  path = grow_kv_cache(p.kv, p.model, 9, kBlockSize, backend, p.staging);
  ASSERT_TRUE(path.ok()) << path.error().message;
  EXPECT_EQ(*path, KvGrowthPath::kHostStaged);
  EXPECT_EQ(p.staging.bytes(), staging_bytes);
  expect_pattern(p.kv, backend, 6);
  s = backend.memory().snapshot();
  EXPECT_EQ(s.peak_allocated_bytes, 9 * p.block_bytes);
}

TEST(KvCacheGrowth, GrowthBeyondTheCapIsRefusedBeforeAnyCopy) {
  CpuBackend backend(1);
  Pool p = make_pool(backend, 3);
  const MemorySnapshot before = backend.memory().snapshot();
  const void* storage = p.kv.storage.data();
  backend.memory().set_limit_bytes(6 * p.block_bytes - 1);  // 6 blocks never fit
  auto path = grow_kv_cache(p.kv, p.model, 6, kBlockSize, backend, p.staging);
  ASSERT_FALSE(path.ok());
  EXPECT_EQ(
      path.error().message,
      backend.cap_refusal(static_cast<size_t>(6 * p.block_bytes), MemoryTag::kKvCache).message);
  EXPECT_NE(path.error().message.find("memory limit"), std::string::npos);
  // The pool was not touched: same storage, same blocks, same contents, nothing staged.
  EXPECT_EQ(p.kv.storage.data(), storage);
  EXPECT_EQ(testing::blocks_of(p.kv), 3);
  expect_pattern(p.kv, backend, 3);
  EXPECT_EQ(p.staging.bytes(), 0u);
  const MemorySnapshot after = backend.memory().snapshot();
  EXPECT_EQ(after.num_refused, before.num_refused + 1);
  EXPECT_EQ(after.num_allocs, before.num_allocs);
  EXPECT_EQ(after.num_frees, before.num_frees);
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
}

TEST(KvCacheGrowth, DeviceRefusingTheNewBesideTheOldFallsBackToStaging) {
  const ModelConfig m = testing::tiny_config();
  const auto block_bytes = static_cast<size_t>(kBlockSize * m.kv_bytes_per_token(DType::kF32));
  SmallDevice device(3 * block_bytes + 6 * block_bytes - 256);  // no cap; the device is short
  Pool p = make_pool(device, 3);
  auto path = grow_kv_cache(p.kv, p.model, 6, kBlockSize, device, p.staging);
  ASSERT_TRUE(path.ok()) << path.error().message;
  EXPECT_EQ(*path, KvGrowthPath::kHostStaged);
  EXPECT_EQ(testing::blocks_of(p.kv), 6);
  expect_pattern(p.kv, device, 3);
  EXPECT_TRUE(device.device_status().ok());
  EXPECT_EQ(device.memory().snapshot().num_refused, 0);  // the device refused, not the cap
}

TEST(KvCacheGrowth, DeviceRefusingTheNewPoolRestoresTheOld) {
  const ModelConfig m = testing::tiny_config();
  const auto block_bytes = static_cast<size_t>(kBlockSize * m.kv_bytes_per_token(DType::kF32));
  SmallDevice device(5 * block_bytes);
  Pool p = make_pool(device, 3);
  const MemorySnapshot before = device.memory().snapshot();
  auto path = grow_kv_cache(p.kv, p.model, 6, kBlockSize, device, p.staging);
  ASSERT_FALSE(path.ok());
  EXPECT_NE(path.error().message.find("out of device memory"), std::string::npos);
  EXPECT_EQ(testing::blocks_of(p.kv), 3);
  expect_pattern(p.kv, device, 3);
  const MemorySnapshot after = device.memory().snapshot();
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  EXPECT_EQ(after.peak_allocated_bytes, before.allocated_bytes);  // never two pools
  p.kv = KvCache{};
  EXPECT_EQ(device.memory().snapshot().allocated_bytes, 0);
}

// An E4M3 pool (--kv-cache-dtype fp8) grows by both paths keeping its bytes and its per-layer
// scales.
TEST(KvCacheGrowth, AnFp8PoolKeepsItsBytesAndScales) {
  CpuBackend backend(1);
  const ModelConfig m = testing::tiny_config();
  KvCacheFormat format{DType::kF8E4M3, {}, {}};
  for (int l = 0; l < m.num_layers; ++l) {
    format.k_scales.push_back(0.5f + static_cast<float>(l));
    format.v_scales.push_back(0.25f * static_cast<float>(l + 1));
  }
  auto allocated = allocate_kv_cache(m, 3, kBlockSize, format, backend);
  ASSERT_TRUE(allocated.ok()) << allocated.error().message;
  KvCache kv = std::move(allocated).value();
  HostStaging staging;
  std::vector<std::vector<uint8_t>> bytes;  // per layer and half: (3 blocks) of E4M3
  for (const KvCacheLayer& layer : kv.layers) {
    for (const Tensor& t : {layer.k, layer.v}) {
      ASSERT_EQ(t.dtype, DType::kF8E4M3);
      std::vector<uint8_t> b(static_cast<size_t>(t.numel()));
      for (size_t i = 0; i < b.size(); ++i)
        b[i] = static_cast<uint8_t>((i * 7 + bytes.size()) % 126);
      backend.copy_from_host(t, b.data(), DType::kF8E4M3);
      bytes.push_back(std::move(b));
    }
  }
  const int64_t block_bytes = int64_t{kBlockSize} * m.kv_bytes_per_token(DType::kF8E4M3);
  EXPECT_EQ(static_cast<int64_t>(kv.storage.bytes()) % block_bytes, 0);
  auto path = grow_kv_cache(kv, m, 5, kBlockSize, backend, staging);  // device to device
  ASSERT_TRUE(path.ok()) << path.error().message;
  backend.memory().set_limit_bytes(backend.memory().snapshot().allocated_bytes + 2 * block_bytes);
  path = grow_kv_cache(kv, m, 6, kBlockSize, backend, staging);  // only the new fits: staged
  ASSERT_TRUE(path.ok()) << path.error().message;
  EXPECT_EQ(*path, KvGrowthPath::kHostStaged);
  for (size_t l = 0; l < kv.layers.size(); ++l) {
    const KvCacheLayer& layer = kv.layers[l];
    EXPECT_EQ(layer.k.dim(0), 6);
    EXPECT_EQ(layer.k_scale, format.k_scales[l]);
    EXPECT_EQ(layer.v_scale, format.v_scales[l]);
    for (int half = 0; half < 2; ++half) {
      const Tensor& t = half == 0 ? layer.k : layer.v;
      std::vector<uint8_t> now(static_cast<size_t>(t.numel()));
      backend.copy_to_host(t, now.data());
      const std::vector<uint8_t>& old = bytes[2 * l + static_cast<size_t>(half)];
      ASSERT_TRUE(std::equal(old.begin(), old.end(), now.begin())) << "layer " << l;
    }
  }
}

// The pool is sized in the cache's bytes: an E4M3 cache holds twice the blocks of a bf16 one
// from the same device memory.
TEST(KvPoolPlan, AnFp8CacheHoldsTwiceTheTokensOfBf16) {
  const ModelConfig m = testing::tiny_config();
  EngineConfig config;
  config.block_size = kBlockSize;
  KvPoolInputs in;
  in.model = &m;
  in.config = &config;
  in.device.kind = "cuda";
  in.device.total_bytes = int64_t{1} << 30;
  in.device.free_bytes = in.device.total_bytes;
  in.kv_dtype = DType::kBF16;
  auto bf16 = plan_kv_pool(in);
  in.kv_dtype = DType::kF8E4M3;
  auto fp8 = plan_kv_pool(in);
  ASSERT_TRUE(bf16.ok() && fp8.ok());
  EXPECT_EQ(fp8->block_bytes * 2, bf16->block_bytes);
  EXPECT_NEAR(static_cast<double>(fp8->num_blocks) / bf16->num_blocks, 2.0, 1e-3);
}

}  // namespace
}  // namespace ib::detail
