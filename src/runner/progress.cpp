#include "runner/progress.h"

#include <fmt/format.h>

namespace ib {

std::string format_progress(const Progress& p) {
  const double elapsed_s = static_cast<double>(p.elapsed_ns) / 1e9;
  const double tok_s = elapsed_s > 0 ? static_cast<double>(p.output_tokens) / elapsed_s : 0.0;
  std::string eta = "--:--";
  if (p.done > 0 && p.done <= p.total) {
    const auto left_s = static_cast<int64_t>(elapsed_s / p.done * (p.total - p.done) + 0.5);
    eta = fmt::format("{}:{:02d}", left_s / 60, left_s % 60);
  }
  const std::string phase = p.warmup ? "warm-up" : fmt::format("run {}/{}", p.run + 1, p.runs);
  return fmt::format("{}  {}/{} requests  {:.1f} tok/s  ETA {}", phase, p.done, p.total, tok_s,
                     eta);
}

}  // namespace ib
