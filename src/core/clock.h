// The one clock: steady_clock in nanoseconds. Every request record, telemetry sample and phase
// marker is stamped with it; wall-clock time appears once, in the result header.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace ib {

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline double ns_to_ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }
inline double ns_to_s(int64_t ns) { return static_cast<double>(ns) / 1e9; }

// ISO-8601 UTC wall-clock time, for result headers only.
std::string utc_timestamp_iso8601();
// Compact local-independent stamp for directory names: 20261129-164155.
std::string utc_timestamp_compact();

}  // namespace ib
