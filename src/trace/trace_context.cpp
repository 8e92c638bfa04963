// W3C trace-context headers (traceparent, version 00).
#include <string>

#include "trace/trace.h"

namespace ib {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // W3C: lowercase only
}

template <size_t N>
bool parse_hex(std::string_view text, std::array<uint8_t, N>& out) {
  if (text.size() != 2 * N) return false;
  for (size_t i = 0; i < N; ++i) {
    const int hi = hex_value(text[2 * i]);
    const int lo = hex_value(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return true;
}

template <size_t N>
bool all_zero(const std::array<uint8_t, N>& id) {
  return id == std::array<uint8_t, N>{};
}

}  // namespace

std::string to_hex(const uint8_t* bytes, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = kDigits[bytes[i] >> 4];
    s[2 * i + 1] = kDigits[bytes[i] & 15];
  }
  return s;
}

std::optional<TraceContext> parse_traceparent(std::string_view h) {
  // version "-" trace-id "-" parent-id "-" flags: 2 + 1 + 32 + 1 + 16 + 1 + 2 = 55 characters.
  // A later version may append fields after a '-'; version 00 has exactly 55.
  if (h.size() < 55 || h[2] != '-' || h[35] != '-' || h[52] != '-') return std::nullopt;
  std::array<uint8_t, 1> version{};
  std::array<uint8_t, 1> flags{};
  TraceContext c;
  if (!parse_hex(h.substr(0, 2), version) || !parse_hex(h.substr(3, 32), c.trace_id) ||
      !parse_hex(h.substr(36, 16), c.span_id) || !parse_hex(h.substr(53, 2), flags)) {
    return std::nullopt;
  }
  if (version[0] == 0xff || (version[0] == 0 && h.size() != 55) ||
      (h.size() > 55 && h[55] != '-')) {
    return std::nullopt;
  }
  if (all_zero(c.trace_id) || all_zero(c.span_id)) return std::nullopt;
  c.sampled = (flags[0] & 1) != 0;
  return c;
}

std::string format_traceparent(const TraceContext& c) {
  return "00-" + to_hex(c.trace_id.data(), c.trace_id.size()) + "-" +
         to_hex(c.span_id.data(), c.span_id.size()) + (c.sampled ? "-01" : "-00");
}

}  // namespace ib
