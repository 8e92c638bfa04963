// create_backend: devices, dtypes and the memory limit.
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
