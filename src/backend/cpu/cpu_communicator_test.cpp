// The CPU communicator's collectives, one thread per rank as tensor parallelism drives them:
// sums equal to a serial reference and bit-identical across ranks, gathers in rank order,
// repeated calls, and the failures that must not hang a group (mismatched arguments, an abort).
#include "backend/cpu/cpu_communicator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/dtype.h"

namespace ib {
namespace {

// Runs body(rank, communicator) on one thread per rank and waits for all of them.
void on_ranks(std::vector<std::unique_ptr<Communicator>>& comms,
              const std::function<void(int, Communicator&)>& body) {
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r)
    threads.emplace_back([&, r] { body(static_cast<int>(r), *comms[r]); });
  for (std::thread& t : threads) t.join();
}

// A value of rank r's element i that is not symmetric in r, so a mix-up of ranks shows.
float value(int r, int64_t i) {
  return static_cast<float>((r + 1) * 0.37 + static_cast<double>(i % 97) * 0.011 - 0.5);
}

class CpuCommunicatorSizes : public ::testing::TestWithParam<int> {};

INSTANTIATE_TEST_SUITE_P(Ranks, CpuCommunicatorSizes, ::testing::Values(1, 2, 3, 4));

TEST_P(CpuCommunicatorSizes, AllReduceSumsInRankOrderOnEveryRank) {
  const int ranks = GetParam();
  auto comms = make_cpu_communicators(ranks);
  const int64_t rows = 5, cols = 37;
  std::vector<std::vector<float>> f32(static_cast<size_t>(ranks));
  std::vector<std::vector<uint16_t>> bf16(static_cast<size_t>(ranks));
  std::vector<std::string> errors(static_cast<size_t>(ranks));
  on_ranks(comms, [&](int r, Communicator& comm) {
    EXPECT_EQ(comm.rank(), r);
    EXPECT_EQ(comm.size(), ranks);
    auto& x = f32[static_cast<size_t>(r)];
    auto& y = bf16[static_cast<size_t>(r)];
    for (int64_t i = 0; i < rows * cols; ++i) {
      x.push_back(value(r, i));
      y.push_back(f32_to_bf16_bits(value(r, i)));
    }
    // Three rounds: the barrier is reused, and each round's inputs are the last round's sums.
    for (int round = 0; round < 3; ++round) {
      Status s = comm.all_reduce_sum(Tensor(x.data(), DType::kF32, {rows, cols}));
      if (s.ok()) s = comm.all_reduce_sum(Tensor(y.data(), DType::kBF16, {rows, cols}));
      if (!s.ok()) errors[static_cast<size_t>(r)] = s.error().message;
    }
  });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  // Serial reference: the same rounds, ranks summed in order, bf16 in fp32 rounded once.
  std::vector<float> x(static_cast<size_t>(rows * cols)), y(x.size());
  for (int64_t i = 0; i < rows * cols; ++i) {
    float sx = 0.0f, sy = 0.0f;
    for (int r = 0; r < ranks; ++r) {
      sx += value(r, i);
      sy += round_to_bf16(value(r, i));
    }
    x[static_cast<size_t>(i)] = sx;
    y[static_cast<size_t>(i)] = round_to_bf16(sy);
  }
  for (int round = 1; round < 3; ++round)
    for (size_t i = 0; i < x.size(); ++i) {
      float sx = 0.0f, sy = 0.0f;
      for (int r = 0; r < ranks; ++r) {
        sx += x[i];
        sy += y[i];
      }
      x[i] = sx;
      y[i] = round_to_bf16(sy);
    }
  for (int r = 0; r < ranks; ++r)
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(f32[static_cast<size_t>(r)][i], x[i]) << "rank " << r << " element " << i;
      ASSERT_EQ(bf16_bits_to_f32(bf16[static_cast<size_t>(r)][i]), y[i])
          << "rank " << r << " element " << i;
    }
}

TEST_P(CpuCommunicatorSizes, AllGatherColumnsPlacesEachRankInItsColumns) {
  const int ranks = GetParam();
  auto comms = make_cpu_communicators(ranks);
  const int64_t rows = 3, cols = 11;
  std::vector<std::vector<uint16_t>> outs(static_cast<size_t>(ranks));
  on_ranks(comms, [&](int r, Communicator& comm) {
    std::vector<uint16_t> local;
    for (int64_t i = 0; i < rows * cols; ++i) local.push_back(f32_to_f16_bits(value(r, i)));
    auto& out = outs[static_cast<size_t>(r)];
    out.assign(static_cast<size_t>(rows * cols * ranks), 0);
    const Status s = comm.all_gather_columns(Tensor(local.data(), DType::kF16, {rows, cols}),
                                             Tensor(out.data(), DType::kF16, {rows, cols * ranks}));
    EXPECT_TRUE(s.ok()) << s.error().message;
    local.assign(local.size(), 0);  // the gather is complete once the call returns
  });
  for (int r = 0; r < ranks; ++r)
    for (int64_t row = 0; row < rows; ++row)
      for (int src = 0; src < ranks; ++src)
        for (int64_t c = 0; c < cols; ++c)
          ASSERT_EQ(
              outs[static_cast<size_t>(r)][static_cast<size_t>((row * ranks + src) * cols + c)],
              f32_to_f16_bits(value(src, row * cols + c)))
              << "rank " << r << " row " << row << " from rank " << src << " column " << c;
}

