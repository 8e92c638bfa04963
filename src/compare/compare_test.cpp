#include "compare/compare.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

namespace ib {
namespace {

using nlohmann::json;

TEST(Significance, StudentTMatchesClosedFormsAndTables) {
  // df = 1 is the Cauchy distribution: p = 1 - (2/pi) atan|t|. t = 1 -> 0.5.
  EXPECT_NEAR(student_t_two_sided_p(1.0, 1.0), 0.5, 1e-12);
  EXPECT_NEAR(student_t_two_sided_p(3.0, 1.0), 1.0 - 2.0 / std::numbers::pi * std::atan(3.0),
              1e-12);
  // df = 2: p = 1 - |t| / sqrt(2 + t^2). t = 2 -> 1 - 2/sqrt(6) = 0.183503.
  EXPECT_NEAR(student_t_two_sided_p(2.0, 2.0), 1.0 - 2.0 / std::sqrt(6.0), 1e-12);
  // Table critical values of the two-sided 5% level: t(0.975; 1) = 12.706, t(0.975; 4) = 2.776,
  // t(0.975; 10) = 2.228, t(0.975; 30) = 2.042 (rounded to 3 decimals, hence the tolerance).
  EXPECT_NEAR(student_t_two_sided_p(12.706, 1), 0.05, 2e-5);
  EXPECT_NEAR(student_t_two_sided_p(2.776, 4), 0.05, 2e-4);
  EXPECT_NEAR(student_t_two_sided_p(2.228, 10), 0.05, 2e-4);
  EXPECT_NEAR(student_t_two_sided_p(2.042, 30), 0.05, 2e-4);
  EXPECT_DOUBLE_EQ(student_t_two_sided_p(0.0, 5), 1.0);
  EXPECT_NEAR(student_t_two_sided_p(-2.228, 10), student_t_two_sided_p(2.228, 10), 1e-15);
}

TEST(Significance, IncompleteBetaKnownValues) {
  // I_x(1, 1) = x; I_x(2, 1) = x^2; I_x(1, 2) = 1 - (1 - x)^2; I_0.5(a, a) = 0.5.
  EXPECT_NEAR(regularized_incomplete_beta(1, 1, 0.3), 0.3, 1e-14);
  EXPECT_NEAR(regularized_incomplete_beta(2, 1, 0.7), 0.49, 1e-14);
  EXPECT_NEAR(regularized_incomplete_beta(1, 2, 0.2), 1 - 0.64, 1e-14);
  EXPECT_NEAR(regularized_incomplete_beta(7.5, 7.5, 0.5), 0.5, 1e-13);
}

TEST(Significance, WelchByHand) {
  // A = {1, 3}, B = {5, 7}: means 2 and 6, sample variances 2 and 2; SE = sqrt(2/2 + 2/2)
  // = sqrt(2); t = 4 / sqrt(2) = 2.8284; df = (1 + 1)^2 / (1/1 + 1/1) = 2;
  // p = 1 - t / sqrt(2 + t^2) = 1 - 2.8284 / sqrt(10) = 0.105573.
  const std::vector<double> a = {1, 3};
  const std::vector<double> b = {5, 7};
  const auto w = welch_t_test(a, b);
  ASSERT_TRUE(w.has_value());
  EXPECT_NEAR(w->t, 2.0 * std::sqrt(2.0), 1e-12);
  EXPECT_NEAR(w->df, 2.0, 1e-12);
  EXPECT_NEAR(w->p, 1.0 - std::sqrt(8.0) / std::sqrt(10.0), 1e-12);
  // A = {1, 2, 3}, B = {4, 5, 6}: variances 1 and 1, SE = sqrt(2/3), t = 3 / 0.8165 = 3.6742,
  // df = (2/3)^2 / ((1/3)^2/2 * 2) = 4. For df = 4, P(|T| < t) = s (1 + c^2 / 2) with
  // s = sin(atan(t/2)) = sqrt(3.375 / 4.375) = 0.878310 and c^2 = 1 / 4.375 = 0.228571:
  // 0.978688, so p = 0.021312 (scipy.stats.ttest_ind(equal_var=False) prints the same).
  const std::vector<double> c = {1, 2, 3};
  const std::vector<double> d = {4, 5, 6};
  const auto w2 = welch_t_test(c, d);
  ASSERT_TRUE(w2.has_value());
  EXPECT_NEAR(w2->df, 4.0, 1e-12);
  EXPECT_NEAR(w2->p, 0.021312, 2e-6);
  // Unequal sizes and variances: df falls between min(n) - 1 and na + nb - 2.
  const std::vector<double> e = {10, 10.5, 9.8, 10.1, 10.2};
  const std::vector<double> f = {11, 14, 12.5};
  const auto w3 = welch_t_test(e, f);
  ASSERT_TRUE(w3.has_value());
  EXPECT_GT(w3->df, 2.0);
  EXPECT_LT(w3->df, 6.0);
  EXPECT_FALSE(welch_t_test(std::vector<double>{1.0}, d).has_value());
  // No variance on either side.
  EXPECT_DOUBLE_EQ(welch_t_test(std::vector<double>{2, 2}, std::vector<double>{2, 2})->p, 1.0);
  EXPECT_DOUBLE_EQ(welch_t_test(std::vector<double>{2, 2}, std::vector<double>{3, 3})->p, 0.0);
}

TEST(Significance, ParseFraction) {
  EXPECT_DOUBLE_EQ(*parse_fraction("5%", "--threshold"), 0.05);
  EXPECT_DOUBLE_EQ(*parse_fraction("0.05", "--threshold"), 0.05);
  EXPECT_DOUBLE_EQ(*parse_fraction("10", "--threshold"), 0.10);
  const auto bad = parse_fraction("five", "--threshold");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("--threshold five"), std::string::npos);
}

json result_with(const std::vector<double>& throughput, const std::vector<double>& ttft,
                 int input_len = 32) {
  return json{
      {"config", {{"model", "tiny-15m"}, {"input_len", std::to_string(input_len)}}},
      {"spread",
       {{"output_throughput", {{"per_run", throughput}}}, {"median_ttft_ms", {{"per_run", ttft}}}}},
      {"memory", {{"peaks", {{"rss_bytes", 1073741824.0}}}}}};
}

TEST(Compare, DirectionAwareVerdicts) {
  const json a = result_with({100, 101, 99}, {10, 10.2, 9.8});
  // Throughput down 10% (significant), TTFT down 10% (better).
  const json b = result_with({90, 91, 89}, {9, 9.2, 8.8});
  const Comparison c = compare_results(a, b, 0.05);
  EXPECT_TRUE(c.workload_differences.empty());
  ASSERT_EQ(c.metrics.size(), 3u);
  const auto& tput = c.metrics[0];
  EXPECT_EQ(tput.key, "output_throughput");
  EXPECT_NEAR(*tput.change, -0.10, 1e-12);
  EXPECT_TRUE(tput.regression);
  EXPECT_EQ(tput.verdict, "REGRESSION");
  // Same spread, means 100 vs 90: t = -10 / sqrt(2/3) = -12.247, df 4, p ~ 2.5e-4.
  EXPECT_LT(tput.test->p, 1e-3);
  EXPECT_EQ(c.metrics[1].verdict, "improvement");
  EXPECT_FALSE(c.metrics[1].regression);
  // Peak memory: one value per side, the change alone decides (here none).
  EXPECT_EQ(c.metrics[2].key, "peak_rss_bytes");
  EXPECT_TRUE(c.metrics[2].change_only);
  EXPECT_EQ(c.metrics[2].verdict, "within threshold (change only)");
  EXPECT_EQ(c.regressions(), 1);
  const std::string md = comparison_markdown(c);
  EXPECT_NE(md.find("| Output token throughput | tok/s | 100.0 | 90.0 | -10.0% |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("1 significant regression: output_throughput."), std::string::npos) << md;
  const json j = comparison_json(c);
  EXPECT_EQ(j["regressions"], 1);
  EXPECT_EQ(j["metrics"][0]["test"], "welch_t");
}

TEST(Compare, NoisyDropIsNotARegressionAndSmallDropIsWithinThreshold) {
  const json a = result_with({100, 140, 60}, {10, 10, 10});
  const json noisy = result_with({80, 130, 50}, {10, 10, 10});
  const Comparison c = compare_results(a, noisy, 0.05);
  EXPECT_EQ(c.metrics[0].verdict, "worse, not significant");
  EXPECT_GT(c.metrics[0].test->p, 0.05);
  EXPECT_EQ(c.regressions(), 0);
  const json small = result_with({98, 99, 97}, {10.1, 10.1, 10.1});
  EXPECT_EQ(compare_results(a, small, 0.05).regressions(), 0);
}

TEST(Compare, SingleRunsDecideByChangeAlone) {
  const json a = result_with({100}, {10});
  const json b = result_with({100}, {12});  // TTFT +20%
  const Comparison c = compare_results(a, b, 0.05);
  EXPECT_TRUE(c.metrics[1].regression);
  EXPECT_EQ(c.metrics[1].verdict, "REGRESSION (change only)");
}

json with_energy(const std::vector<double>& joules, double gpu_peak_gib) {
  json phases = json::array({{{"phase", "warm-up"}, {"joules", 1.0}, {"tokens_per_joule", 1.0}}});
  for (size_t k = 0; k < joules.size(); ++k) {
    phases.push_back({{"phase", "run " + std::to_string(k)},
                      {"joules", joules[k]},
                      {"tokens_per_joule", 1000.0 / joules[k]}});
  }
  json r = result_with({100, 100, 100}, {10, 10, 10});
  r["energy"] = {{"available", true}, {"phases", phases}};
  r["memory"]["peaks"]["gpus_used_bytes"] = gpu_peak_gib * 1024.0 * 1024.0 * 1024.0;
  return r;
}

TEST(Compare, EnergyPerRunAndPeakGpuMemory) {
  // B spends 20% more joules per run (1000 output tokens each) and peaks 1 GiB higher.
  const Comparison c =
      compare_results(with_energy({100, 101, 99}, 20.0), with_energy({120, 121, 119}, 21.0), 0.05);
  const auto find = [&](const std::string& key) -> const MetricComparison& {
    for (const auto& m : c.metrics) {
      if (m.key == key) return m;
    }
    ADD_FAILURE() << key;
    return c.metrics.front();
  };
  const auto& joules = find("energy_joules_per_run");
  EXPECT_EQ(joules.a_values, (std::vector<double>{100, 101, 99}));  // warm-up left out
  EXPECT_NEAR(*joules.change, 0.20, 1e-12);
  EXPECT_TRUE(joules.regression);
  const auto& per_joule = find("output_tokens_per_joule");
  EXPECT_TRUE(per_joule.higher_is_better);
  EXPECT_NEAR(*per_joule.change, 1000.0 / 120 / (1000.0 / 100) - 1, 1e-12);
  EXPECT_TRUE(per_joule.regression);
  const auto& peak = find("peak_gpus_used_bytes");
  EXPECT_NEAR(peak.a, 20.0, 1e-12);
  EXPECT_NEAR(*peak.change, 0.05, 1e-12);  // exactly at the threshold: not worse by more
  EXPECT_FALSE(peak.regression);
  EXPECT_EQ(c.regressions(), 2);
}

TEST(Compare, WorkloadDifferencesAreListed) {
  const auto diffs = workload_differences(result_with({1}, {1}, 32), result_with({1}, {1}, 64));
  ASSERT_EQ(diffs.size(), 1u);
  EXPECT_EQ(diffs[0], "input_len: \"32\" vs \"64\"");
  // Tensor parallelism is part of the workload; a result without the key ran on one rank.
  json tp2 = result_with({1}, {1});
  tp2["config"]["tensor_parallel_size"] = 2;
  const auto tp = workload_differences(result_with({1}, {1}), tp2);
  ASSERT_EQ(tp.size(), 1u);
  EXPECT_EQ(tp[0], "tensor_parallel_size: null vs 2");
}

json with_switches(json switches) {
  json r = result_with({100, 100, 100}, {10, 10, 10});
  r["kernel_switches"] = std::move(switches);
  return r;
}

json cuda_switches(const std::string& pdl, const std::string& pdl_source) {
  return {{"IB_PDL", {{"value", pdl}, {"source", pdl_source}, {"applies", true}}},
          {"IB_FUSED", {{"value", "1"}, {"source", "default"}, {"applies", true}}}};
}

TEST(Compare, SameSwitchesFromEnvAndDefaultDoNotDiffer) {
  // IB_PDL=0 set explicitly is the default: the same kernels.
  const Comparison c = compare_results(with_switches(cuda_switches("0", "default")),
                                       with_switches(cuda_switches("0", "env")), 0.05);
  EXPECT_TRUE(c.switch_differences.empty());
  EXPECT_FALSE(c.switches_refuse());
  EXPECT_EQ(comparison_markdown(c).find("Kernel switches"), std::string::npos);
}

TEST(Compare, DifferentAppliedSwitchesAreListedWithBothValuesAndRefuse) {
  const Comparison c = compare_results(with_switches(cuda_switches("0", "default")),
                                       with_switches(cuda_switches("1", "env")), 0.05);
  ASSERT_EQ(c.switch_differences.size(), 1u);
  EXPECT_EQ(c.switch_differences[0].name, "IB_PDL");
  EXPECT_TRUE(c.switch_differences[0].refuses);
  EXPECT_TRUE(c.switches_refuse());
  EXPECT_EQ(switch_difference_text(c.switch_differences[0]), "IB_PDL: 0 (default) vs 1 (env)");
  EXPECT_NE(comparison_markdown(c).find("Kernel switches differ (compared with "
                                        "--allow-switch-diff): IB_PDL: 0 (default) vs 1 (env)."),
            std::string::npos)
      << comparison_markdown(c);
  const json j = comparison_json(c);
  EXPECT_EQ(j["kernel_switch_differences"][0]["name"], "IB_PDL");
  EXPECT_EQ(j["kernel_switch_differences"][0]["refuses"], true);
}

TEST(Compare, SwitchesThatSelectNothingAreListedButDoNotRefuse) {
  // Two CPU runs, one with IB_ATTN_PREFETCH set: no kernel differs.
  const json set = {{"IB_ATTN_PREFETCH", {{"value", "2"}, {"source", "env"}, {"applies", false}}}};
  const Comparison c = compare_results(with_switches(json::object()), with_switches(set), 0.05);
  ASSERT_EQ(c.switch_differences.size(), 1u);
  EXPECT_EQ(switch_difference_text(c.switch_differences[0]),
            "IB_ATTN_PREFETCH: absent vs 2 (env, not applied)");
  EXPECT_FALSE(c.switches_refuse());
  // A name this build does not know is still compared, not dropped.
  json with_new = cuda_switches("0", "default");
  with_new["IB_NEW_KERNEL"] = {{"value", "1"}, {"source", "env"}, {"applies", true}};
  const Comparison d =
      compare_results(with_switches(cuda_switches("0", "default")), with_switches(with_new), 0.05);
  ASSERT_EQ(d.switch_differences.size(), 1u);
  EXPECT_EQ(d.switch_differences[0].name, "IB_NEW_KERNEL");
  EXPECT_FALSE(d.switches_refuse());  // A's build did not have it: listed, not refused
}

TEST(Compare, ResultsWithoutSwitchesAreUnknownNotRefused) {
  const json old = result_with({100, 100, 100}, {10, 10, 10});
  const Comparison c = compare_results(old, with_switches(cuda_switches("1", "env")), 0.05);
  EXPECT_TRUE(c.switch_differences.empty());
  EXPECT_FALSE(c.switches_refuse());
  EXPECT_FALSE(c.a_records_switches);
  EXPECT_TRUE(c.b_records_switches);
  EXPECT_NE(comparison_markdown(c).find("Kernel switches unknown: A records none"),
            std::string::npos)
      << comparison_markdown(c);
  EXPECT_EQ(comparison_json(c)["kernel_switches_recorded"]["a"], false);
}

}  // namespace
}  // namespace ib
