// End-to-end tests of the memory telemetry outputs of `inferbench run` and of `inferbench plot`,
// on the real binary: a CPU run writes memory.csv, allocations.csv, heatmap.svg and report.html
// (with the plotly.js it is given, or one line when there is none); bad intervals and outputs
// exit 2 before anything is written.
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "cli/detail/e2e_support.h"

namespace ib {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::E2e;

std::vector<std::string> small_run(const fs::path& dir) {
  return {"run",
          "--model",
          "tiny-15m",
          "--num-prompts",
          "6",
          "--input-len",
          "16",
          "--output-len",
          "16",
          "--batch-size",
          "3",
          "--runs",
          "2",
          "--num-threads",
          "2",
          "--memory-sample-interval",
          "10",
          "--disable-tqdm",
          "--result-dir",
          dir.string()};
}

class MemoryE2e : public E2e {
 protected:
  void SetUp() override {
    E2e::SetUp();
    plotly_ = root_ / "plotly-stub.js";
    ASSERT_TRUE(write_file_atomic(plotly_, "window.Plotly = {stub: true};").ok());
    ::setenv("INFERBENCH_PLOTLY_JS", plotly_.c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv("INFERBENCH_PLOTLY_JS");
    E2e::TearDown();
  }
  fs::path plotly_;
};

TEST_F(MemoryE2e, CpuRunWritesTheHostMemoryOutputs) {
  const fs::path dir = root_ / "result";
  ASSERT_EQ(run(small_run(dir)), 0) << err();
  const json r = json::parse(read_file(dir / "result.json").value());
  const json& m = r["memory"];
  EXPECT_EQ(m["sample_interval_ms"], 10);
  EXPECT_GT(m["sampler"]["samples"].get<int>(), 3);
  EXPECT_GT(m["sampler"]["effective_interval_ms"].get<double>(), 5.0);
  EXPECT_GT(m["peaks"]["rss_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(m["peaks"]["weights_bytes"], m["engine-pools"]["weights_bytes"]);
  EXPECT_GT(m["peaks"]["kv_used_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(m["heatmap"]["column"], "rss_bytes");
  std::vector<std::string> phases;
  for (const auto& p : m["phases"]) phases.push_back(p["name"]);
  EXPECT_EQ(phases, (std::vector<std::string>{"load", "warm-up", "run 0", "run 1"}));
  EXPECT_GT(m["steps"]["prefill_heavy"].get<int>(), 0);
  EXPECT_GT(m["steps"]["decode_heavy"].get<int>(), 0);
  EXPECT_GT(m["allocations"]["allocs"].get<int>(), 0);
  EXPECT_EQ(r["energy"]["available"], false);
  EXPECT_EQ(r["config"]["telemetry"], true);

  const auto csv = testing::lines_of(dir / "memory.csv");
  ASSERT_GT(csv.size(), 4u);
  EXPECT_EQ(csv[0].rfind("time_ns,time_s,phase,step,rss_bytes,", 0), 0u) << csv[0];
  std::string all;
  for (const auto& l : csv) all += l + "\n";
  for (const char* p : {",load,", ",warm-up,", ",run 0,", ",run 1,", ",decode,"}) {
    EXPECT_NE(all.find(p), std::string::npos) << p;
  }
  const auto allocations = testing::lines_of(dir / "allocations.csv");
  ASSERT_GT(allocations.size(), 2u);
  EXPECT_NE(allocations[1].find(",alloc,"), std::string::npos);
  EXPECT_NE(allocations[1].find(",load,"), std::string::npos);  // weights load first
  const std::string svg = read_file(dir / "heatmap.svg").value();
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("tiny-15m · run 1"), std::string::npos);
  EXPECT_NE(svg.find("host memory"), std::string::npos);
  const std::string html = read_file(dir / "report.html").value();
  EXPECT_NE(html.find("window.Plotly = {stub: true};"), std::string::npos);
  const auto steps = testing::lines_of(dir / "steps.csv");
  ASSERT_EQ(steps.size(), m["steps"]["total"].get<size_t>() + 1);
  EXPECT_EQ(steps[0],
            "start_ms,phase,num_seqs,prefill_tokens,decode_tokens,duration_us,gap_before_us,"
            "schedule_us,launch_us,wait_us,finish_us,device_us,graph");
  std::string step_rows;
  for (size_t i = 1; i < steps.size(); ++i) step_rows += steps[i] + "\n";
  EXPECT_NE(step_rows.find(",warm-up,"), std::string::npos);
  EXPECT_NE(step_rows.find(",run 1,"), std::string::npos);
  // The first step has no gap before it; a later one does, and every step that ran a batch has
  // its four host phases.
  for (size_t i = 1; i < steps.size(); ++i) {
    const std::string& row = steps[i];
    std::vector<std::string> cells(1);
    for (const char c : row) {
      if (c == ',') {
        cells.emplace_back();
      } else {
        cells.back() += c;
      }
    }
    ASSERT_EQ(cells.size(), 13u) << row;
    EXPECT_EQ(cells[6].empty(), i == 1) << row;
    if (std::stoi(cells[2]) > 0) {
      for (int c = 7; c <= 10; ++c) EXPECT_FALSE(cells[c].empty()) << row;
    }
  }
  EXPECT_NE(
      err().find(
          "memory telemetry: memory.csv, steps.csv, allocations.csv, heatmap.svg, report.html"),
      std::string::npos);
}

// The same run with a fake NVML (two GPUs, an energy counter rising 1 J per read): the GPU
// series, energy per phase and tokens per joule go through the whole pipeline.
TEST_F(MemoryE2e, GpuSeriesAndEnergyFromTheFakeNvml) {
  ::setenv("INFERBENCH_NVML_LIBRARY", IB_FAKE_NVML_PATH, 1);
  const fs::path dir = root_ / "result";
  const int code = run(small_run(dir));
  ::unsetenv("INFERBENCH_NVML_LIBRARY");
  ASSERT_EQ(code, 0) << err();
  const json r = json::parse(read_file(dir / "result.json").value());
  EXPECT_EQ(r["memory"]["nvml"]["available"], true);
  EXPECT_EQ(r["memory"]["nvml"]["gpus"].size(), 2u);
  EXPECT_GT(r["memory"]["peaks"]["gpu0_used_bytes"].get<int64_t>(), int64_t{1} << 30);
  EXPECT_GT(r["memory"]["peaks"]["gpus_used_bytes"].get<int64_t>(), int64_t{3} << 30);
  const json& e = r["energy"];
  ASSERT_EQ(e["available"], true) << e.dump();
  EXPECT_EQ(e["method"], "energy_counter");
  EXPECT_EQ(e["gpus"], 2);
  EXPECT_GT(e["total_joules"].get<double>(), 0);
  EXPECT_GT(e["output_tokens_per_joule"].get<double>(), 0);
  ASSERT_EQ(e["phases"].size(), 4u);
  EXPECT_EQ(e["phases"][2]["phase"], "run 0");
  EXPECT_EQ(e["phases"][2]["output_tokens"], 6 * 16);
  const auto csv = testing::lines_of(dir / "memory.csv");
  EXPECT_NE(csv[0].find("gpu1_energy_j"), std::string::npos);
  EXPECT_NE(csv[0].find("gpu0_process_used_bytes"), std::string::npos);
}

TEST_F(MemoryE2e, WithoutPlotlyTheReportIsSkippedInOneLine) {
  ::setenv("INFERBENCH_PLOTLY_JS", (root_ / "missing.js").c_str(), 1);
  const fs::path dir = root_ / "result";
  ASSERT_EQ(run(small_run(dir)), 0) << err();
  EXPECT_FALSE(fs::exists(dir / "report.html"));
  EXPECT_TRUE(fs::exists(dir / "heatmap.svg"));
  EXPECT_NE(err().find("report.html skipped: plotly.js not found at"), std::string::npos) << err();
}

TEST_F(MemoryE2e, DisabledTelemetryWritesNoMemoryOutputs) {
  const fs::path dir = root_ / "result";
  auto args = small_run(dir);
  args.push_back("--disable-telemetry");
  ASSERT_EQ(run(args), 0) << err();
  EXPECT_FALSE(fs::exists(dir / "memory.csv"));
  EXPECT_FALSE(fs::exists(dir / "heatmap.svg"));
  const json r = json::parse(read_file(dir / "result.json").value());
  EXPECT_EQ(r["config"]["telemetry"], false);
  EXPECT_EQ(r["energy"]["available"], false);
}

TEST_F(MemoryE2e, SampleIntervalsOutsideOneMillisecondToOneMinuteAreRefused) {
  for (const char* interval : {"0", "60001"}) {
    const fs::path dir = root_ / "result";
    auto args = small_run(dir);
    args[args.size() - 4] = interval;  // the --memory-sample-interval value
    EXPECT_EQ(run(args), 2) << interval;
    EXPECT_NE(err().find("--memory-sample-interval"), std::string::npos) << err();
    EXPECT_FALSE(fs::exists(dir));
  }
}

TEST_F(MemoryE2e, PlotDrawsTheDirectoriesWithSamplesAndNamesTheOthers) {
  const fs::path a = root_ / "a";
  ASSERT_EQ(run(small_run(a)), 0) << err();
  const fs::path empty = root_ / "empty";
  fs::create_directories(empty);
  const fs::path svg = root_ / "out" / "cross.svg";
  ASSERT_EQ(run({"plot", a.string(), empty.string(), "--out", svg.string()}), 0) << err();
  EXPECT_NE(err().find("no memory samples in " + empty.string()), std::string::npos) << err();
  const std::string text = read_file(svg).value();
  EXPECT_NE(text.find("tiny-15m (a) · run 0"), std::string::npos);

  const fs::path html = root_ / "cross.html";
  ASSERT_EQ(run({"plot", a.string(), "--out", html.string()}), 0) << err();
  EXPECT_NE(read_file(html).value().find("window.Plotly = {stub: true};"), std::string::npos);

  EXPECT_EQ(run({"plot", empty.string(), "--out", svg.string()}), 2);
  EXPECT_NE(err().find(empty.string()), std::string::npos) << err();
}

TEST_F(MemoryE2e, PlotRefusesAnUnusableOutputBeforeReading) {
  const fs::path file = root_ / "a-file";
  ASSERT_TRUE(write_file_atomic(file, "x").ok());
  // The output's parent is a file: reported although the input does not even exist.
  EXPECT_EQ(run({"plot", (root_ / "nope").string(), "--out", (file / "x.svg").string()}), 2);
  EXPECT_NE(err().find("cannot write under"), std::string::npos) << err();
  EXPECT_EQ(run({"plot", (root_ / "nope").string(), "--out", (root_ / "x.png").string()}), 2);
  EXPECT_NE(err().find(".svg or a .html"), std::string::npos) << err();
}

}  // namespace
}  // namespace ib
