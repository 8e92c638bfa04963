// The NCCL communicator on the visible GPUs (up to 4 ranks, one thread and stream each; on a
// one-GPU machine a group of one, which checks the plumbing and the gather's layout): sums and
// gathers equal to the host's, and an aborted group's calls fail naming the reason. Label gpu.
#include "backend/cuda/nccl_communicator.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <thread>
#include <vector>

#include "core/dtype.h"

namespace ib::cuda {
namespace {

int visible_gpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return std::min(n, 4);
}

// A device buffer of rank r on its device.
struct RankBuffers {
  cudaStream_t stream = nullptr;
  void* a = nullptr;
  void* b = nullptr;
};

float value(int r, int64_t i) {
  return static_cast<float>((r + 1) * 0.25 + static_cast<double>(i % 13) * 0.125 - 1.0);
}

class NcclCommunicatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ranks_ = visible_gpus();
    if (ranks_ == 0) GTEST_SKIP() << "no CUDA device";
    buffers_.resize(static_cast<size_t>(ranks_));
    std::vector<NcclRank> ranks;
    for (int r = 0; r < ranks_; ++r) {
      ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
      ASSERT_EQ(cudaStreamCreate(&buffers_[static_cast<size_t>(r)].stream), cudaSuccess);
      ranks.push_back({r, buffers_[static_cast<size_t>(r)].stream});
    }
    auto comms = make_nccl_communicators(ranks);
    ASSERT_TRUE(comms.ok()) << comms.error().message;
    comms_ = std::move(comms).value();
  }
  void TearDown() override {
    comms_.clear();
    for (int r = 0; r < static_cast<int>(buffers_.size()); ++r) {
      cudaSetDevice(r);
      RankBuffers& b = buffers_[static_cast<size_t>(r)];
      cudaFree(b.a);
      cudaFree(b.b);
      if (b.stream) cudaStreamDestroy(b.stream);
    }
  }
  // body(rank) on one thread per rank (its device current), all at once.
  void on_ranks(const std::function<void(int)>& body) {
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks_; ++r)
      threads.emplace_back([&, r] {
        cudaSetDevice(r);
        body(r);
      });
    for (std::thread& t : threads) t.join();
  }

  int ranks_ = 0;
  std::vector<RankBuffers> buffers_;
  std::vector<std::unique_ptr<Communicator>> comms_;
};

TEST_F(NcclCommunicatorTest, AllReduceSumsOverTheRanks) {
  const int64_t rows = 3, cols = 257;
  const size_t n = static_cast<size_t>(rows * cols);
  std::vector<std::vector<float>> got(static_cast<size_t>(ranks_));
  on_ranks([&](int r) {
    RankBuffers& b = buffers_[static_cast<size_t>(r)];
    std::vector<float> host(n);
    for (size_t i = 0; i < n; ++i) host[i] = value(r, static_cast<int64_t>(i));
    ASSERT_EQ(cudaMalloc(&b.a, n * 4), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(b.a, host.data(), n * 4, cudaMemcpyHostToDevice), cudaSuccess);
    const Status s =
        comms_[static_cast<size_t>(r)]->all_reduce_sum(Tensor(b.a, DType::kF32, {rows, cols}));
    ASSERT_TRUE(s.ok()) << s.error().message;
    ASSERT_EQ(cudaStreamSynchronize(b.stream), cudaSuccess);
    got[static_cast<size_t>(r)].resize(n);
    ASSERT_EQ(cudaMemcpy(got[static_cast<size_t>(r)].data(), b.a, n * 4, cudaMemcpyDeviceToHost),
              cudaSuccess);
  });
  for (int r = 0; r < ranks_; ++r)
    for (size_t i = 0; i < n; ++i) {
      double want = 0;
      for (int q = 0; q < ranks_; ++q) want += value(q, static_cast<int64_t>(i));
      ASSERT_NEAR(got[static_cast<size_t>(r)][i], want, 1e-5) << "rank " << r << " element " << i;
    }
  EXPECT_NE(comms_[0]->describe().find("nccl 2."), std::string::npos) << comms_[0]->describe();
}

TEST_F(NcclCommunicatorTest, AllGatherPlacesEachRankInItsColumns) {
  const int64_t rows = 5, cols = 7;
  const size_t n = static_cast<size_t>(rows * cols);
  std::vector<std::vector<uint16_t>> got(static_cast<size_t>(ranks_));
  on_ranks([&](int r) {
    RankBuffers& b = buffers_[static_cast<size_t>(r)];
    std::vector<uint16_t> host(n);
    for (size_t i = 0; i < n; ++i) host[i] = f32_to_bf16_bits(value(r, static_cast<int64_t>(i)));
    ASSERT_EQ(cudaMalloc(&b.a, n * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&b.b, n * 2 * static_cast<size_t>(ranks_)), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(b.a, host.data(), n * 2, cudaMemcpyHostToDevice), cudaSuccess);
    const Status s = comms_[static_cast<size_t>(r)]->all_gather_columns(
        Tensor(b.a, DType::kBF16, {rows, cols}), Tensor(b.b, DType::kBF16, {rows, cols * ranks_}));
    ASSERT_TRUE(s.ok()) << s.error().message;
    ASSERT_EQ(cudaStreamSynchronize(b.stream), cudaSuccess);
    got[static_cast<size_t>(r)].resize(n * static_cast<size_t>(ranks_));
    ASSERT_EQ(
        cudaMemcpy(got[static_cast<size_t>(r)].data(), b.b, n * 2 * ranks_, cudaMemcpyDeviceToHost),
        cudaSuccess);
  });
  for (int r = 0; r < ranks_; ++r)
    for (int64_t row = 0; row < rows; ++row)
      for (int src = 0; src < ranks_; ++src)
        for (int64_t c = 0; c < cols; ++c)
          ASSERT_EQ(
              got[static_cast<size_t>(r)][static_cast<size_t>((row * ranks_ + src) * cols + c)],
              f32_to_bf16_bits(value(src, row * cols + c)))
              << "rank " << r << " row " << row << " from " << src << " column " << c;
}

TEST_F(NcclCommunicatorTest, AnAbortedGroupFailsNamingTheReason) {
  comms_[0]->abort("rank 0: out of memory");
  for (size_t r = 1; r < comms_.size(); ++r) comms_[r]->abort("rank 0 failed");  // no waiting peer
  float* x = nullptr;
  cudaSetDevice(0);
  ASSERT_EQ(cudaMalloc(&x, 16), cudaSuccess);
  const Status s = comms_[0]->all_reduce_sum(Tensor(x, DType::kF32, {4}));
  cudaFree(x);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message,
            "tensor parallel all_reduce_sum: the group was aborted by a rank: rank 0: out of "
            "memory");
}

}  // namespace
}  // namespace ib::cuda
