#include "core/stats.h"

#include <gtest/gtest.h>

namespace ib {
namespace {

TEST(Stats, PercentileMatchesNumpyLinear) {
  std::vector<double> xs = {15, 20, 35, 40, 50};
  // numpy.percentile([15,20,35,40,50], [0,30,40,50,99,100]) -> 15, 23, 29, 35, 49.6, 50
  EXPECT_DOUBLE_EQ(percentile(xs, 0), 15);
  EXPECT_DOUBLE_EQ(percentile(xs, 30), 23);
  EXPECT_DOUBLE_EQ(percentile(xs, 40), 29);
  EXPECT_DOUBLE_EQ(percentile(xs, 50), 35);
  EXPECT_NEAR(percentile(xs, 99), 49.6, 1e-12);
  EXPECT_DOUBLE_EQ(percentile(xs, 100), 50);
}

TEST(Stats, MedianOfEvenCountAveragesMiddle) {
  std::vector<double> xs = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(median(xs), 2.5);
}

TEST(Stats, PopulationStd) {
  std::vector<double> xs = {2, 4, 4, 4, 5, 5, 7, 9};
  EXPECT_DOUBLE_EQ(stddev_population(xs), 2.0);
  EXPECT_DOUBLE_EQ(mean(xs), 5.0);
}

TEST(Stats, SpreadHasCiOnlyFromFiveValues) {
  std::vector<double> three = {3, 1, 2};
  auto s = spread_of(three);
  EXPECT_DOUBLE_EQ(s.median, 2);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 3);
  EXPECT_FALSE(s.ci95.has_value());
  std::vector<double> five = {10, 11, 12, 13, 14};
  auto s5 = spread_of(five);
  ASSERT_TRUE(s5.ci95.has_value());
  EXPECT_LE(s5.ci95->lo, 12);
  EXPECT_GE(s5.ci95->hi, 12);
  EXPECT_GE(s5.ci95->lo, 10);
}

TEST(Stats, EmptyIsZero) {
  std::vector<double> none;
  EXPECT_EQ(percentile(none, 50), 0);
  EXPECT_EQ(mean(none), 0);
}

}  // namespace
}  // namespace ib
