#include "workload/length_dist.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <vector>

#include <fmt/format.h>

namespace ib {
namespace {

constexpr int kMaxNormalRejections = 1000;

Result<double> parse_number(std::string_view text, std::string_view key, std::string_view flag) {
  double v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || !std::isfinite(v)) {
    return user_error(
        fmt::format("{}: '{}={}' is not a number; write e.g. {}=64", flag, key, text, key));
  }
  return v;
}

Result<int> parse_int(std::string_view text, std::string_view key, std::string_view flag) {
  IB_ASSIGN_OR_RETURN(double v, parse_number(text, key, flag));
  if (v != std::floor(v) || std::fabs(v) > 1e9) {
    return user_error(fmt::format("{}: '{}={}' must be a whole number of tokens", flag, key, text));
  }
  return static_cast<int>(v);
}

// "a=1,b=2" -> {a: "1", b: "2"}; keys must be among allowed and all present.
Result<std::map<std::string, std::string>> parse_params(std::string_view text,
                                                        const std::vector<std::string>& keys,
                                                        std::string_view flag,
                                                        std::string_view usage) {
  std::map<std::string, std::string> out;
  size_t pos = 0;
  while (pos <= text.size() && !text.empty()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string_view item = text.substr(pos, comma - pos);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return user_error(fmt::format("{}: '{}' is not key=value; use {}", flag, item, usage));
    }
    std::string key(item.substr(0, eq));
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      return user_error(fmt::format("{}: unknown parameter '{}'; use {}", flag, key, usage));
    }
    out[key] = std::string(item.substr(eq + 1));
    pos = comma + 1;
  }
  for (const auto& k : keys) {
    if (!out.count(k)) return user_error(fmt::format("{}: missing '{}'; use {}", flag, k, usage));
  }
  return out;
}

}  // namespace

std::string LengthDist::describe() const {
  switch (kind) {
    case Kind::kFixed:
      return std::to_string(value);
    case Kind::kNormal:
      return fmt::format("normal:mean={},std={},min={},max={}", mean, stddev, min, max);
    case Kind::kUniform:
      return fmt::format("uniform:min={},max={}", min, max);
  }
  return "?";
}

Status LengthDist::validate(std::string_view flag) const {
  if (kind == Kind::kFixed) {
    if (value <= 0) {
      return user_error(
          fmt::format("{} must be a positive number of tokens (got {})", flag, value));
    }
    return Ok{};
  }
  if (min <= 0) {
    return user_error(
        fmt::format("{}: min must be a positive number of tokens (got {})", flag, min));
  }
  if (max < min) {
    return user_error(fmt::format("{}: max ({}) is below min ({}); swap them", flag, max, min));
  }
  if (kind == Kind::kNormal && stddev < 0) {
    return user_error(fmt::format("{}: std must be >= 0 (got {})", flag, stddev));
  }
  return Ok{};
}

Result<LengthDist> parse_length_dist(std::string_view spec, std::string_view flag) {
  constexpr std::string_view kNormalUsage = "normal:mean=256,std=64,min=32,max=1024";
  constexpr std::string_view kUniformUsage = "uniform:min=32,max=1024";
  LengthDist d;
  const size_t colon = spec.find(':');
  const std::string_view kind = spec.substr(0, colon);
  const std::string_view params = colon == std::string_view::npos ? "" : spec.substr(colon + 1);
  if (colon == std::string_view::npos && !spec.empty() &&
      spec.find_first_not_of("0123456789-+") == std::string_view::npos) {
    IB_ASSIGN_OR_RETURN(d.value, parse_int(spec, "length", flag));
  } else if (kind == "normal") {
    IB_ASSIGN_OR_RETURN(auto p,
                        parse_params(params, {"mean", "std", "min", "max"}, flag, kNormalUsage));
    d.kind = LengthDist::Kind::kNormal;
    IB_ASSIGN_OR_RETURN(d.mean, parse_number(p["mean"], "mean", flag));
    IB_ASSIGN_OR_RETURN(d.stddev, parse_number(p["std"], "std", flag));
    IB_ASSIGN_OR_RETURN(d.min, parse_int(p["min"], "min", flag));
    IB_ASSIGN_OR_RETURN(d.max, parse_int(p["max"], "max", flag));
  } else if (kind == "uniform") {
    IB_ASSIGN_OR_RETURN(auto p, parse_params(params, {"min", "max"}, flag, kUniformUsage));
    d.kind = LengthDist::Kind::kUniform;
    IB_ASSIGN_OR_RETURN(d.min, parse_int(p["min"], "min", flag));
    IB_ASSIGN_OR_RETURN(d.max, parse_int(p["max"], "max", flag));
  } else {
    return user_error(fmt::format("{}: unknown distribution '{}'; use a length, {} or {}", flag,
                                  spec, kNormalUsage, kUniformUsage));
  }
  IB_TRY(d.validate(flag));
  return d;
}

int sample_length(const LengthDist& dist, Rng& rng) {
  switch (dist.kind) {
    case LengthDist::Kind::kFixed:
      return dist.value;
    case LengthDist::Kind::kUniform:
      return static_cast<int>(rng.uniform_int(dist.min, dist.max));
    case LengthDist::Kind::kNormal: {
      double x = dist.mean;
      for (int i = 0; i < kMaxNormalRejections; ++i) {
        x = std::round(dist.mean + dist.stddev * rng.normal());
        if (x >= dist.min && x <= dist.max) return static_cast<int>(x);
      }
      return static_cast<int>(
          std::clamp(x, static_cast<double>(dist.min), static_cast<double>(dist.max)));
    }
  }
  return dist.value;
}

}  // namespace ib
