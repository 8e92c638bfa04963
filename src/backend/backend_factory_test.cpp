// create_backend: devices, dtypes and the memory limit; tensor parallelism's rank groups and
// their device checks.
#include <gtest/gtest.h>

#include <cstdlib>
#include <utility>

#include "backend/backend.h"
#include "backend/backend_factory.h"

namespace ib {
namespace {

TEST(BackendFactory, CreatesTheCpuBackend) {
  BackendOptions options;
  options.num_threads = 2;
  options.memory_limit_bytes = 1 << 20;
  auto backend = create_backend(options);
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  EXPECT_EQ((*backend)->device_info().kind, "cpu");
  EXPECT_EQ((*backend)->activation_dtype(), DType::kF32);
  EXPECT_EQ((*backend)->memory().limit_bytes(), 1 << 20);
}

TEST(BackendFactory, RefusesBadDevicesAndDtypes) {
  for (const char* device : {"tpu", "cpu:1", "cuda:x", "cuda:-1", ""}) {
    BackendOptions options;
    options.device = device;
    auto backend = create_backend(options);
    ASSERT_FALSE(backend.ok()) << device;
    EXPECT_EQ(backend.error().kind, ErrorKind::kUser);
    EXPECT_NE(backend.error().message.find("device"), std::string::npos) << backend.error().message;
  }
  BackendOptions bf16;
  bf16.dtype = DType::kBF16;
  auto refused = create_backend(bf16);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().kind, ErrorKind::kUser);
  EXPECT_NE(refused.error().message.find("fp32"), std::string::npos);
}

TEST(BackendFactory, CudaWithoutTheCudaBuildIsAUserError) {
  if (cuda_backend_compiled()) GTEST_SKIP() << "this build includes the CUDA backend";
  BackendOptions options;
  options.device = "cuda:0";
  auto backend = create_backend(options);
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.error().kind, ErrorKind::kUser);
  EXPECT_NE(backend.error().message.find("--device cpu"), std::string::npos);
}

// A CPU group: ranks 1 .. N-1 as CPU backends of rank 0's threads and memory limit, one CPU
// communicator a rank.
TEST(BackendFactory, GroupsCpuRanks) {
  BackendOptions options;
  options.num_threads = 2;
  options.memory_limit_bytes = int64_t{1} << 30;
  auto first = create_backend(options);
  ASSERT_TRUE(first.ok()) << first.error().message;
  auto group = create_rank_group(**first, 3);
  ASSERT_TRUE(group.ok()) << group.error().message;
  ASSERT_EQ(group->backends.size(), 2u);
  for (const auto& b : group->backends) {
    EXPECT_EQ(b->device_info().kind, "cpu");
    EXPECT_EQ(b->memory().limit_bytes(), int64_t{1} << 30);
  }
  ASSERT_EQ(group->comms.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(group->comms[static_cast<size_t>(r)]->rank(), r);
    EXPECT_EQ(group->comms[static_cast<size_t>(r)]->size(), 3);
  }
}

// Before loading: the CPU takes any number of ranks; CUDA one GPU a rank over NCCL, refused
// naming what is missing (the CUDA backend, NCCL, or GPUs).
TEST(BackendFactory, ChecksTheDevicesOfRanksBeforeLoading) {
  EXPECT_TRUE(check_rank_devices("cpu", 4).ok());
  EXPECT_TRUE(check_rank_devices("cuda", 1).ok());
  const Status bad = check_rank_devices("tpu", 2);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().kind, ErrorKind::kUser);
  const Status two = check_rank_devices("cuda:7", 2);
  if (two.ok()) GTEST_SKIP() << "9 or more GPUs visible";
  EXPECT_EQ(two.error().kind, ErrorKind::kUser);
  const std::string& m = two.error().message;
  EXPECT_EQ(m.rfind("--tensor-parallel-size 2 on --device cuda:7 needs ", 0), 0u) << m;
  if (!cuda_backend_compiled()) {
    EXPECT_NE(m.find("needs the CUDA backend"), std::string::npos) << m;
  } else if (!nccl_compiled()) {
    EXPECT_NE(m.find("needs NCCL, which this build does not include"), std::string::npos) << m;
  } else {
    EXPECT_NE(m.find("needs 2 GPUs, one a rank (cuda:7 .. cuda:8); "), std::string::npos) << m;
    EXPECT_NE(m.find("(CUDA_VISIBLE_DEVICES selects them)"), std::string::npos) << m;
  }
}

// The CUDA backend's debugging and A/B switches (IB_PDL, IB_ATTN_PREFETCH, ...) are read before any
// device is touched, so a bad value is a user error naming the variable on every machine.
TEST(BackendFactory, BadCudaSwitchesAreUserErrorsNamingTheVariable) {
  if (!cuda_backend_compiled()) GTEST_SKIP() << "this build has no CUDA backend";
  const std::pair<const char*, const char*> bad[] = {{"IB_ATTN_PREFETCH", "yes"},
                                                     {"IB_ATTN_PREFETCH", "-1"},
                                                     {"IB_FUSED", "2"},
                                                     {"IB_PDL", "on"},
                                                     {"IB_MATMUL_TUNING", "fast"}};
  for (const auto& [name, value] : bad) {
    ASSERT_EQ(::setenv(name, value, 1), 0);
    BackendOptions options;
    options.device = "cuda";
    options.dtype = DType::kBF16;
    auto backend = create_backend(options);
    ::unsetenv(name);
    ASSERT_FALSE(backend.ok()) << name;
    EXPECT_EQ(backend.error().kind, ErrorKind::kUser);
    EXPECT_NE(backend.error().message.find(name), std::string::npos) << backend.error().message;
  }
}

}  // namespace
}  // namespace ib