TEST(CpuCommunicator, MismatchedShapesFailOnEveryRankWithoutHanging) {
  auto comms = make_cpu_communicators(2);
  std::vector<std::string> errors(2);
  on_ranks(comms, [&](int r, Communicator& comm) {
    std::vector<float> x(static_cast<size_t>(r == 0 ? 8 : 12), 1.0f);
    const Status s = comm.all_reduce_sum(Tensor(x.data(), DType::kF32, {2, r == 0 ? 4 : 6}));
    if (!s.ok()) errors[static_cast<size_t>(r)] = s.error().message;
  });
  for (const std::string& e : errors) {
    EXPECT_NE(e.find("all_reduce_sum: rank 1 passed fp32 (2, 6), rank 0 fp32 (2, 4)"),
              std::string::npos)
        << e;
  }
}

TEST(CpuCommunicator, OneRanksBadArgumentsFailEveryRank) {
  auto comms = make_cpu_communicators(3);
  std::vector<std::string> errors(3);
  on_ranks(comms, [&](int r, Communicator& comm) {
    std::vector<int32_t> ints(4, 1);
    std::vector<float> x(4, 1.0f);
    const Status s = r == 2 ? comm.all_reduce_sum(Tensor(ints.data(), DType::kI32, {4}))
                            : comm.all_reduce_sum(Tensor(x.data(), DType::kF32, {4}));
    if (!s.ok()) errors[static_cast<size_t>(r)] = s.error().message;
  });
  for (const std::string& e : errors)
    EXPECT_NE(e.find("rank 2: its tensor is int32 (the sum takes fp32, bf16 or fp16)"),
              std::string::npos)
        << e;
  // A gather whose output has the wrong width is named the same way.
  std::vector<std::string> gather_errors(3);
  on_ranks(comms, [&](int r, Communicator& comm) {
    std::vector<float> local(6, 1.0f), out(static_cast<size_t>(r == 1 ? 12 : 18), 0.0f);
    const Status s = comm.all_gather_columns(Tensor(local.data(), DType::kF32, {2, 3}),
                                             Tensor(out.data(), DType::kF32, {2, r == 1 ? 6 : 9}));
    if (!s.ok()) gather_errors[static_cast<size_t>(r)] = s.error().message;
  });
  for (const std::string& e : gather_errors)
    EXPECT_NE(e.find("all_gather_columns: rank 1: its output is fp32 (2, 6), not fp32 (2, 9)"),
              std::string::npos)
        << e;
}

TEST(CpuCommunicator, AbortReleasesTheRanksThatWait) {
  auto comms = make_cpu_communicators(3);
  std::vector<std::string> errors(3);
  on_ranks(comms, [&](int r, Communicator& comm) {
    std::vector<float> x(4, 1.0f);
    if (r == 1) {  // this rank fails before its collective and ends the group
      comm.abort("rank 1: out of memory in the MLP");
      return;
    }
    const Status s = comm.all_reduce_sum(Tensor(x.data(), DType::kF32, {4}));
    if (!s.ok()) errors[static_cast<size_t>(r)] = s.error().message;
  });
  EXPECT_EQ(errors[0],
            "tensor parallel all_reduce_sum: the group was aborted by a rank: rank 1: out of "
            "memory in the MLP");
  EXPECT_EQ(errors[2], errors[0]);
  // Later calls fail at once, and a second abort keeps the first reason.
  comms[0]->abort("another reason");
  std::vector<float> x(4, 1.0f);
  const Status later = comms[2]->all_reduce_sum(Tensor(x.data(), DType::kF32, {4}));
  ASSERT_FALSE(later.ok());
  EXPECT_EQ(later.error().message, errors[0]);
  EXPECT_EQ(later.error().kind, ErrorKind::kRuntime);
}

TEST(CpuCommunicator, DescribesItself) {
  EXPECT_EQ(make_cpu_communicators(1)[0]->describe(), "cpu threads, 1 rank");
  EXPECT_EQ(make_cpu_communicators(4)[3]->describe(), "cpu threads, 4 ranks");
}

}  // namespace
}  // namespace ib
