// The CUDA backend's creation, device errors, device info and its tracked allocator.
#include <gtest/gtest.h>

#include "backend/backend_factory.h"
#include "backend/cuda/detail/lora_kernels.h"
#include "backend/cuda/detail/test_support.h"

namespace ib::cuda {
namespace {

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override { IB_REQUIRE_CUDA(); }
};

TEST_F(CudaBackendTest, FactoryCreatesCudaAndRejectsBadDevices) {
  auto ok = create_backend(BackendOptions{"cuda:0", DType::kBF16, 0, std::nullopt});
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ((*ok)->device_info().kind, "cuda");
  EXPECT_EQ((*ok)->activation_dtype(), DType::kBF16);

  auto bad_index = create_backend(BackendOptions{"cuda:64", DType::kBF16, 0, std::nullopt});
  ASSERT_FALSE(bad_index.ok());
  EXPECT_EQ(bad_index.error().kind, ErrorKind::kUser);
  EXPECT_NE(bad_index.error().message.find("out of range"), std::string::npos)
      << bad_index.error().message;

  auto bad_dtype = create_cuda_backend(BackendOptions{"cuda", DType::kI32, 0, std::nullopt});
  ASSERT_FALSE(bad_dtype.ok());
  EXPECT_EQ(bad_dtype.error().kind, ErrorKind::kUser);

  auto bad_name = create_cuda_backend(BackendOptions{"cuda:x", DType::kF32, 0, std::nullopt});
  ASSERT_FALSE(bad_name.ok());
  EXPECT_EQ(bad_name.error().kind, ErrorKind::kUser);
}

TEST_F(CudaBackendTest, DeviceInfoReportsTheCard) {
  auto backend = CudaBackend::create(0, DType::kF16, std::nullopt);
  ASSERT_TRUE(backend.ok());
  const DeviceInfo info = (*backend)->device_info();
  EXPECT_FALSE(info.name.empty());
  EXPECT_EQ(info.kind, "cuda");
  EXPECT_GT(info.total_bytes, int64_t{1} << 30);
  EXPECT_GT(info.free_bytes, 0);
  EXPECT_LE(info.free_bytes, info.total_bytes);
  EXPECT_GT((*backend)->num_sms(), 0);
}

TEST_F(CudaBackendTest, AllocationsAreTrackedAndOomIsAnError) {
  auto created = CudaBackend::create(0, DType::kBF16, std::nullopt);
  ASSERT_TRUE(created.ok());
  CudaBackend& b = **created;
  const int64_t workspace =
      b.memory().snapshot().bytes_by_tag[static_cast<int>(MemoryTag::kWorkspace)];
  EXPECT_EQ(workspace,
            static_cast<int64_t>(CudaBackend::kGemmWorkspaceBytes +
                                 CudaBackend::kAttentionWorkspaceBytes +
                                 CudaBackend::kStagingBytes + CudaBackend::kAttentionCounterBytes +
                                 CudaBackend::alloc_bytes(CudaBackend::kLoraCounterBytes) +
                                 CudaBackend::alloc_bytes(CudaBackend::kLoraChainBytes)));
  {
    auto buf = b.alloc(1000, MemoryTag::kKvCache);
    ASSERT_TRUE(buf.ok());
    EXPECT_EQ(b.memory().snapshot().bytes_by_tag[static_cast<int>(MemoryTag::kKvCache)], 1024);
  }
  EXPECT_EQ(b.memory().snapshot().bytes_by_tag[static_cast<int>(MemoryTag::kKvCache)], 0);

  const int64_t total = b.device_info().total_bytes;
  auto huge = b.alloc(static_cast<size_t>(total) * 4, MemoryTag::kWeights);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.error().kind, ErrorKind::kRuntime);
  EXPECT_NE(huge.error().message.find("out of device memory"), std::string::npos)
      << huge.error().message;
  // The failed allocation leaves the device usable.
  auto after = b.alloc(1 << 20, MemoryTag::kActivations);
  ASSERT_TRUE(after.ok());
  b.fill_constant(after->view(DType::kBF16, {1 << 19}), 1.0f);
  b.synchronize();

  b.memory().set_limit_bytes(b.memory().snapshot().allocated_bytes + (1 << 20));
  EXPECT_FALSE(b.alloc(2 << 20, MemoryTag::kActivations).ok());
  EXPECT_TRUE(b.alloc(1 << 19, MemoryTag::kActivations).ok());
}

// The backend reports every CUDA switch as it runs with it: the list's default when unset, the
// environment's value (source "env") when set.
TEST_F(CudaBackendTest, ReportsTheKernelSwitchesItUses) {
  ::setenv("IB_PDL", "1", 1);
  ::setenv("IB_MATMUL_TUNING", "gemv", 1);
  ::setenv("IB_ATTN_PREFETCH", "5", 1);
  auto created = create_backend(BackendOptions{"cuda", DType::kBF16, 0, std::nullopt});
  ::unsetenv("IB_PDL");
  ::unsetenv("IB_MATMUL_TUNING");
  ::unsetenv("IB_ATTN_PREFETCH");
  ASSERT_TRUE(created.ok()) << created.error().message;
  const KernelSwitches s = (*created)->kernel_switches();
  for (const auto& spec : kernel_switch_specs()) {
    const std::string name(spec.name);
    ASSERT_EQ(s.count(name), 1u) << name;
    EXPECT_TRUE(s.at(name).applies) << name;
    if (name == "IB_PDL" || name == "IB_MATMUL_TUNING" || name == "IB_ATTN_PREFETCH") continue;
    EXPECT_FALSE(s.at(name).from_env) << name;
    EXPECT_EQ(s.at(name).value, spec.default_value) << name;
  }
  EXPECT_EQ(s.at("IB_PDL").value, "1");
  EXPECT_TRUE(s.at("IB_PDL").from_env);
  EXPECT_EQ(s.at("IB_MATMUL_TUNING").value, "gemv");
  EXPECT_EQ(s.at("IB_ATTN_PREFETCH").value, "5");
  // Each tuning mode reads back as set.
  for (const char* mode : {"0", "2", "3"}) {
    ::setenv("IB_MATMUL_TUNING", mode, 1);
    auto other = create_backend(BackendOptions{"cuda", DType::kBF16, 0, std::nullopt});
    ::unsetenv("IB_MATMUL_TUNING");
    ASSERT_TRUE(other.ok()) << other.error().message;
    EXPECT_EQ((*other)->kernel_switches().at("IB_MATMUL_TUNING").value, mode);
  }
}

}  // namespace
}  // namespace ib::cuda
