#include "telemetry/telemetry.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <thread>
#include <vector>

#include "core/build_info.h"
#include "telemetry/detail/nvml.h"

namespace ib {
namespace {

TEST(ProcParsers, StatmStatusOsReleaseCpuinfo) {
  EXPECT_EQ(parse_statm_resident_bytes("1000 250 30 1 0 400 0\n", 4096), 250 * 4096);
  EXPECT_FALSE(parse_statm_resident_bytes("garbage", 4096).has_value());
  const std::string status =
      "Name:\tx\nVmPeak:\t  2048 kB\nVmHWM:\t    1536 kB\nVmRSS:\t 1024 kB\n";
  EXPECT_EQ(parse_status_kb_field(status, "VmHWM:"), 1536 * 1024);
  EXPECT_EQ(parse_status_kb_field(status, "VmRSS:"), 1024 * 1024);
  EXPECT_FALSE(parse_status_kb_field(status, "VmSwap:").has_value());
  EXPECT_EQ(parse_os_pretty_name("NAME=\"Debian\"\nPRETTY_NAME=\"Debian GNU/Linux 12\"\n"),
            "Debian GNU/Linux 12");
  const std::string cpuinfo =
      "processor\t: 0\nmodel name\t: Test CPU @ 3.0GHz\n\nprocessor\t: 1\nmodel name\t: Test CPU "
      "@ 3.0GHz\n";
  EXPECT_EQ(parse_cpu_model(cpuinfo), "Test CPU @ 3.0GHz");
  EXPECT_EQ(parse_cpu_count(cpuinfo), 2);
}

TEST(RssCollector, SeesMemoryTheProcessTouches) {
  auto rss = make_rss_collector();
  ASSERT_TRUE(rss->start(0).ok());
  const int64_t before = rss->summary()["peak_rss_bytes"].get<int64_t>();
  EXPECT_GT(before, 0);
  // Touch 64 MiB: resident memory must grow by about that much.
  std::vector<char> block(64 << 20);
  volatile char* touch = block.data();  // volatile: the writes cannot be optimised away
  for (size_t i = 0; i < block.size(); i += 4096) touch[i] = 1;
  rss->sample(1);
  rss->stop(2);
  const auto s = rss->summary();
  EXPECT_GE(s["peak_rss_bytes"].get<int64_t>() - before, 60 << 20);
  ASSERT_FALSE(s["vm_hwm_bytes"].is_null());
  EXPECT_GE(s["vm_hwm_bytes"].get<int64_t>(), s["peak_rss_bytes"].get<int64_t>() - (1 << 20));
  EXPECT_EQ(s["samples"], 3);
}

TEST(EnginePoolsCollector, KeepsPeaksOfTheTargetPools) {
  std::atomic<int> step{0};
  CollectorContext ctx;
  ctx.target_memory = [&]() -> std::optional<TargetMemory> {
    TargetMemory m;
    m.weights_bytes = 1000;
    m.kv_pool_bytes = 5000;
    m.kv_used_bytes = step == 1 ? 3000 : 500;
    m.activations_bytes = 10 * step;
    m.allocated_bytes = 6000 + m.kv_used_bytes;
    return m;
  };
  auto c = make_engine_pools_collector(ctx);
  ASSERT_TRUE(c->start(0).ok());
  for (int i = 0; i < 3; ++i) {
    step = i;
    c->sample(i);
  }
  c->stop(3);
  const auto s = c->summary();
  EXPECT_EQ(s["available"], true);
  EXPECT_EQ(s["weights_bytes"], 1000);
  EXPECT_EQ(s["kv_pool_bytes"], 5000);
  EXPECT_EQ(s["kv_used_peak_bytes"], 3000);
  EXPECT_EQ(s["activations_peak_bytes"], 20);
  EXPECT_EQ(s["allocated_peak_bytes"], 9000);
  EXPECT_EQ(s["samples"], 4);

  // Tensor parallelism: a demand series per rank (NaN where the target has not reported them).
  CollectorContext tp = ctx;
  tp.tensor_parallel_ranks = 2;
  tp.target_memory = [&]() -> std::optional<TargetMemory> {
    TargetMemory m;
    if (step > 0) m.rank_demand_bytes = {700, 600};
    return m;
  };
  auto ranks = make_engine_pools_collector(tp);
  ASSERT_TRUE(ranks->start(0).ok());
  const auto columns = ranks->columns();
  ASSERT_EQ(columns.size(), 8u);
  EXPECT_EQ(columns[6], "rank0_demand_bytes");
  EXPECT_EQ(columns[7], "rank1_demand_bytes");
  step = 0;
  ranks->sample(0);
  std::vector<double> row;
  ranks->append_values(row);
  ASSERT_EQ(row.size(), 8u);
  EXPECT_TRUE(std::isnan(row[7]));
  step = 1;
  ranks->sample(1);
  row.clear();
  ranks->append_values(row);
  EXPECT_EQ(row[6], 700);
  EXPECT_EQ(row[7], 600);
  EXPECT_EQ(make_engine_pools_collector(ctx)->columns().size(), 6u);  // one rank: none

  auto none = make_engine_pools_collector(CollectorContext{});
  ASSERT_TRUE(none->start(0).ok());
  none->sample(1);
  none->stop(2);
  EXPECT_EQ(none->summary()["available"], false);
}

// Counts samples; checks they come on one thread with rising timestamps.
class CountingCollector : public Collector {
 public:
  std::string name() const override { return "counting"; }
  Status start(int64_t) override { return Ok{}; }
  void sample(int64_t t) override {
    ordered_ = ordered_ && t >= last_;
    last_ = t;
    ++n_;
  }
  void stop(int64_t) override { stopped_ = true; }
  nlohmann::json summary() const override {
    return {{"samples", n_}, {"ordered", ordered_}, {"stopped", stopped_}};
  }

