// Internal to report/: the viridis colour map shared by the SVG heatmaps.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace ib::detail {

// Viridis at ten evenly spaced points (matplotlib's published colour map, 0xRRGGBB).
inline constexpr std::array<uint32_t, 10> kViridis = {0x440154, 0x482878, 0x3e4989, 0x31688e,
                                                      0x26828e, 0x1f9e89, 0x35b779, 0x6ece58,
                                                      0xb5de2b, 0xfde725};

// "#rrggbb" at x in [0, 1] (clamped; NaN as 0), linear in RGB between the stops.
std::string viridis_hex(double x);

}  // namespace ib::detail
