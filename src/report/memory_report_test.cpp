// memory.csv, heatmap.svg (golden files from fixed samples), the heatmap grid, report.html.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "core/fs.h"
#include "report/memory_report.h"

namespace ib {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr double kGiB = 1024.0 * 1024 * 1024;

// A load phase of 400 ms in which memory grows 0 -> 2 GiB, then two runs (200 ms, 150 ms) in
// which the KV cache fills; samples every 100 ms; one missing RSS value.
MemoryRecording fixed_recording(const std::string& label) {
  MemoryRecording r;
  r.label = label;
  r.timeline.columns = {"engine_demand_bytes", "kv_used_bytes", "rss_bytes", "gpu0_power_w"};
  const double demand[] = {0, 0.5, 1, 1.5, 2, 2.5, 3, 2, 2.5, 3, 2};
  const double kv[] = {0, 0, 0, 0, 0, 0.5, 1, 0, 0.5, 1, 0};
  for (int k = 0; k < 11; ++k) {
    r.timeline.time_ns.push_back(k * 100 * kMs);
    r.timeline.rows.push_back(
        {demand[k] * kGiB, kv[k] * kGiB, k == 3 ? NAN : 1e8 + k * 4096.0, 100.0 + k * 12.5});
  }
  r.phases = {
      {"load", 0, 400 * kMs}, {"run 0", 400 * kMs, 600 * kMs}, {"run 1", 750 * kMs, 900 * kMs}};
  r.heatmap_column = "engine_demand_bytes";
  label_samples(
      r, {{450 * kMs, 40 * kMs, 64, 0}, {500 * kMs, 90 * kMs, 0, 8}, {700 * kMs, 95 * kMs, 0, 8}});
  return r;
}

std::string golden_path(const std::string& name) {
  const char* src = std::getenv("INFERBENCH_SOURCE_DIR");
  return std::string(src ? src : ".") + "/src/report/testdata/" + name;
}

void expect_golden(const std::string& name, const std::string& actual) {
  const std::string path = golden_path(name);
  if (std::getenv("INFERBENCH_UPDATE_GOLDEN") != nullptr) {
    ASSERT_TRUE(write_file_atomic(path, actual).ok());
  }
  auto expected = read_file(path);
  ASSERT_TRUE(expected.ok()) << path;
  EXPECT_EQ(actual, *expected) << "golden file " << path;
}

TEST(MemoryCsv, MatchesTheGoldenFileAndReadsBack) {
  const MemoryRecording r = fixed_recording("tiny-15m");
  EXPECT_EQ(r.sample_phase[2], "load");
  EXPECT_EQ(r.sample_phase[5], "run 0");
  EXPECT_EQ(r.sample_phase[7], "idle");    // 700 ms: between run 0 and run 1
  EXPECT_EQ(r.sample_step[5], "prefill");  // (400, 500]: 40 ms prefill-heavy
  EXPECT_EQ(r.sample_step[6], "decode");
  const std::string csv = memory_csv(r);
  expect_golden("memory.csv", csv);
  auto back = parse_memory_csv(csv);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->timeline.columns, r.timeline.columns);
  EXPECT_EQ(back->timeline.time_ns, r.timeline.time_ns);
  EXPECT_EQ(back->sample_phase, r.sample_phase);
  EXPECT_EQ(back->timeline.rows[6][0], 3 * kGiB);
  EXPECT_TRUE(std::isnan(back->timeline.rows[3][2]));
  EXPECT_EQ(back->timeline.rows[10][3], 225.0);

  EXPECT_FALSE(parse_memory_csv("").ok());
  EXPECT_FALSE(parse_memory_csv("a,b\n1,2\n").ok());
  EXPECT_FALSE(parse_memory_csv("time_ns,time_s,phase,step,x_bytes\n1,0,load,idle\n").ok());
}

TEST(Heatmap, InterpolatesEachPhaseOntoOneGrid) {
  const Heatmap h = build_heatmap({fixed_recording("a")}, 8);
  ASSERT_EQ(h.rows.size(), 3u);
  EXPECT_EQ(h.rows[0].label, "a · load");
  EXPECT_EQ(h.rows[1].model, "a");
  EXPECT_DOUBLE_EQ(h.frame_s, 0.05);  // the longest phase, 400 ms, over 8 frames
  // Load, frame 0 centre 25 ms: 0.125 GiB; frame 7 centre 375 ms: 1.875 GiB.
  EXPECT_DOUBLE_EQ(h.rows[0].gib[0], 0.125);
  EXPECT_DOUBLE_EQ(h.rows[0].gib[7], 1.875);
  // Run 0 lasts 200 ms: frames 4.. are past its end.
  EXPECT_DOUBLE_EQ(h.rows[1].gib[0], 2.125);
  EXPECT_TRUE(std::isnan(h.rows[1].gib[4]));
  EXPECT_EQ(h.rows[1].detail[4], "");
  EXPECT_EQ(h.rows[1].detail[1], "run 0 · prefill");
  EXPECT_DOUBLE_EQ(h.zmax_gib, 2.875);  // run 0 at 575 ms
  EXPECT_NE(h.caption.find("engine demand"), std::string::npos);
}

