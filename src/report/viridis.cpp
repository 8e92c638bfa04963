// The viridis colour map of the SVG heatmaps (detail/viridis.h).
#include "report/detail/viridis.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace ib::detail {

std::string viridis_hex(double x) {
  x = std::clamp(std::isfinite(x) ? x : 0.0, 0.0, 1.0);
  const double pos = x * static_cast<double>(kViridis.size() - 1);
  const auto i = std::min<size_t>(static_cast<size_t>(pos), kViridis.size() - 2);
  const double f = pos - static_cast<double>(i);
  auto channel = [&](int shift) {
    const double a = (kViridis[i] >> shift) & 0xff;
    const double b = (kViridis[i + 1] >> shift) & 0xff;
    return static_cast<int>(std::lround(a + (b - a) * f));
  };
  return fmt::format("#{:02x}{:02x}{:02x}", channel(16), channel(8), channel(0));
}

}  // namespace ib::detail
