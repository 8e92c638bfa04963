#include "runner/metrics.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ib {
namespace {

constexpr int64_t kMs = 1'000'000;

RequestRecord record(int64_t sched_ms, int64_t send_ms, std::vector<int64_t> token_ms, int n_in) {
  RequestRecord r;
  r.t_sched_ns = sched_ms * kMs;
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

// Four requests whose metrics are worked out by hand in the comments.
std::vector<RequestRecord> fixture() {
  std::vector<RequestRecord> rs;
  rs.push_back(record(0, 1, {11, 13, 16, 20}, 10));  // TTFT 10, TPOT 3, ITL 2 3 4, E2EL 19, queue 1
  rs.push_back(record(0, 0, {5, 25}, 20));           // TTFT 5, TPOT 20, ITL 20, E2EL 25, queue 0
  RequestRecord failed;
  failed.t_send_ns = 2 * kMs;
  failed.t_end_ns = 30 * kMs;  // the last event of the run: duration = 30 ms
  failed.finish_reason = "error";
  failed.error = "boom";
  rs.push_back(failed);
  rs.push_back(record(3, 4, {6}, 5));  // TTFT 2, no TPOT, no ITL, E2EL 2, queue 1
  return rs;
}

const LatencyStats& stat(const RunMetrics& m, LatencyMetric k) {
  return m[k];
}

TEST(RunMetrics, MatchesHandComputedValues) {
  MetricsOptions opt;
  opt.percentiles = {50, 99};
  const auto rs = fixture();
  const RunMetrics m = compute_run_metrics(rs, opt);
  EXPECT_EQ(m.completed, 3);
  EXPECT_EQ(m.failed, 1);
  EXPECT_EQ(m.total_input_tokens, 35);
  EXPECT_EQ(m.total_output_tokens, 7);
  EXPECT_DOUBLE_EQ(m.duration_s, 0.030);
  EXPECT_NEAR(m.request_throughput, 100.0, 1e-9);
  EXPECT_NEAR(m.output_throughput, 7 / 0.03, 1e-9);
  EXPECT_NEAR(m.total_token_throughput, 42 / 0.03, 1e-9);
  EXPECT_FALSE(m.request_goodput.has_value());

  const auto& ttft = stat(m, LatencyMetric::kTtft);  // [10, 5, 2]
  EXPECT_EQ(ttft.count, 3u);
  EXPECT_NEAR(ttft.mean_ms, 17.0 / 3, 1e-9);
  EXPECT_NEAR(ttft.median_ms, 5.0, 1e-9);
  EXPECT_NEAR(ttft.std_ms, std::sqrt(98.0 / 9), 1e-9);  // population std
  EXPECT_NEAR(ttft.percentiles_ms[0], 5.0, 1e-9);
  EXPECT_NEAR(ttft.percentiles_ms[1], 9.9, 1e-9);  // rank 1.98 between 5 and 10

  const auto& tpot = stat(m, LatencyMetric::kTpot);  // [3, 20]
  EXPECT_EQ(tpot.count, 2u);
  EXPECT_NEAR(tpot.mean_ms, 11.5, 1e-9);
  EXPECT_NEAR(tpot.std_ms, 8.5, 1e-9);
  EXPECT_NEAR(tpot.percentiles_ms[1], 19.83, 1e-9);

  const auto& itl = stat(m, LatencyMetric::kItl);  // pooled [2, 3, 4, 20]
  EXPECT_EQ(itl.count, 4u);
  EXPECT_NEAR(itl.mean_ms, 7.25, 1e-9);
  EXPECT_NEAR(itl.median_ms, 3.5, 1e-9);
  EXPECT_NEAR(itl.percentiles_ms[1], 19.52, 1e-9);

  const auto& e2el = stat(m, LatencyMetric::kE2el);  // [19, 25, 2]
  EXPECT_NEAR(e2el.mean_ms, 46.0 / 3, 1e-9);
  EXPECT_NEAR(e2el.median_ms, 19.0, 1e-9);
  EXPECT_NEAR(stat(m, LatencyMetric::kQueue).mean_ms, 2.0 / 3, 1e-9);     // [1, 0, 1]
  EXPECT_NEAR(stat(m, LatencyMetric::kE2elQueue).median_ms, 20.0, 1e-9);  // [20, 25, 3]
  EXPECT_NEAR(m.per_sequence_decode_tok_s, 1000.0 / 11.5, 1e-9);
}

TEST(RunMetrics, GoodputCountsRequestsMeetingEverySlo) {
  const auto rs = fixture();
  MetricsOptions opt;
  opt.goodput = GoodputSlo{6.0, 10.0, std::nullopt};
  // A fails TTFT (10 > 6), B fails TPOT (20 > 10), D passes (TPOT counts as 0 with one token).
  EXPECT_NEAR(*compute_run_metrics(rs, opt).request_goodput, 1 / 0.03, 1e-9);
  opt.goodput = GoodputSlo{std::nullopt, std::nullopt, 20.0};
  // E2EL 19 and 2 pass, 25 fails.
  EXPECT_NEAR(*compute_run_metrics(rs, opt).request_goodput, 2 / 0.03, 1e-9);
}

TEST(RunMetrics, EmptyRunIsAllZero) {
  const RunMetrics m = compute_run_metrics({}, {});
  EXPECT_EQ(m.completed, 0);
  EXPECT_EQ(m.duration_s, 0);
  EXPECT_EQ(m.output_throughput, 0);
  EXPECT_EQ(stat(m, LatencyMetric::kTtft).count, 0u);
}

TEST(AddChunk, SpreadsMultiTokenChunksOverTheGap) {
  RequestRecord r;
  add_chunk(r, 2, 5 * kMs);  // first chunk: both tokens at its arrival
  add_chunk(r, 1, 10 * kMs);
  add_chunk(r, 4, 18 * kMs);  // 8 ms gap over 4 tokens
  EXPECT_EQ(r.chunks, 3);
  EXPECT_EQ(r.t_first_ns, 5 * kMs);
  EXPECT_EQ(r.token_times_ns, (std::vector<int64_t>{5 * kMs, 5 * kMs, 10 * kMs, 12 * kMs, 14 * kMs,
                                                    16 * kMs, 18 * kMs}));
}

TEST(Flatten, UsesVllmKeysAndUnits) {
  const auto rs = fixture();
  MetricsOptions opt;
  opt.percentiles = {99, 99.9};
  opt.goodput = GoodputSlo{};
  const auto m = compute_run_metrics(rs, opt);
  const auto values = flatten_metrics(m, opt.percentiles);
  auto find = [&](const std::string& key) -> const MetricValue* {
    for (const auto& v : values)
      if (v.key == key) return &v;
    return nullptr;
  };
  for (const char* key :
       {"duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
        "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
        "mean_ttft_ms", "median_tpot_ms", "std_itl_ms", "p99_e2el_ms", "p99.9_itl_ms",
        "mean_client_queue_time_ms", "p99_e2el_including_client_queue_ms"}) {
    EXPECT_NE(find(key), nullptr) << key;
  }
  EXPECT_EQ(find("p99_ttft_ms")->unit, "ms");
  EXPECT_EQ(find("output_throughput")->unit, "tok/s");
  EXPECT_NEAR(find("p99_ttft_ms")->value, 9.9, 1e-9);
  EXPECT_EQ(find("completed")->value, 3);
}

TEST(Aggregate, MedianMinMaxAndPerRunValues) {
  auto run = [](double v) { return std::vector<MetricValue>{{"x", "X", "s", v}}; };
  auto agg = aggregate_runs({run(3), run(1), run(2)});
  ASSERT_EQ(agg.size(), 1u);
  EXPECT_EQ(agg[0].per_run, (std::vector<double>{3, 1, 2}));
  EXPECT_EQ(agg[0].spread.median, 2);
  EXPECT_EQ(agg[0].spread.min, 1);
  EXPECT_EQ(agg[0].spread.max, 3);
  EXPECT_FALSE(agg[0].spread.ci95.has_value());
  agg = aggregate_runs({run(3), run(1), run(2), run(5), run(4)});
  ASSERT_TRUE(agg[0].spread.ci95.has_value());
  EXPECT_LE(agg[0].spread.ci95->lo, 3);
  EXPECT_GE(agg[0].spread.ci95->hi, 3);
}

TEST(Parsing, GoodputPercentileMetricsAndPercentiles) {
  auto g = parse_goodput("ttft:200,e2el:1000.5");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->ttft_ms, 200);
  EXPECT_FALSE(g->tpot_ms.has_value());
  EXPECT_EQ(g->e2el_ms, 1000.5);
  for (const char* bad : {"ttft", "ttft:-1", "foo:3", "ttft:x", ""}) {
    auto r = parse_goodput(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.error().message.find("--goodput"), std::string::npos);
  }
  auto pm = parse_percentile_metrics("ttft,e2el,client_queue_time");
  ASSERT_TRUE(pm.ok());
  EXPECT_EQ(pm->size(), 3u);
  EXPECT_FALSE(parse_percentile_metrics("ttft,latency").ok());
  auto pp = parse_metric_percentiles("50,90,99.9");
  ASSERT_TRUE(pp.ok());
  EXPECT_EQ(*pp, (std::vector<double>{50, 90, 99.9}));
  EXPECT_FALSE(parse_metric_percentiles("101").ok());
  EXPECT_FALSE(parse_metric_percentiles("50,").ok());
  EXPECT_EQ(percentile_key(99), "p99");
  EXPECT_EQ(percentile_key(99.9), "p99.9");
}

}  // namespace
}  // namespace ib
