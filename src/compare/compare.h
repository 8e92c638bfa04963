// Front door of compare/: `inferbench compare A B` without the command line. Two results of the
// same workload, metric by metric: the relative change of the medians (direction-aware: a drop
// in throughput and a rise in latency are both "worse") and a significance test over the
// per-run values.
//
// The test is Welch's two-sided t-test (unequal variances) on the per-run values. Mann-Whitney U
// is not used: with the default 3 runs per side its smallest attainable exact two-sided p-value
// is 0.1, so it could never flag a regression at p < 0.05. With fewer than 2 runs on a side no
// variance exists: the change alone decides, and the row says so ("change only").
//
// A regression is a metric worse by more than the threshold AND significant (p < 0.05).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/result.h"

namespace ib {

// I_x(a, b), the regularized incomplete beta function (continued fraction), for a, b > 0.
double regularized_incomplete_beta(double a, double b, double x);
// Two-sided p-value of Student's t with df degrees of freedom (df > 0, may be fractional).
double student_t_two_sided_p(double t, double df);

struct WelchTest {
  double t = 0;   // (mean b - mean a) / standard error
  double df = 0;  // Welch–Satterthwaite
  double p = 1;   // two-sided
};
// nullopt with fewer than 2 values on a side. Zero variance on both sides: p = 1 when the means
// are equal, else 0.
std::optional<WelchTest> welch_t_test(std::span<const double> a, std::span<const double> b);

// "5%", "0.05" or "5" (a bare number >= 1 is a percentage) -> 0.05. User error naming the flag.
Result<double> parse_fraction(const std::string& text, const std::string& flag);

inline constexpr double kSignificance = 0.05;

struct MetricComparison {
  std::string key;  // "output_throughput", "p99_ttft_ms", "peak_gpus_used_bytes", ...
  std::string label;
  std::string unit;
  bool higher_is_better = false;
  std::vector<double> a_values;  // per run (one value for whole-benchmark metrics)
  std::vector<double> b_values;
  double a = 0;  // median
  double b = 0;
  std::optional<double> change;  // (b - a) / a; nullopt when a is 0 and b is not
  std::optional<WelchTest> test;
  std::string verdict;  // "regression", "improvement", "worse, not significant", ..., "unchanged"
  bool regression = false;
  bool change_only = false;  // fewer than 2 values on a side: no test
};

// One kernel switch (result.json "kernel_switches") set differently in A and B. Each side reads
// "1 (env)", "0 (default)", "2 (env, not applied)" or "absent".
struct SwitchDifference {
  std::string name;  // "IB_PDL"
  std::string a;
  std::string b;
  // Both backends applied the switch with different values: their kernels differ, and the
  // comparison is refused unless asked for. A switch that one side did not apply (a CPU run, a
  // switch the other build did not know) is listed but does not refuse.
  bool refuses = false;
};

struct Comparison {
  std::string a_name;
  std::string b_name;
  double threshold = 0.05;
  std::vector<std::string> workload_differences;     // empty when the workloads match
  std::vector<SwitchDifference> switch_differences;  // empty when the switches match
  // Whether each result records its kernel switches (results written before they were recorded
  // do not: whether the switches differ is then unknown, and nothing is refused).
  bool a_records_switches = true;
  bool b_records_switches = true;
  std::vector<MetricComparison> metrics;
  std::vector<std::string> notes;  // metrics present on one side only, ...
  int regressions() const;
  bool switches_refuse() const;  // any switch difference that refuses
};

// "config.input_len: 32 vs 64" for each workload key that differs (model, backend, lengths,
// prompts, load mode, batch, concurrency, rate, dtype, device, dataset, sampling).
std::vector<std::string> workload_differences(const nlohmann::json& a, const nlohmann::json& b);

// Every switch named on either side whose applied value differs, sorted by name; empty when
// either result has no "kernel_switches".
std::vector<SwitchDifference> switch_differences(const nlohmann::json& a, const nlohmann::json& b);
// "IB_PDL: 0 (default) vs 1 (env)".
std::string switch_difference_text(const SwitchDifference& d);

// Both are parsed result.json documents.
Comparison compare_results(const nlohmann::json& a, const nlohmann::json& b, double threshold);

std::string comparison_markdown(const Comparison& c);
nlohmann::json comparison_json(const Comparison& c);

}  // namespace ib
