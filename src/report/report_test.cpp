#include "report/report.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/fs.h"

namespace ib {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int64_t kMs = 1'000'000;

RequestRecord record(int run, int64_t send_ms, std::vector<int64_t> token_ms, int n_in) {
  RequestRecord r;
  r.run = run;
  r.t_sched_ns = 0;
  r.t_send_ns = send_ms * kMs;
  for (int64_t t : token_ms) add_chunk(r, 1, t * kMs);
  r.t_end_ns = r.token_times_ns.back();
  r.n_in = n_in;
  r.n_out = static_cast<int>(token_ms.size());
  r.n_out_requested = r.n_out;
  r.ok = true;
  r.finish_reason = "length";
  return r;
}

// Two runs of three requests; the second run is 1.5x slower (times scaled by k = 2, then 3 ms).
BenchmarkRecords fixed_records() {
  BenchmarkRecords b;
  for (int run = 0; run < 2; ++run) {
    const int64_t k = run == 0 ? 2 : 3;
    std::vector<RequestRecord> rs;
    rs.push_back(record(run, 0, {5 * k, 7 * k, 9 * k, 11 * k}, 16));
    rs.push_back(record(run, 1 * k, {8 * k, 10 * k, 12 * k, 14 * k}, 16));
    rs.push_back(record(run, 2 * k, {10 * k, 13 * k, 16 * k, 20 * k}, 16));
    b.runs.push_back(std::move(rs));
  }
  return b;
}

BenchmarkReport fixed_report() {
  BenchmarkReport r;
  r.date = "20261129-120000";
  r.backend = "native";
  r.model_id = "tiny";
  r.num_prompts = 3;
  r.runs_requested = 2;
  r.load_description = "static batches of 8";
  r.metrics_options.percentiles = {50, 99};
  r.percentile_metrics = {"ttft", "tpot", "itl", "e2el"};
  r.footnotes = {"Peak RSS: 10.0 MiB"};
  add_results(r, fixed_records());
  return r;
}

std::string golden_path(const std::string& name) {
  const char* src = std::getenv("INFERBENCH_SOURCE_DIR");
  return std::string(src ? src : ".") + "/src/report/testdata/" + name;
}

// Compares with the golden file; INFERBENCH_UPDATE_GOLDEN=1 rewrites it instead.
void expect_golden(const std::string& name, const std::string& actual) {
  const std::string path = golden_path(name);
  if (std::getenv("INFERBENCH_UPDATE_GOLDEN") != nullptr) {
    ASSERT_TRUE(write_file_atomic(path, actual).ok());
  }
  auto expected = read_file(path);
  ASSERT_TRUE(expected.ok()) << expected.error().message;
  EXPECT_EQ(actual, *expected) << "golden file " << path;
}

TEST(Report, SummaryCsvMatchesGolden) {
  expect_golden("summary.csv", summary_csv(fixed_report()));
}

TEST(Report, MarkdownMatchesGolden) {
  expect_golden("summary.md", markdown_summary(fixed_report()));
}

TEST(Report, CsvHasOneRowPerRunPlusMedianWithUnitsInColumns) {
  const std::string csv = summary_csv(fixed_report());
  std::istringstream in(csv);
  std::string header, line;
  std::getline(in, header);
  EXPECT_EQ(header.rfind("run,duration_s,completed,failed,", 0), 0u) << header;
  EXPECT_NE(header.find(",output_throughput_tok_s,"), std::string::npos);
  EXPECT_NE(header.find(",request_throughput_req_s,"), std::string::npos);
  EXPECT_NE(header.find(",p99_ttft_ms"), std::string::npos);
  std::vector<std::string> first_cells;
  while (std::getline(in, line)) first_cells.push_back(line.substr(0, line.find(',')));
  // Then the stability rows: coefficient of variation and the flag above --cv-threshold.
  EXPECT_EQ(first_cells, (std::vector<std::string>{"1", "2", "median", "cv", "unstable"}));
}

TEST(Report, ResultJsonHasVllmKeysHoldingTheMedianAcrossRuns) {
  const BenchmarkReport rep = fixed_report();
  const json j = result_json(rep);
  for (const char* key : {"date",
                          "backend",
                          "model_id",
                          "num_prompts",
                          "request_rate",
                          "burstiness",
                          "max_concurrency",
                          "duration",
                          "completed",
                          "failed",
                          "total_input_tokens",
                          "total_output_tokens",
                          "request_throughput",
                          "request_goodput",
                          "output_throughput",
                          "total_token_throughput",
                          "mean_ttft_ms",
                          "median_ttft_ms",
                          "std_ttft_ms",
                          "p99_ttft_ms",
                          "mean_tpot_ms",
                          "p99_tpot_ms",
                          "mean_itl_ms",
                          "p99_itl_ms",
                          "mean_e2el_ms",
                          "p99_e2el_ms",
                          "config",
                          "env",
                          "kernel_switches",
                          "definitions",
                          "runs",
                          "spread",
                          "memory",
                          "engine",
                          "weights"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["request_rate"], "inf");
  EXPECT_TRUE(j["request_goodput"].is_null());
  EXPECT_TRUE(j["max_concurrency"].is_null());
  EXPECT_TRUE(j["completed"].is_number_integer());
  EXPECT_EQ(j["completed"], 3);
  EXPECT_EQ(j["total_output_tokens"], 12);
  // Run 1 TTFTs are 10, 14 and 16 ms; run 2 is 1.5x; of two runs the median is the mean.
  const double ttft_run1 = 40.0 / 3;
  EXPECT_NEAR(j["runs"][0]["metrics"]["mean_ttft_ms"].get<double>(), ttft_run1, 1e-9);
  EXPECT_NEAR(j["runs"][1]["metrics"]["mean_ttft_ms"].get<double>(), ttft_run1 * 1.5, 1e-9);
  EXPECT_NEAR(j["mean_ttft_ms"].get<double>(), ttft_run1 * 1.25, 1e-9);
  EXPECT_NEAR(j["spread"]["mean_ttft_ms"]["min"].get<double>(), ttft_run1, 1e-9);
  EXPECT_NEAR(j["spread"]["mean_ttft_ms"]["max"].get<double>(), ttft_run1 * 1.5, 1e-9);
  EXPECT_EQ(j["spread"]["mean_ttft_ms"]["per_run"].size(), 2u);
  EXPECT_FALSE(j["spread"]["mean_ttft_ms"].contains("ci95"));  // fewer than 5 runs
  // Queue metrics were not selected: only in runs and spread, not at the top level.
  EXPECT_FALSE(j.contains("mean_client_queue_time_ms"));
  EXPECT_TRUE(j["runs"][0]["metrics"].contains("mean_client_queue_time_ms"));
  EXPECT_EQ(j["interrupted"], false);
  EXPECT_EQ(j["num_runs"], 2);
  EXPECT_TRUE(j["definitions"].contains("tpot"));
}

TEST(Report, InterruptedReportKeepsThePartialRunOutOfTheMedians) {
  BenchmarkRecords b = fixed_records();
  b.partial_run = b.runs[1];
  b.runs.pop_back();
  b.interrupted = true;
  BenchmarkReport r;
  r.runs_requested = 3;
  add_results(r, b);
  const json j = result_json(r);
  EXPECT_EQ(j["interrupted"], true);
  EXPECT_EQ(j["num_runs"], 1);
  EXPECT_TRUE(j.contains("partial_run"));
  EXPECT_NEAR(j["mean_ttft_ms"].get<double>(), 40.0 / 3, 1e-9);
  EXPECT_NE(markdown_summary(r).find("interrupted after 1 of 3 runs"), std::string::npos);

  b.runs.clear();  // nothing completed: the table shows the partial run
  BenchmarkReport none;
  none.runs_requested = 3;
  add_results(none, b);
  const std::string md = markdown_summary(none);
  EXPECT_NE(md.find("finished requests of the interrupted run"), std::string::npos) << md;
  EXPECT_NE(md.find("| Completed requests | 3 |"), std::string::npos) << md;
  EXPECT_FALSE(result_json(none).contains("mean_ttft_ms"));
}

TEST(Report, RequestLineIsRelativeToTheOrigin) {
  RequestRecord r = record(1, 10, {15, 17}, 4);
  r.id = 7;
  const json j = json::parse(request_json_line(r, 10 * kMs));
  EXPECT_EQ(j["run"], 1);
  EXPECT_EQ(j["id"], 7);
  EXPECT_EQ(j["t_send_ns"], 0);
  EXPECT_EQ(j["t_first_ns"], 5 * kMs);
  EXPECT_EQ(j["token_times_ns"], json::array({5 * kMs, 7 * kMs}));
  EXPECT_DOUBLE_EQ(j["ttft_ms"].get<double>(), 5.0);
  EXPECT_DOUBLE_EQ(j["tpot_ms"].get<double>(), 2.0);
  EXPECT_TRUE(j["error"].is_null());
  EXPECT_EQ(j["warmup"], false);
}

TEST(Report, RequestLineParsesBackToTheRecord) {
  RequestRecord r = record(2, 10, {15, 17, 20}, 4);
  r.id = 9;
  r.prompt_index = 3;
  r.t_sched_ns = 8 * kMs;
  r.chunks = 2;
  r.lora_name = "sql";
  RequestRecord failed;  // no token came
  failed.t_send_ns = 12 * kMs;
  failed.t_end_ns = 13 * kMs;
  failed.n_in = 4;
  failed.n_out_requested = 4;
  failed.finish_reason = "error";
  failed.error = "HTTP 400: bad top_p";
  for (const RequestRecord& original : {r, failed}) {
    auto back = parse_request_json_line(request_json_line(original, 3 * kMs), 3 * kMs);
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(back->run, original.run);
    EXPECT_EQ(back->id, original.id);
    EXPECT_EQ(back->prompt_index, original.prompt_index);
    EXPECT_EQ(back->t_sched_ns, original.t_sched_ns);
    EXPECT_EQ(back->t_send_ns, original.t_send_ns);
    EXPECT_EQ(back->t_first_ns, original.t_first_ns);
    EXPECT_EQ(back->t_end_ns, original.t_end_ns);
    EXPECT_EQ(back->token_times_ns, original.token_times_ns);
    EXPECT_EQ(back->n_in, original.n_in);
    EXPECT_EQ(back->n_out, original.n_out);
    EXPECT_EQ(back->n_out_requested, original.n_out_requested);
    EXPECT_EQ(back->chunks, original.chunks);
    EXPECT_EQ(back->ok, original.ok);
    EXPECT_EQ(back->finish_reason, original.finish_reason);
    EXPECT_EQ(back->error, original.error);
    EXPECT_EQ(back->lora_name, original.lora_name);
  }
  EXPECT_FALSE(parse_request_json_line("{\"run\": 0}", 0).ok());
  EXPECT_FALSE(parse_request_json_line("not json", 0).ok());
}

class ResultDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("ib_report_" +
             std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

TEST_F(ResultDirTest, PlansWithoutCreatingAndRefusesNonEmptyWithoutOverwrite) {
  const fs::path dir = root_ / "a" / "b";
  auto planned = plan_result_dir(dir.string(), "m", false);
  ASSERT_TRUE(planned.ok()) << planned.error().message;
  EXPECT_FALSE(fs::exists(dir));
  ASSERT_TRUE(create_result_dir(dir, false).ok());
  EXPECT_TRUE(plan_result_dir(dir.string(), "m", false).ok());  // exists but empty
  std::ofstream(dir / "result.json") << "{}";
  std::ofstream(dir / "notes.txt") << "mine";
  auto refused = plan_result_dir(dir.string(), "m", false);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().kind, ErrorKind::kUser);
  EXPECT_NE(refused.error().message.find("--overwrite"), std::string::npos);
  ASSERT_TRUE(plan_result_dir(dir.string(), "m", true).ok());
  ASSERT_TRUE(create_result_dir(dir, true).ok());
  EXPECT_FALSE(fs::exists(dir / "result.json"));
  EXPECT_TRUE(fs::exists(dir / "notes.txt"));  // not ours: left alone
}

TEST_F(ResultDirTest, DefaultNameAndFileInTheWay) {
  auto planned = plan_result_dir("", "meta-llama/Llama-3", false);
  ASSERT_TRUE(planned.ok());
  EXPECT_EQ(planned->parent_path(), fs::path("results"));
  EXPECT_EQ(planned->filename().string().rfind("meta-llama_Llama-3-", 0), 0u);
  std::ofstream(root_ / "file") << "x";
  auto r = plan_result_dir((root_ / "file").string(), "m", true);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("is a file"), std::string::npos);
}

TEST_F(ResultDirTest, SinksWriteTheirFiles) {
  std::ostringstream stdout_text;
  SinkContext ctx{root_, &stdout_text, 0};
  std::vector<std::unique_ptr<ReportSink>> sinks;
  sinks.push_back(make_json_sink());
  sinks.push_back(make_jsonl_sink());
  sinks.push_back(make_csv_sink());
  sinks.push_back(make_markdown_sink());
  for (auto& s : sinks) ASSERT_TRUE(s->begin(ctx).ok()) << s->name();
  const BenchmarkRecords b = fixed_records();
  for (const auto& run : b.runs) {
    for (const auto& rec : run) {
      for (auto& s : sinks) ASSERT_TRUE(s->on_record(rec).ok());
    }
  }
  // requests.jsonl is complete before finish(): it is flushed as records arrive.
  auto partial = read_file(root_ / kRequestsJsonl);
  ASSERT_TRUE(partial.ok());
  EXPECT_EQ(std::count(partial->begin(), partial->end(), '\n'), 6);
  const BenchmarkReport rep = fixed_report();
  for (auto& s : sinks) ASSERT_TRUE(s->finish(rep).ok()) << s->name();
  auto result = read_file(root_ / kResultJson);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(json::parse(*result)["completed"], 3);
  EXPECT_EQ(*read_file(root_ / kSummaryCsv), summary_csv(rep));
  EXPECT_EQ(stdout_text.str(), markdown_summary(rep));
}

}  // namespace
}  // namespace ib
