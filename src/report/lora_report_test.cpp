// LoRA benchmarks in the results: each request's adapter in requests.jsonl, and the metrics of
// each adapter's own requests in result.json and the Markdown table.
#include <gtest/gtest.h>

#include "report/report.h"

namespace ib {
namespace {

using nlohmann::json;

constexpr int64_t kMs = 1'000'000;

RequestRecord lora_record(int run, const std::string& lora, int64_t first_ms, int64_t gap_ms) {
  RequestRecord r;
  r.run = run;
  r.t_send_ns = 0;
  for (int64_t k = 0; k < 4; ++k) add_chunk(r, 1, (first_ms + k * gap_ms) * kMs);
  r.t_end_ns = r.token_times_ns.back();
  r.n_in = 8;
  r.n_out = r.n_out_requested = 4;
  r.ok = true;
  r.finish_reason = "length";
  r.lora_name = lora;
  return r;
}

TEST(LoraReport, PerAdapterMetrics) {
  BenchmarkRecords records;
  for (int run = 0; run < 2; ++run) {
    records.runs.push_back({lora_record(run, "sql", 10, 2), lora_record(run, "chat", 20, 4),
                            lora_record(run, "sql", 10, 2), lora_record(run, "", 5, 1)});
  }
  BenchmarkReport report;
  report.runs_requested = 2;
  add_results(report, records);
  ASSERT_EQ(report.per_adapter.size(), 3u);
  EXPECT_EQ(report.per_adapter[0].adapter, "sql");
  EXPECT_EQ(report.per_adapter[0].requests, 4);  // two per run
  EXPECT_EQ(report.per_adapter[2].adapter, "base");
  const json j = result_json(report);
  ASSERT_TRUE(j.contains("lora_adapters"));
  EXPECT_DOUBLE_EQ(j["lora_adapters"]["sql"]["median_ttft_ms"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(j["lora_adapters"]["chat"]["median_ttft_ms"].get<double>(), 20.0);
  EXPECT_DOUBLE_EQ(j["lora_adapters"]["chat"]["median_tpot_ms"].get<double>(), 4.0);
  EXPECT_EQ(j["lora_adapters"]["base"]["requests"], 2);
  const std::string table = markdown_summary(report);
  EXPECT_NE(table.find("| LoRA adapter | requests |"), std::string::npos) << table;
  EXPECT_NE(table.find("| chat | 2 |"), std::string::npos) << table;
  // requests.jsonl: the adapter of each request; none for the base model.
  EXPECT_EQ(json::parse(request_json_line(records.runs[0][1], 0))["lora_adapter"], "chat");
  EXPECT_FALSE(json::parse(request_json_line(records.runs[0][3], 0)).contains("lora_adapter"));
}

TEST(LoraReport, NoAdapterSectionWithoutLora) {
  BenchmarkRecords records;
  records.runs.push_back({lora_record(0, "", 10, 2)});
  BenchmarkReport report;
  add_results(report, records);
  EXPECT_TRUE(report.per_adapter.empty());
  EXPECT_FALSE(result_json(report).contains("lora_adapters"));
}

}  // namespace
}  // namespace ib
