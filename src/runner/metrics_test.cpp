#include "runner/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

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

// Vision requests: the fixture's two completed requests with images, worked out by hand; the
// failed one and a request whose engine did not report its scheduling are left out of the split.
TEST(RunMetrics, VisionSplitsTtftAndCountsVisualTokensAndKvBytes) {
  auto rs = fixture();
  rs[0].visual_tokens = 8;  // TTFT 10 = queue 3 + encode 2 + prefill 5
  rs[0].t_scheduled_ns = 4 * kMs;
  rs[0].encode_ns = 2 * kMs;
  rs[0].kv_bytes = 1400;     // 14 tokens (10 in, 4 out): visual 8 x 100
  rs[1].visual_tokens = 16;  // TTFT 5 = queue 1 + encode 1 + prefill 3
  rs[1].t_scheduled_ns = 1 * kMs;
  rs[1].encode_ns = 1 * kMs;
  rs[1].kv_bytes = 4400;     // 22 tokens (20 in, 2 out): visual 16 x 200
  rs[2].visual_tokens = 99;  // failed: not counted
  // rs[3]: no images, no scheduling time (t_scheduled_ns 0): counted, but not in the split.
  rs[3].kv_bytes = 600;
  MetricsOptions opt;
  opt.percentiles = {50};
  const RunMetrics text_only = compute_run_metrics(rs, opt);
  EXPECT_FALSE(text_only.vision.has_value());
  opt.vision = true;
  const RunMetrics m = compute_run_metrics(rs, opt);
  ASSERT_TRUE(m.vision.has_value());
  const VisionRunMetrics& v = *m.vision;
  EXPECT_EQ(v.total_visual_tokens, 24);
  EXPECT_DOUBLE_EQ(v.mean_visual_tokens, 8.0);
  EXPECT_EQ(v.encode.count, 3u);
  EXPECT_DOUBLE_EQ(v.encode.mean_ms, 1.0);
  EXPECT_EQ(v.ttft_queue.count, 2u);
  EXPECT_DOUBLE_EQ(v.ttft_queue.mean_ms, 2.0);
  EXPECT_DOUBLE_EQ(v.ttft_prefill.mean_ms, 4.0);
  EXPECT_DOUBLE_EQ(v.mean_kv_bytes, (1400.0 + 4400 + 600) / 3);
  EXPECT_DOUBLE_EQ(v.mean_visual_kv_bytes, (800.0 + 3200) / 3);
  std::map<std::string, double> flat;
  for (const MetricValue& x : flatten_metrics(m, opt.percentiles)) flat[x.key] = x.value;
  EXPECT_EQ(flat.at("total_visual_tokens"), 24);
  EXPECT_DOUBLE_EQ(flat.at("median_ttft_queue_ms"), 2.0);
  EXPECT_DOUBLE_EQ(flat.at("p50_ttft_prefill_ms"), 4.0);
  EXPECT_DOUBLE_EQ(flat.at("mean_encode_ms"), 1.0);
  EXPECT_DOUBLE_EQ(flat.at("mean_visual_kv_bytes"), (800.0 + 3200) / 3);
  for (const MetricValue& x : flatten_metrics(text_only, opt.percentiles)) {
    EXPECT_EQ(x.key.find("visual"), std::string::npos) << x.key;
  }
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
