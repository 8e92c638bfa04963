#include "telemetry/energy.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "core/stats.h"

namespace ib {
namespace {

using nlohmann::json;

// Columns gpu{i}_<field> for i = 0, 1, ... while they exist.
std::vector<int> gpu_columns(const Timeline& tl, const char* field) {
  std::vector<int> cols;
  for (int i = 0;; ++i) {
    const int c = tl.column(fmt::format("gpu{}_{}", i, field));
    if (c < 0) return cols;
    cols.push_back(c);
  }
}

bool all_finite(const Timeline& tl, const std::vector<int>& cols) {
  for (const auto& row : tl.rows) {
    for (int c : cols) {
      if (!std::isfinite(row[static_cast<size_t>(c)])) return false;
    }
  }
  return !cols.empty() && !tl.rows.empty();
}

double interpolate(const std::vector<int64_t>& t, const std::vector<double>& v, int64_t at) {
  if (t.empty()) return 0;
  if (at <= t.front()) return v.front();
  if (at >= t.back()) return v.back();
  const auto i = static_cast<size_t>(std::lower_bound(t.begin(), t.end(), at) - t.begin());
  const double f = static_cast<double>(at - t[i - 1]) /
                   static_cast<double>(std::max<int64_t>(1, t[i] - t[i - 1]));
  return v[i - 1] + (v[i] - v[i - 1]) * f;
}

json per_joule(double tokens, double joules) {
  return joules > 0 ? json(tokens / joules) : json(nullptr);
}

}  // namespace

EnergySeries energy_series(const Timeline& tl) {
  EnergySeries s;
  const auto energy = gpu_columns(tl, "energy_j");
  const auto power = gpu_columns(tl, "power_w");
  if (all_finite(tl, power)) {
    double sum = 0;
    double last_w = 0;
    for (size_t k = 0; k < tl.rows.size(); ++k) {
      double w = 0;
      for (int c : power) w += tl.rows[k][static_cast<size_t>(c)];
      if (k > 0) {
        sum += 0.5 * (w + last_w) * static_cast<double>(tl.time_ns[k] - tl.time_ns[k - 1]) / 1e9;
      }
      s.power_cumulative_j.push_back(sum);
      last_w = w;
    }
  }
  if (all_finite(tl, energy)) {
    s.method = "energy_counter";
    s.gpus = static_cast<int>(energy.size());
    for (const auto& row : tl.rows) {
      double sum = 0;
      for (int c : energy) sum += row[static_cast<size_t>(c)];
      s.cumulative_j.push_back(sum);
    }
  } else if (!s.power_cumulative_j.empty()) {
    s.method = "integrated_power";
    s.gpus = static_cast<int>(power.size());
    s.cumulative_j = s.power_cumulative_j;
  }
  return s;
}

json energy_report(const Timeline& tl, const std::vector<PhaseSpan>& phases,
                   const std::vector<StepRecord>& steps,
                   const std::vector<std::pair<std::string, int64_t>>& phase_output_tokens) {
  const EnergySeries s = energy_series(tl);
  if (s.method.empty()) {
    return json{{"available", false},
                {"reason", "no GPU energy counter or power reading (NVML absent or CPU run)"}};
  }
  auto tokens_of = [&](const std::string& phase) -> std::optional<int64_t> {
    for (const auto& [name, n] : phase_output_tokens) {
      if (name == phase) return n;
    }
    return std::nullopt;
  };
  json out_phases = json::array();
  std::vector<double> run_joules;
  double run_tokens = 0;
  auto delta = [&](const std::vector<double>& cumulative, const PhaseSpan& p) {
    return interpolate(tl.time_ns, cumulative, p.end_ns) -
           interpolate(tl.time_ns, cumulative, p.start_ns);
  };
  for (const auto& p : phases) {
    double j = delta(s.cumulative_j, p);
    std::string method = s.method;
    if (method == "energy_counter" && j <= 0 && !s.power_cumulative_j.empty() &&
        delta(s.power_cumulative_j, p) > 0) {
      j = delta(s.power_cumulative_j, p);
      method = "integrated_power (the counter did not move in this phase)";
    }
    const auto tokens = tokens_of(p.name);
    out_phases.push_back(json{
        {"phase", p.name},
        {"method", method},
        {"duration_s", static_cast<double>(p.end_ns - p.start_ns) / 1e9},
        {"joules", j},
        {"output_tokens", tokens ? json(*tokens) : json(nullptr)},
        {"tokens_per_joule", tokens ? per_joule(static_cast<double>(*tokens), j) : json(nullptr)}});
    if (p.name.rfind("run ", 0) == 0) {
      run_joules.push_back(j);
      run_tokens += static_cast<double>(tokens.value_or(0));
    }
  }
  // Prefill-heavy vs decode-heavy: each sample interval's joules split by the step time in it.
  double prefill_j = 0;
  double decode_j = 0;
  double prefill_tokens = 0;
  double decode_tokens = 0;
  int64_t prefill_ns = 0;
  int64_t decode_ns = 0;
  for (size_t k = 1; k < tl.time_ns.size(); ++k) {
    const int64_t length = tl.time_ns[k] - tl.time_ns[k - 1];
    if (length <= 0) continue;
    const StepShare share = step_share(steps, tl.time_ns[k - 1], tl.time_ns[k]);
    const double dj = s.cumulative_j[k] - s.cumulative_j[k - 1];
    prefill_j += dj * static_cast<double>(share.prefill_ns) / static_cast<double>(length);
    decode_j += dj * static_cast<double>(share.decode_ns) / static_cast<double>(length);
    prefill_tokens += share.prefill_tokens;
    decode_tokens += share.decode_tokens;
    prefill_ns += share.prefill_ns;
    decode_ns += share.decode_ns;
  }
  double total_run_j = 0;
  for (double j : run_joules) total_run_j += j;
  json out{{"available", true},
           {"method", s.method},
           {"flag", s.method == "integrated_power"
                        ? json("no energy counter: joules integrate NVML power, a 1 s average "
                               "on recent GPUs; short phases are smeared")
                        : json(nullptr)},
           {"gpus", s.gpus},
           {"total_joules", s.cumulative_j.back() - s.cumulative_j.front()},
           {"phases", out_phases},
           {"median_joules_per_run", run_joules.empty() ? json(nullptr) : json(median(run_joules))},
           {"output_tokens_per_joule", per_joule(run_tokens, total_run_j)},
           {"prefill_heavy_steps",
            {{"time_s", static_cast<double>(prefill_ns) / 1e9},
             {"joules", prefill_j},
             {"prompt_tokens", prefill_tokens},
             {"tokens_per_joule", per_joule(prefill_tokens, prefill_j)}}},
           {"decode_heavy_steps",
            {{"time_s", static_cast<double>(decode_ns) / 1e9},
             {"joules", decode_j},
             {"output_tokens", decode_tokens},
             {"tokens_per_joule", per_joule(decode_tokens, decode_j)}}}};
  return out;
}

}  // namespace ib
