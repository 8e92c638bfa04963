// Sampling: greedy ties, and temperature / top-k / top-p frequencies over many seeds against the
// probabilities SamplingMetadata defines.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/detail/test_tensors.h"

namespace ib {
namespace {

using testing::TensorArena;

struct RowParams {
  float temperature = 0;
  int top_k = 0;
  float top_p = 1;
  int64_t seed = 0;
  int32_t step = 0;
};

// Samples every row (each with its own logits) through Backend::sample.
std::vector<int32_t> sample(CpuBackend& backend, const std::vector<std::vector<float>>& logits,
                            const std::vector<RowParams>& rows) {
  TensorArena arena(backend);
  const auto r = static_cast<int64_t>(rows.size());
  const auto v = static_cast<int64_t>(logits[0].size());
  std::vector<float> flat;
  std::vector<float> temperature, top_p;
  std::vector<int32_t> top_k, step;
  std::vector<int64_t> seed;
  bool all_greedy = true;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& row_logits = logits[std::min(i, logits.size() - 1)];
    flat.insert(flat.end(), row_logits.begin(), row_logits.end());
    temperature.push_back(rows[i].temperature);
    top_k.push_back(rows[i].top_k);
    top_p.push_back(rows[i].top_p);
    seed.push_back(rows[i].seed);
    step.push_back(rows[i].step);
    all_greedy = all_greedy && rows[i].temperature <= 0;
  }
  SamplingMetadata meta{static_cast<int>(r),         all_greedy,
                        arena.f32({r}, temperature), arena.i32({r}, top_k),
                        arena.f32({r}, top_p),       arena.i64({r}, seed),
                        arena.i32({r}, step)};
  Tensor out = arena.empty(DType::kI32, {r});
  backend.sample(arena.f32({r, v}, flat), meta, out);
  return arena.to_host_i32(out);
}

// Draws n samples with seeds 0..n-1 and checks each token's frequency against expected.
void expect_frequencies(CpuBackend& backend, const std::vector<float>& logits, RowParams params,
                        const std::vector<double>& expected, int n) {
  std::vector<RowParams> rows;
  for (int i = 0; i < n; ++i) {
    params.seed = i;
    rows.push_back(params);
  }
  const auto tokens = sample(backend, {logits}, rows);
  std::vector<int> counts(logits.size(), 0);
  for (int32_t t : tokens) ++counts[static_cast<size_t>(t)];
  for (size_t i = 0; i < logits.size(); ++i) {
    const double p = expected[i];
    const double f = static_cast<double>(counts[i]) / n;
    if (p == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " is outside the allowed set";
    } else {
      EXPECT_NEAR(f, p, 5 * std::sqrt(p * (1 - p) / n)) << "token " << i;
    }
  }
}

std::vector<double> softmax(const std::vector<float>& logits, double temperature) {
  std::vector<double> p;
  double sum = 0;
  for (float l : logits) sum += std::exp(l / temperature);
  for (float l : logits) p.push_back(std::exp(l / temperature) / sum);
  return p;
}

TEST(CpuSampling, GreedyPicksTheLowestIndexAmongTies) {
  CpuBackend backend(2);
  const auto tokens =
      sample(backend, {{0.5f, 2.0f, -1.0f, 2.0f}, {-3.0f, -3.0f, -3.0f, -4.0f}, {1, 2, 3, 4}},
             {{}, {}, {0.0f, 1, 0.1f, 7, 3}});
  EXPECT_EQ(tokens, (std::vector<int32_t>{1, 0, 3}));
}

TEST(CpuSampling, TemperatureFollowsTheSoftmax) {
  CpuBackend backend(2);
  const std::vector<float> logits = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f};
  expect_frequencies(backend, logits, {1.0f}, softmax(logits, 1.0), 20000);
  expect_frequencies(backend, logits, {0.5f}, softmax(logits, 0.5), 20000);
  expect_frequencies(backend, logits, {3.0f}, softmax(logits, 3.0), 20000);
}

TEST(CpuSampling, TopKKeepsTheKLargest) {
  CpuBackend backend(2);
  const std::vector<float> logits = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f};
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(0.2);
  expect_frequencies(backend, logits, {1.0f, 3},
                     {std::exp(1.0) / z, std::exp(0.2) / z, 0, std::exp(2.0) / z, 0}, 20000);
  expect_frequencies(backend, logits, {1.0f, 1}, {0, 0, 0, 1, 0}, 500);
}

TEST(CpuSampling, TopPKeepsTheSmallestNucleus) {
  CpuBackend backend(2);
  // Probabilities 0.5, 0.25, 0.125, 0.125 (as logits of log p).
  const std::vector<float> logits = {std::log(0.125f), std::log(0.5f), std::log(0.125f),
                                     std::log(0.25f)};
  // Mass 0.7: {1 (0.5), 3 (0.25)} reach 0.75 -> renormalised 2/3, 1/3.
  expect_frequencies(backend, logits, {1.0f, 0, 0.7f}, {0, 2.0 / 3, 0, 1.0 / 3}, 20000);
  // Mass 0.5 is reached by token 1 alone.
  expect_frequencies(backend, logits, {1.0f, 0, 0.5f}, {0, 1, 0, 0}, 500);
  // Top-k first, then top-p over the renormalised top-k: k = 3 keeps {1, 3, 0 (tie with 2, lower
  // id)} with p = 4/7, 2/7, 1/7; top_p 0.8 keeps {1, 3} (6/7 >= 0.8).
  expect_frequencies(backend, logits, {1.0f, 3, 0.8f}, {0, 2.0 / 3, 0, 1.0 / 3}, 20000);
}

TEST(CpuSampling, SeededDrawsAreReproducibleAndDependOnStep) {
  CpuBackend backend(2);
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(std::sin(double(i)));
  std::vector<RowParams> rows;
  for (int32_t step = 0; step < 64; ++step) rows.push_back({0.8f, 0, 1.0f, 1234, step});
  const auto a = sample(backend, {logits}, rows);
  const auto b = sample(backend, {logits}, rows);
  EXPECT_EQ(a, b);
  std::map<int32_t, int> distinct;
  for (int32_t t : a) ++distinct[t];
  EXPECT_GT(distinct.size(), 8u);  // the step index changes the draw
  for (auto& r : rows) r.seed = 1235;
  EXPECT_NE(sample(backend, {logits}, rows), a);
}

}  // namespace
}  // namespace ib
