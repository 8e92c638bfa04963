#include "core/clock.h"

#include <ctime>

namespace ib {
namespace {
std::string format_utc(const char* fmt) {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, fmt, &tm);
  return buf;
}
}  // namespace

std::string utc_timestamp_iso8601() { return format_utc("%Y-%m-%dT%H:%M:%SZ"); }
std::string utc_timestamp_compact() { return format_utc("%Y%m%d-%H%M%S"); }
}  // namespace ib
