// The NVML collector against the fake library (testdata/fake_nvml.cpp), loaded through the same
// dlopen path as the driver's.
#include <gtest/gtest.h>

#include <cmath>

#include "telemetry/detail/nvml.h"
#include "telemetry/telemetry.h"

namespace ib {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;
constexpr double kMiB = 1024.0 * 1024;

CollectorContext fake_context(std::vector<std::string>* notices) {
  CollectorContext ctx;
  ctx.nvml_library = IB_FAKE_NVML_PATH;
  ctx.notice = [notices](const std::string& line) { notices->push_back(line); };
  return ctx;
}

TEST(NvmlCollector, ReadsEveryFieldOfEveryGpuFromTheLibrary) {
  std::vector<std::string> notices;
  auto c = make_nvml_collector(fake_context(&notices));
  ASSERT_TRUE(c->start(0).ok());
  EXPECT_TRUE(notices.empty());
  const auto cols = c->columns();
  ASSERT_EQ(cols.size(), 26u);  // 13 fields x 2 GPUs
  EXPECT_EQ(cols[0], "gpu0_used_bytes");
  EXPECT_EQ(cols[13], "gpu1_used_bytes");

  std::vector<std::vector<double>> rows;
  for (int k = 0; k < 3; ++k) {
    c->sample(k * 10'000'000);  // 10 ms apart: the process list is read at the first only
    rows.emplace_back();
    c->append_values(rows.back());
    ASSERT_EQ(rows.back().size(), cols.size());
  }
  c->stop(30'000'000);
  auto at = [&](int k, const std::string& name) {
    const auto i = static_cast<size_t>(std::find(cols.begin(), cols.end(), name) - cols.begin());
    return rows[static_cast<size_t>(k)][i];
  };
  // v2 memory: used grows 1 MiB per call; the version word was accepted (else NaN).
  EXPECT_EQ(at(0, "gpu0_used_bytes"), 1 * kGiB);
  EXPECT_EQ(at(2, "gpu0_used_bytes"), 1 * kGiB + 2 * kMiB);
  EXPECT_EQ(at(1, "gpu1_used_bytes"), 2 * kGiB + 1 * kMiB);
  EXPECT_EQ(at(0, "gpu0_reserved_bytes"), 512 * kMiB);
  EXPECT_EQ(at(0, "gpu0_total_bytes"), 80 * kGiB);
  EXPECT_EQ(at(0, "gpu0_free_bytes"), 80 * kGiB - 512 * kMiB - 1 * kGiB);
  // v1 used includes the reservation.
  EXPECT_EQ(at(2, "gpu0_v1_used_bytes"), at(2, "gpu0_used_bytes") + 512 * kMiB);
  // This process's entry, not pid 1's; carried forward between process polls.
  EXPECT_EQ(at(0, "gpu0_process_used_bytes"), 123 * kMiB);
  EXPECT_EQ(at(2, "gpu0_process_used_bytes"), 123 * kMiB);
  EXPECT_EQ(at(1, "gpu0_power_w"), 250.0);
  EXPECT_EQ(at(1, "gpu1_power_w"), 100.0);
  // Energy relative to the first reading, mJ -> J.
  EXPECT_EQ(at(0, "gpu0_energy_j"), 0.0);
  EXPECT_EQ(at(2, "gpu0_energy_j"), 2.0);
  EXPECT_EQ(at(0, "gpu0_sm_clock_mhz"), 1980.0);
  EXPECT_EQ(at(0, "gpu0_mem_clock_mhz"), 2619.0);
  EXPECT_EQ(at(0, "gpu1_util_gpu_pct"), 75.0);
  EXPECT_EQ(at(0, "gpu1_util_memory_pct"), 40.0);
  EXPECT_EQ(at(0, "gpu1_temperature_c"), 55.0);

  const auto s = c->summary();
  EXPECT_EQ(s["available"], true);
  EXPECT_EQ(s["samples"], 3);
  EXPECT_EQ(s["gpus"].size(), 2u);
  EXPECT_EQ(s["gpus"][1]["name"], "Fake GPU 1");
  EXPECT_EQ(s["gpus"][0]["used_peak_bytes"].get<double>(), 1 * kGiB + 2 * kMiB);
  EXPECT_EQ(s["api"]["processes"], "nvmlDeviceGetComputeRunningProcesses_v3");
  EXPECT_EQ(s["api"]["process_record_bytes"], 24);
  EXPECT_NE(s["api"]["memory_info"].get<std::string>().find("0x02000028"), std::string::npos);
  EXPECT_GT(s["mean_call_latency_us"].get<double>(), 0.0);
}

TEST(NvmlCollector, AMissingLibraryIsOneNoticeAndNoColumns) {
  std::vector<std::string> notices;
  CollectorContext ctx = fake_context(&notices);
  ctx.nvml_library = "libdoes-not-exist-ib.so.1";
  auto c = make_nvml_collector(ctx);
  ASSERT_TRUE(c->start(0).ok());
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_NE(notices[0].find("libdoes-not-exist-ib.so.1"), std::string::npos);
  EXPECT_TRUE(c->columns().empty());
  c->sample(1);
  std::vector<double> row;
  c->append_values(row);
  EXPECT_TRUE(row.empty());
  EXPECT_EQ(c->summary()["available"], false);
}

TEST(Nvml, EnvironmentQueryReadsTheFakeDevices) {
  const auto snap = detail::query_nvml(IB_FAKE_NVML_PATH);
  ASSERT_TRUE(snap.has_value());
  ASSERT_EQ(snap->devices.size(), 2u);
  EXPECT_EQ(snap->devices[0].name, "Fake GPU 0");
  EXPECT_EQ(snap->devices[1].memory_total_bytes, static_cast<int64_t>(80 * kGiB));
  // The pair's PCIe path (a host bridge: "PHB") and NVLink, as the fake reports them.
  ASSERT_EQ(snap->links.size(), 1u);
  EXPECT_EQ(snap->links[0].a, 0);
  EXPECT_EQ(snap->links[0].b, 1);
  EXPECT_EQ(snap->links[0].pcie, "PHB");
  EXPECT_EQ(snap->links[0].nvlink, std::optional<bool>(true));
}

TEST(Sampler, FillsTheTimelineFromTheFakeNvmlAndMeasuresItself) {
  std::vector<std::string> notices;
  std::vector<std::unique_ptr<Collector>> cs;
  cs.push_back(make_nvml_collector(fake_context(&notices)));
  cs.push_back(make_rss_collector());
  Sampler s(std::move(cs), 10);
  ASSERT_TRUE(s.start(0).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  s.stop();
  const Timeline& tl = s.timeline();
  ASSERT_EQ(tl.columns.size(), 27u);
  EXPECT_EQ(tl.columns.back(), "rss_bytes");
  ASSERT_GE(tl.rows.size(), 5u);
  // The energy counter rises by 1 J per read of GPU 0.
  const int e = tl.column("gpu0_energy_j");
  EXPECT_EQ(tl.rows.back()[static_cast<size_t>(e)], static_cast<double>(tl.rows.size() - 1));
  EXPECT_GT(tl.rows.back().back(), 0.0);  // RSS
  const auto j = s.summary();
  EXPECT_EQ(j["sampler"]["samples"].get<int64_t>(), static_cast<int64_t>(tl.rows.size()));
  EXPECT_GT(j["sampler"]["effective_interval_ms"].get<double>(), 5.0);
  EXPECT_LT(j["sampler"]["effective_interval_ms"].get<double>(), 60.0);
  EXPECT_GE(j["sampler"]["interval_jitter_ms"].get<double>(), 0.0);
  EXPECT_GT(j["sampler"]["mean_sample_latency_us"].get<double>(), 0.0);
}

}  // namespace
}  // namespace ib
