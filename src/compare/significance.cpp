// Welch's t-test and the Student t distribution through the regularized incomplete beta.
#include <algorithm>
#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "compare/compare.h"
#include "core/stats.h"

namespace ib {
namespace {

// The continued fraction of I_x(a, b) (modified Lentz), valid for x < (a + 1) / (a + b + 2).
double beta_continued_fraction(double a, double b, double x) {
  constexpr double kTiny = 1e-300;
  constexpr double kEps = 1e-15;
  double c = 1.0;
  double d = 1.0 - (a + b) * x / (a + 1.0);
  if (std::fabs(d) < kTiny) d = kTiny;
  d = 1.0 / d;
  double f = d;
  for (int m = 1; m <= 500; ++m) {
    const double md = static_cast<double>(m);
    // Even step: d_{2m} = m (b - m) x / ((a + 2m - 1)(a + 2m)).
    double num = md * (b - md) * x / ((a + 2 * md - 1) * (a + 2 * md));
    d = 1.0 + num * d;
    c = 1.0 + num / c;
    if (std::fabs(d) < kTiny) d = kTiny;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1.0 / d;
    f *= d * c;
    // Odd step: d_{2m+1} = -(a + m)(a + b + m) x / ((a + 2m)(a + 2m + 1)).
    num = -(a + md) * (a + b + md) * x / ((a + 2 * md) * (a + 2 * md + 1));
    d = 1.0 + num * d;
    c = 1.0 + num / c;
    if (std::fabs(d) < kTiny) d = kTiny;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1.0 / d;
    const double delta = d * c;
    f *= delta;
    if (std::fabs(delta - 1.0) < kEps) break;
  }
  return f;
}

double sample_variance(std::span<const double> xs) {
  const double m = mean(xs);
  double acc = 0;
  for (double x : xs) acc += (x - m) * (x - m);
  return acc / static_cast<double>(xs.size() - 1);
}

}  // namespace

double regularized_incomplete_beta(double a, double b, double x) {
  if (x <= 0) return 0.0;
  if (x >= 1) return 1.0;
  const double log_front =
      std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x);
  if (x < (a + 1.0) / (a + b + 2.0)) {
    return std::exp(log_front) * beta_continued_fraction(a, b, x) / a;
  }
  // Symmetry: I_x(a, b) = 1 - I_{1-x}(b, a).
  return 1.0 - std::exp(log_front) * beta_continued_fraction(b, a, 1.0 - x) / b;
}

double student_t_two_sided_p(double t, double df) {
  if (!std::isfinite(t)) return 0.0;
  return regularized_incomplete_beta(df / 2.0, 0.5, df / (df + t * t));
}

std::optional<WelchTest> welch_t_test(std::span<const double> a, std::span<const double> b) {
  if (a.size() < 2 || b.size() < 2) return std::nullopt;
  const double na = static_cast<double>(a.size());
  const double nb = static_cast<double>(b.size());
  const double va = sample_variance(a) / na;
  const double vb = sample_variance(b) / nb;
  const double diff = mean(b) - mean(a);
  WelchTest w;
  if (va + vb == 0) {
    w.t = diff == 0 ? 0.0 : std::copysign(INFINITY, diff);
    w.df = na + nb - 2;
    w.p = diff == 0 ? 1.0 : 0.0;
    return w;
  }
  w.t = diff / std::sqrt(va + vb);
  w.df = (va + vb) * (va + vb) / (va * va / (na - 1) + vb * vb / (nb - 1));
  w.p = student_t_two_sided_p(w.t, w.df);
  return w;
}

Result<double> parse_fraction(const std::string& text, const std::string& flag) {
  std::string number = text;
  const bool pct = !number.empty() && number.back() == '%';
  if (pct) number.pop_back();
  double v = 0;
  const auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), v);
  if (ec != std::errc() || ptr != number.data() + number.size() || !(v >= 0) || !std::isfinite(v)) {
    return user_error(
        fmt::format("{} {}: write a percentage like 5% (or a fraction like 0.05)", flag, text));
  }
  return pct || v >= 1 ? v / 100.0 : v;
}

}  // namespace ib
