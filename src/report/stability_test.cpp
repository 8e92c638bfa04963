#include "report/stability.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include <fmt/format.h>

namespace ib {
namespace {

// Five synthetic runs: a steady throughput, a TTFT that wanders and a std that wanders more.
BenchmarkReport synthetic(double cv_threshold) {
  const std::vector<double> ttft = {10, 12, 8, 10, 10};
  const std::vector<double> std_ttft = {1, 3, 1, 2, 5};
  BenchmarkReport r;
  r.model_id = "synthetic";
  r.runs.resize(ttft.size());
  r.runs_requested = static_cast<int>(ttft.size());
  for (size_t k = 0; k < ttft.size(); ++k) {
    r.runs_flat.push_back({{"output_throughput", "Output token throughput", "tok/s", 100.0},
                           {"mean_ttft_ms", "TTFT mean", "ms", ttft[k]},
                           {"std_ttft_ms", "TTFT std", "ms", std_ttft[k]}});
  }
  r.aggregate = aggregate_runs(r.runs_flat);
  r.config = nlohmann::json{{"cv_threshold", cv_threshold}};
  return r;
}

TEST(Stability, CoefficientOfVariationAndFlags) {
  // TTFT: mean 10, population variance (0 + 4 + 4 + 0 + 0) / 5 = 1.6, CV = sqrt(1.6) / 10.
  const Stability s = stability_of(synthetic(0.05));
  ASSERT_EQ(s.metrics.size(), 3u);
  EXPECT_DOUBLE_EQ(s.metrics[0].cv, 0.0);
  EXPECT_FALSE(s.metrics[0].unstable);
  EXPECT_NEAR(s.metrics[1].cv, std::sqrt(1.6) / 10.0, 1e-12);
  EXPECT_TRUE(s.metrics[1].unstable);
  EXPECT_GT(s.metrics[2].cv, 0.5);
  EXPECT_FALSE(s.metrics[2].unstable);  // std of a std: reported, never flagged
  EXPECT_EQ(s.unstable_keys(), std::vector<std::string>{"mean_ttft_ms"});
  EXPECT_EQ(stability_warning(s),
            "Warning: unstable (!): 1 of 3 metrics vary across the 5 runs by more than CV 5% "
            "(TTFT mean 12.6%); use more --runs or a quieter machine.");
  // A looser threshold flags nothing.
  const Stability loose = stability_of(synthetic(0.2));
  EXPECT_TRUE(loose.unstable_keys().empty());
  EXPECT_EQ(stability_warning(loose), "");
}

TEST(Stability, InResultJsonSummaryCsvAndTable) {
  const BenchmarkReport r = synthetic(0.05);
  const auto j = result_json(r);
  EXPECT_NEAR(j["spread"]["mean_ttft_ms"]["cv"].get<double>(), std::sqrt(1.6) / 10.0, 1e-12);
  EXPECT_TRUE(j["spread"]["mean_ttft_ms"]["unstable"].get<bool>());
  EXPECT_FALSE(j["spread"]["output_throughput"]["unstable"].get<bool>());
  // Five runs: the bootstrap CI of the median, seeded and recorded.
  ASSERT_TRUE(j["spread"]["mean_ttft_ms"].contains("ci95"));
  const double lo = j["spread"]["mean_ttft_ms"]["ci95"][0].get<double>();
  const double hi = j["spread"]["mean_ttft_ms"]["ci95"][1].get<double>();
  EXPECT_GE(lo, 8.0);
  EXPECT_LE(hi, 12.0);
  EXPECT_LE(lo, 10.0);
  EXPECT_GE(hi, 10.0);
  EXPECT_EQ(j["stability"]["unstable_metrics"], nlohmann::json::array({"mean_ttft_ms"}));
  EXPECT_EQ(j["stability"]["bootstrap"]["seed"], 0);
  EXPECT_EQ(j["stability"]["bootstrap"]["resamples"], 2000);

  std::istringstream csv(summary_csv(r));
  std::vector<std::string> lines;
  for (std::string line; std::getline(csv, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 1u + 5 + 1 + 2 + 2);  // header, runs, median, cv+unstable, CI
  EXPECT_EQ(lines[7], "cv,0.0000,0.1265,0.6236");
  EXPECT_EQ(lines[8], "unstable,0,1,0");
  EXPECT_EQ(lines[9], fmt::format("ci95_lo,100.0000,{:.4f},{:.4f}", lo,
                                  j["spread"]["std_ttft_ms"]["ci95"][0].get<double>()));
  EXPECT_EQ(lines[10].rfind("ci95_hi,100.0000,", 0), 0u);

  const std::string md = markdown_summary(r);
  EXPECT_NE(md.find("| TTFT mean | 10.00 | 8.00 | 12.00 | ms | 12.6% (!) |"), std::string::npos)
      << md;
  EXPECT_NE(md.find("| Output token throughput | 100.00 | 100.00 | 100.00 | tok/s | 0.0% |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("Warning: unstable (!): 1 of 2 metrics"), std::string::npos)
      << md;  // std hidden
}

}  // namespace
}  // namespace ib
