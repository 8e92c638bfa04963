// The "performance" section: achieved bandwidth over wall time, its share of the measured and
// the reference ceilings, and device bandwidth only when every step was timed.
#include "targets/detail/profile_json.h"

#include <gtest/gtest.h>

namespace ib {
namespace {

TEST(ProfileJson, BandwidthAndCeilingShares) {
  EngineProfile p;
  p.copy_ceiling_bytes_per_s = 4e12;
  p.num_graphs = 3;
  p.graph_buckets = {1, 2, 4};
  p.graph_bytes = 6 << 20;
  p.decode.steps = 10;
  p.decode.tokens = 80;
  p.decode.bytes = 30'000'000'000;  // 30 GB in 10 ms of wall time: 3 TB/s
  p.decode.wall_ns = 10'000'000;
  p.decode.device_ns = 9'000'000;
  p.decode.timed_steps = 10;
  p.decode.median_host_fraction = 0.04;
  p.decode.median_launch_ns = 25'000;
  p.decode.median_between_steps_ns = 150'000;
  p.prefill.steps = 2;
  p.prefill.bytes = 1'000'000'000;
  p.prefill.wall_ns = 2'000'000;
  p.prefill.timed_steps = 1;  // not every step timed: no device bandwidth
  p.prefill.device_ns = 500'000;
  const auto j = profile_json(p);
  const auto& d = j.at("decode");
  EXPECT_DOUBLE_EQ(d.at("achieved_bytes_per_s").get<double>(), 3e12);
  EXPECT_NEAR(d.at("achieved_device_bytes_per_s").get<double>(), 30e9 / 9e-3, 1.0);
  EXPECT_DOUBLE_EQ(d.at("fraction_of_copy_ceiling").get<double>(), 0.75);
  EXPECT_NEAR(d.at("fraction_of_reference_copy").get<double>(), 3e12 / 4.16e12, 1e-12);
  EXPECT_DOUBLE_EQ(d.at("tokens_per_s").get<double>(), 8000.0);
  EXPECT_DOUBLE_EQ(d.at("median_host_overhead_fraction").get<double>(), 0.04);
  EXPECT_DOUBLE_EQ(d.at("median_host_phases_us").at("launch").get<double>(), 25.0);
  EXPECT_DOUBLE_EQ(d.at("median_host_phases_us").at("between_steps").get<double>(), 150.0);
  EXPECT_DOUBLE_EQ(j.at("prefill").at("achieved_device_bytes_per_s").get<double>(), 0.0);
  EXPECT_EQ(j.at("graphs").at("buckets"), (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(j.at("graphs").at("bytes").get<int64_t>(), 6 << 20);

  p.copy_ceiling_bytes_per_s = 0;  // CPU: no ceiling, no share
  EXPECT_DOUBLE_EQ(profile_json(p).at("decode").at("fraction_of_copy_ceiling").get<double>(), 0.0);
}

}  // namespace
}  // namespace ib
