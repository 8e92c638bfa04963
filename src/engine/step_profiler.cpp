#include "engine/detail/step_profiler.h"

#include <algorithm>

#include "core/stats.h"

namespace ib::detail {

void StepProfiler::add(const StepStats& s) {
  if (s.num_prefill_tokens == 0 && s.num_decode_tokens == 0) return;
  Samples& c = s.num_prefill_tokens > 0 ? prefill_ : decode_;
  const int64_t end_ns = s.start_ns + s.duration_ns;
  if (StepStats::HostPhases h; s.host_phases(h)) {
    c.schedule_ns.push_back(h.schedule_ns);
    c.launch_ns.push_back(h.launch_ns);
    c.wait_ns.push_back(h.wait_ns);
    c.finish_ns.push_back(h.finish_ns);
  }
  if (last_end_ns_ > 0 && s.start_ns >= last_end_ns_)
    c.between_ns.push_back(s.start_ns - last_end_ns_);
  last_end_ns_ = end_ns;
  c.sums.steps += 1;
  c.sums.tokens += s.num_prefill_tokens + s.num_decode_tokens;
  c.sums.bytes += s.bytes_moved;
  c.sums.wall_ns += s.duration_ns;
  c.sums.graph_steps += s.graph ? 1 : 0;
  c.wall_ns.push_back(s.duration_ns);
  if (s.device_ns >= 0) {
    c.sums.timed_steps += 1;
    c.sums.device_ns += s.device_ns;
    c.device_ns.push_back(s.device_ns);
    const int64_t host_ns = std::max<int64_t>(0, s.duration_ns - s.device_ns);
    c.host_fraction.push_back(s.duration_ns > 0 ? static_cast<double>(host_ns) /
                                                      static_cast<double>(s.duration_ns)
                                                : 0.0);
  }
}

StepClassProfile StepProfiler::finish(const Samples& s) {
  StepClassProfile p = s.sums;
  const auto med = [](const auto& v) {
    std::vector<double> d(v.begin(), v.end());
    return d.empty() ? 0.0 : median(d);
  };
  p.median_step_ns = med(s.wall_ns);
  if (!s.wall_ns.empty()) {
    std::vector<double> d(s.wall_ns.begin(), s.wall_ns.end());
    p.p95_step_ns = percentile(d, 95.0);
  }
  p.median_device_ns = med(s.device_ns);
  p.median_host_fraction = med(s.host_fraction);
  p.median_schedule_ns = med(s.schedule_ns);
  p.median_launch_ns = med(s.launch_ns);
  p.median_wait_ns = med(s.wait_ns);
  p.median_finish_ns = med(s.finish_ns);
  p.median_between_steps_ns = med(s.between_ns);
  return p;
}

EngineProfile StepProfiler::summary() const {
  EngineProfile p;
  p.decode = finish(decode_);
  p.prefill = finish(prefill_);
  return p;
}

}  // namespace ib::detail