 private:
  int n_ = 0;
  int64_t last_ = 0;
  bool ordered_ = true;
  bool stopped_ = false;
};

TEST(Sampler, SamplesAtTheIntervalUntilStopped) {
  std::vector<std::unique_ptr<Collector>> cs;
  cs.push_back(std::make_unique<CountingCollector>());
  Sampler s(std::move(cs), 10);
  ASSERT_TRUE(s.start(0).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  s.stop();
  s.stop();  // idempotent
  const auto j = s.summary();
  EXPECT_EQ(j["sample_interval_ms"], 10);
  // One at start plus ~20 over 200 ms; generous bounds for a loaded CI machine.
  EXPECT_GE(j["counting"]["samples"].get<int>(), 8);
  EXPECT_LE(j["counting"]["samples"].get<int>(), 25);
  EXPECT_EQ(j["counting"]["ordered"], true);
  EXPECT_EQ(j["counting"]["stopped"], true);
}

TEST(Environment, FingerprintDescribesThisMachine) {
  const auto env = environment_fingerprint();
  EXPECT_EQ(env["inferbench"]["version"], build_info().version);
  EXPECT_EQ(env["inferbench"]["git_sha"], build_info().git_sha);
  EXPECT_TRUE(env["inferbench"]["git_dirty"].is_boolean());
  EXPECT_GT(env["cpu"]["logical_cores"].get<int>(), 0);
  EXPECT_GT(env["memory"]["total_bytes"].get<int64_t>(), 0);
  EXPECT_TRUE(env["os"]["kernel"].get<std::string>().rfind("Linux", 0) == 0);
  EXPECT_TRUE(env.contains("gpu"));  // null on a machine without NVML
  const std::string text = format_environment(env);
  EXPECT_NE(text.find(build_info().git_sha), std::string::npos);
  EXPECT_NE(text.find("cpu"), std::string::npos);
}

TEST(Nvml, MissingLibraryMeansNoGpuNotAnError) {
  EXPECT_FALSE(detail::query_nvml("libdoes-not-exist-ib.so.1").has_value());
}

}  // namespace
}  // namespace ib