// Under tensor parallelism the engine's demand is drawn per rank: a row per rank and phase, on
// one scale.
TEST(Heatmap, DrawsEachTensorParallelRank) {
  MemoryRecording r = fixed_recording("a");
  const int demand = r.timeline.column("engine_demand_bytes");
  std::vector<double> rank0, rank1;
  for (const auto& row : r.timeline.rows) {
    rank0.push_back(row[static_cast<size_t>(demand)] / 2);
    rank1.push_back(row[static_cast<size_t>(demand)] / 4);
  }
  r.timeline.add_column("rank0_demand_bytes", rank0);
  r.timeline.add_column("rank1_demand_bytes", rank1);
  const Heatmap h = build_heatmap({r}, 8);
  ASSERT_EQ(h.rows.size(), 6u);  // 2 ranks x 3 phases
  EXPECT_EQ(h.rows[0].label, "a · rank 0 · load");
  EXPECT_EQ(h.rows[4].label, "a · rank 1 · run 0");
  EXPECT_EQ(h.rows[4].detail[1], "rank 1 · run 0 · prefill");
  EXPECT_DOUBLE_EQ(h.rows[0].gib[7], 1.875 / 2);
  EXPECT_DOUBLE_EQ(h.rows[3].gib[0], 0.125 / 4);
  EXPECT_DOUBLE_EQ(h.zmax_gib, 2.875 / 2);
  EXPECT_NE(h.caption.find("one row per tensor-parallel rank"), std::string::npos) << h.caption;
  // Another series (RSS) is drawn once, whatever the ranks.
  r.heatmap_column = "rss_bytes";
  EXPECT_EQ(build_heatmap({r}, 8).rows.size(), 3u);
}

TEST(Heatmap, SvgMatchesTheGoldenFile) {
  const Heatmap h =
      build_heatmap({fixed_recording("tiny-15m"), fixed_recording("llama-3.2-1b")}, 24);
  const std::string svg = heatmap_svg(h, "Memory over time");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("shape-rendering=\"crispEdges\""), std::string::npos);
  EXPECT_NE(svg.find("llama-3.2-1b · run 1"), std::string::npos);
  EXPECT_NE(svg.find("#440154"), std::string::npos);  // viridis' low end in the legend
  expect_golden("heatmap.svg", svg);
}

TEST(ReportHtml, IsOneOfflineFileWithTheDataAndThePlotlyGiven) {
  HtmlReport r;
  r.title = "tiny-15m on cpu";
  r.subtitle = "test";
  r.recordings = {fixed_recording("tiny-15m")};
  r.heatmap = build_heatmap(r.recordings, 16);
  r.metrics = nlohmann::json::array({{{"metric", "output_throughput"},
                                      {"unit", "tok/s"},
                                      {"median", 10},
                                      {"min", 9},
                                      {"max", 11}}});
  const std::string html = report_html(r, "window.Plotly = {stub: '</script>'};");
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("window.Plotly = {stub: '<\\/script>'}"), std::string::npos);
  EXPECT_EQ(html.find("src=\"http"), std::string::npos);
  EXPECT_EQ(html.find("cdn"), std::string::npos);
  EXPECT_NE(html.find("\"engine_demand_bytes\""), std::string::npos);
  EXPECT_NE(html.find("output_throughput"), std::string::npos);
  EXPECT_NE(html.find("id=\"heatmap\""), std::string::npos);
}

TEST(ReportHtml, PlotlyComesFromTheEnvironmentOrSaysWhereItIsMissing) {
  const auto dir = std::filesystem::temp_directory_path() / "ib_plotly_test";
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(write_file_atomic(dir / "plotly.min.js", "/* plotly */").ok());
  ::setenv("INFERBENCH_PLOTLY_JS", (dir / "plotly.min.js").c_str(), 1);
  auto js = load_plotly_js();
  ASSERT_TRUE(js.ok());
  EXPECT_EQ(*js, "/* plotly */");
  ::setenv("INFERBENCH_PLOTLY_JS", (dir / "missing.js").c_str(), 1);
  auto missing = load_plotly_js();
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("missing.js"), std::string::npos);
  EXPECT_NE(missing.error().message.find("install-deps"), std::string::npos);
  ::unsetenv("INFERBENCH_PLOTLY_JS");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ib
