#include "workload/arrival.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/stats.h"

namespace ib {
namespace {

std::vector<double> gaps_s(const std::vector<int64_t>& offsets) {
  std::vector<double> gaps;
  int64_t prev = 0;
  for (int64_t t : offsets) {
    gaps.push_back(static_cast<double>(t - prev) / 1e9);
    prev = t;
  }
  return gaps;
}

TEST(Arrival, InfiniteRateSendsEverythingAtZero) {
  auto offsets = arrival_offsets_ns(5, std::numeric_limits<double>::infinity(), 1.0, 0);
  ASSERT_EQ(offsets.size(), 5u);
  for (int64_t t : offsets) EXPECT_EQ(t, 0);
}

TEST(Arrival, PoissonHasMeanGapOneOverRateAndUnitCv) {
  const int n = 20000;
  const double rate = 50.0;
  auto offsets = arrival_offsets_ns(n, rate, 1.0, 42);
  ASSERT_EQ(offsets.size(), static_cast<size_t>(n));
  // Rescaled so the last arrival lands at n / rate exactly (vLLM's normalisation).
  EXPECT_NEAR(static_cast<double>(offsets.back()), n / rate * 1e9, 1.0);
  for (size_t i = 1; i < offsets.size(); ++i) ASSERT_GE(offsets[i], offsets[i - 1]);
  const auto gaps = gaps_s(offsets);
  EXPECT_NEAR(mean(gaps), 1.0 / rate, 1e-6);
  // Exponential gaps: coefficient of variation 1.
  EXPECT_NEAR(coefficient_of_variation(gaps), 1.0, 0.03);
}

TEST(Arrival, BurstinessSetsTheGammaShape) {
  // Gamma(shape k): CV = 1/sqrt(k). k = 4 is more regular, k = 0.25 burstier.
  for (double k : {0.25, 4.0}) {
    const auto gaps = gaps_s(arrival_offsets_ns(20000, 10.0, k, 9));
    EXPECT_NEAR(coefficient_of_variation(gaps), 1.0 / std::sqrt(k), 0.06 / std::sqrt(k)) << k;
  }
}

TEST(Arrival, DeterministicForASeed) {
  EXPECT_EQ(arrival_offsets_ns(100, 3.0, 1.0, 5), arrival_offsets_ns(100, 3.0, 1.0, 5));
  EXPECT_NE(arrival_offsets_ns(100, 3.0, 1.0, 5), arrival_offsets_ns(100, 3.0, 1.0, 6));
}

TEST(Arrival, ValidatesRateAndBurstiness) {
  EXPECT_TRUE(validate_arrival(std::numeric_limits<double>::infinity(), 1.0).ok());
  EXPECT_TRUE(validate_arrival(0.5, 2.0).ok());
  for (auto [rate, burst] : {std::pair{0.0, 1.0}, {-1.0, 1.0}, {1.0, 0.0}, {1.0, -2.0}}) {
    auto s = validate_arrival(rate, burst);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.error().kind, ErrorKind::kUser);
  }
}

}  // namespace
}  // namespace ib
