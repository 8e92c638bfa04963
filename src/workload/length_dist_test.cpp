#include "workload/length_dist.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/stats.h"

namespace ib {
namespace {

TEST(LengthDist, ParsesFixedNormalAndUniform) {
  auto fixed = parse_length_dist("32", "--input-len");
  ASSERT_TRUE(fixed.ok()) << fixed.error().message;
  EXPECT_EQ(fixed->kind, LengthDist::Kind::kFixed);
  EXPECT_EQ(fixed->value, 32);
  EXPECT_EQ(fixed->describe(), "32");

  auto normal = parse_length_dist("normal:mean=256,std=64,min=32,max=1024", "--input-len-dist");
  ASSERT_TRUE(normal.ok()) << normal.error().message;
  EXPECT_EQ(normal->kind, LengthDist::Kind::kNormal);
  EXPECT_DOUBLE_EQ(normal->mean, 256);
  EXPECT_DOUBLE_EQ(normal->stddev, 64);
  EXPECT_EQ(normal->min, 32);
  EXPECT_EQ(normal->max, 1024);
  EXPECT_EQ(normal->max_len(), 1024);
  EXPECT_EQ(normal->describe(), "normal:mean=256,std=64,min=32,max=1024");

  auto uniform = parse_length_dist("uniform:max=9,min=3", "--output-len-dist");
  ASSERT_TRUE(uniform.ok()) << uniform.error().message;
  EXPECT_EQ(uniform->kind, LengthDist::Kind::kUniform);
  EXPECT_EQ(uniform->min, 3);
  EXPECT_EQ(uniform->max, 9);
}

TEST(LengthDist, RejectsBadSpecsWithTheFlagNamed) {
  const std::vector<std::string> bad = {"0",
                                        "-4",
                                        "zipf:a=1",
                                        "normal:mean=10,std=2,min=1",
                                        "normal:mean=x,std=2,min=1,max=5",
                                        "uniform:min=5,max=4",
                                        "uniform:min=0,max=4",
                                        "uniform:min=1.5,max=4",
                                        "normal:mean=1,std=-1,min=1,max=2",
                                        "uniform:min=1,max=4,foo=2",
                                        "uniform:min"};
  for (const auto& spec : bad) {
    auto r = parse_length_dist(spec, "--input-len-dist");
    ASSERT_FALSE(r.ok()) << spec;
    EXPECT_EQ(r.error().kind, ErrorKind::kUser);
    EXPECT_NE(r.error().message.find("--input-len-dist"), std::string::npos) << r.error().message;
    EXPECT_EQ(r.error().message.find('\n'), std::string::npos);
  }
}

TEST(LengthDist, TruncatedNormalStaysInRangeWithTheRightMean) {
  auto d = parse_length_dist("normal:mean=256,std=64,min=32,max=1024", "--x");
  ASSERT_TRUE(d.ok());
  Rng rng(7);
  std::vector<double> xs;
  for (int i = 0; i < 20000; ++i) {
    const int n = sample_length(*d, rng);
    ASSERT_GE(n, 32);
    ASSERT_LE(n, 1024);
    xs.push_back(n);
  }
  // The truncation at 32 and 1024 is > 3.5 sigma away: the moments are those of the normal.
  EXPECT_NEAR(mean(xs), 256.0, 2.0);
  EXPECT_NEAR(stddev_population(xs), 64.0, 2.0);
}

TEST(LengthDist, TightTruncationAndFarMeanStayInRange) {
  LengthDist d;
  d.kind = LengthDist::Kind::kNormal;
  d.mean = 5000;
  d.stddev = 1;
  d.min = 10;
  d.max = 20;
  Rng rng(1);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(sample_length(d, rng), 20);  // clamped after rejections
}

TEST(LengthDist, UniformCoversBothBounds) {
  auto d = parse_length_dist("uniform:min=3,max=6", "--x");
  ASSERT_TRUE(d.ok());
  Rng rng(3);
  std::vector<int> counts(7, 0);
  for (int i = 0; i < 4000; ++i) counts[static_cast<size_t>(sample_length(*d, rng))]++;
  EXPECT_EQ(counts[0] + counts[1] + counts[2], 0);
  for (int n = 3; n <= 6; ++n) EXPECT_NEAR(counts[static_cast<size_t>(n)], 1000, 120) << n;
}

}  // namespace
}  // namespace ib
