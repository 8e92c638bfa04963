#include "workload/arrival.h"

#include <cmath>

#include <fmt/format.h>

#include "core/rng.h"

namespace ib {

Status validate_arrival(double request_rate, double burstiness) {
  if (!(request_rate > 0)) {
    return user_error(
        fmt::format("--request-rate must be positive (got {}); use inf to send everything at once",
                    request_rate));
  }
  if (!(burstiness > 0) || !std::isfinite(burstiness)) {
    return user_error(fmt::format(
        "--burstiness must be a positive finite number (got {}); 1 gives Poisson arrivals",
        burstiness));
  }
  return Ok{};
}

std::vector<int64_t> arrival_offsets_ns(int num_requests, double request_rate, double burstiness,
                                        uint64_t seed) {
  std::vector<int64_t> out(static_cast<size_t>(std::max(num_requests, 0)), 0);
  if (out.empty() || std::isinf(request_rate)) return out;
  Rng rng(seed);
  const double scale_s = 1.0 / (request_rate * burstiness);
  std::vector<double> cumulative_s(out.size());
  double t_s = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    t_s += rng.gamma(burstiness, scale_s);
    cumulative_s[i] = t_s;
  }
  const double target_last_s = static_cast<double>(num_requests) / request_rate;
  const double factor = t_s > 0 ? target_last_s / t_s : 0.0;
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<int64_t>(std::llround(cumulative_s[i] * factor * 1e9));
  }
  return out;
}

}  // namespace ib
