#include "telemetry/timeline.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/assert.h"

namespace ib {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}

int Timeline::column(const std::string& name) const {
  const auto it = std::find(columns.begin(), columns.end(), name);
  return it == columns.end() ? -1 : static_cast<int>(it - columns.begin());
}

double Timeline::value_at(int col, int64_t t_ns) const {
  if (col < 0 || time_ns.empty() || t_ns < time_ns.front() || t_ns > time_ns.back()) return kNaN;
  const auto it = std::lower_bound(time_ns.begin(), time_ns.end(), t_ns);
  const auto i = static_cast<size_t>(it - time_ns.begin());
  const double hi = rows[i][static_cast<size_t>(col)];
  if (time_ns[i] == t_ns || i == 0) return hi;
  const double lo = rows[i - 1][static_cast<size_t>(col)];
  const double f =
      static_cast<double>(t_ns - time_ns[i - 1]) / static_cast<double>(time_ns[i] - time_ns[i - 1]);
  return lo + (hi - lo) * f;  // NaN propagates
}

double Timeline::max_of(int col) const {
  double best = kNaN;
  if (col < 0) return best;
  for (const auto& row : rows) {
    const double v = row[static_cast<size_t>(col)];
    if (std::isfinite(v) && !(v <= best)) best = v;
  }
  return best;
}

void Timeline::add_column(const std::string& name, const std::vector<double>& values) {
  IB_ASSERT(values.size() == rows.size(), "Timeline::add_column: one value per sample");
  columns.push_back(name);
  for (size_t i = 0; i < rows.size(); ++i) rows[i].push_back(values[i]);
}

std::string phase_at(const std::vector<PhaseSpan>& phases, int64_t t_ns) {
  for (const auto& p : phases) {
    if (t_ns >= p.start_ns && t_ns <= p.end_ns) return p.name;
  }
  return "idle";
}

StepShare step_share(const std::vector<StepRecord>& steps, int64_t t0_ns, int64_t t1_ns) {
  StepShare s;
  if (t1_ns <= t0_ns) return s;
  // Steps never overlap each other; the first one that can reach t0 starts at most one step
  // duration earlier, so searching from the step before the first start >= t0 is enough.
  auto it = std::lower_bound(steps.begin(), steps.end(), t0_ns,
                             [](const StepRecord& r, int64_t t) { return r.start_ns < t; });
  if (it != steps.begin()) --it;
  for (; it != steps.end() && it->start_ns < t1_ns; ++it) {
    const int64_t end = it->start_ns + it->duration_ns;
    const int64_t overlap = std::min(end, t1_ns) - std::max(it->start_ns, t0_ns);
    if (overlap <= 0) continue;
    const double f = it->duration_ns > 0
                         ? static_cast<double>(overlap) / static_cast<double>(it->duration_ns)
                         : 1.0;
    if (it->prefill_heavy()) {
      s.prefill_ns += overlap;
      s.prefill_tokens += f * it->prefill_tokens;
    } else {
      s.decode_ns += overlap;
      s.decode_tokens += f * it->decode_tokens;
    }
  }
  return s;
}

std::string step_kind_in(const std::vector<StepRecord>& steps, int64_t t0_ns, int64_t t1_ns) {
  const StepShare s = step_share(steps, t0_ns, t1_ns);
  if (s.prefill_ns == 0 && s.decode_ns == 0) return "idle";
  return s.prefill_ns > s.decode_ns ? "prefill" : "decode";
}

void StepLog::add(int64_t start_ns, int64_t duration_ns, int prefill_tokens, int decode_tokens) {
  add(StepRecord{start_ns, duration_ns, prefill_tokens, decode_tokens});
}

void StepLog::add(const StepRecord& step) {
  std::lock_guard lock(mu_);
  steps_.push_back(step);
}

std::string steps_csv(const std::vector<StepRecord>& steps, const std::vector<PhaseSpan>& phases) {
  std::string out =
      "start_ms,phase,num_seqs,prefill_tokens,decode_tokens,duration_us,gap_before_us,"
      "schedule_us,launch_us,wait_us,finish_us,device_us,graph\n";
  const auto us = [](int64_t ns) {
    return ns < 0 ? std::string() : fmt::format("{:.1f}", static_cast<double>(ns) / 1e3);
  };
  int64_t prev_end = -1;
  for (const StepRecord& s : steps) {
    const int64_t gap = prev_end < 0 ? -1 : std::max<int64_t>(0, s.start_ns - prev_end);
    out += fmt::format("{:.3f},{},{},{},{},{},{},{},{},{},{},{},{}\n",
                       static_cast<double>(s.start_ns) / 1e6, phase_at(phases, s.start_ns),
                       s.num_seqs, s.prefill_tokens, s.decode_tokens, us(s.duration_ns), us(gap),
                       us(s.schedule_ns), us(s.launch_ns), us(s.wait_ns), us(s.finish_ns),
                       us(s.device_ns), s.graph ? 1 : 0);
    prev_end = s.start_ns + s.duration_ns;
  }
  return out;
}

std::vector<StepRecord> StepLog::steps(int64_t origin_ns) const {
  std::vector<StepRecord> out;
  {
    std::lock_guard lock(mu_);
    out = steps_;
  }
  for (auto& s : out) s.start_ns -= origin_ns;
  std::sort(out.begin(), out.end(),
            [](const StepRecord& a, const StepRecord& b) { return a.start_ns < b.start_ns; });
  return out;
}

}  // namespace ib
