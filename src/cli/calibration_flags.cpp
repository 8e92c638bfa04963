#include "cli/calibration_flags.h"

#include <fmt/format.h>

namespace ib {

void add_calibration_flags(CLI::App& app, CalibrationFlags& f) {
  app.add_option("--calibration", f.calibration,
                 "int8-w8a8: none (dynamic per-token activation scales), or static per-tensor "
                 "scales calibrated on the dataset's first prompts from their minmax or "
                 "percentile range")
      ->capture_default_str();
  app.add_option("--calibration-prompts", f.calibration_prompts,
                 fmt::format("prompts calibrated on: the first N of --dataset-path (default {}, "
                             "the calibration tests' count: minmax ranges only widen with more "
                             "prompts; a percentile's tails are sampled better)",
                             kDefaultCalibrationPrompts));
  app.add_option("--calibration-scheme", f.calibration_scheme,
                 "asymmetric (default; the seed's uint8 scale = (max - min) / 255, zero point = "
                 "round(-min / scale)) or symmetric (scale = max |x| / 127)");
  app.add_option("--calibration-percentile", f.calibration_percentile,
                 "--calibration percentile: the range's upper quantile P, lower 1 - P, P in "
                 "(0.5, 1] (default 0.9999)");
}

Result<std::optional<ResolvedCalibration>> resolve_calibration(const CalibrationFlags& f,
                                                               const std::string& quantization) {
  if (f.calibration == "none") {
    if (f.calibration_prompts || f.calibration_scheme || f.calibration_percentile) {
      return user_error(
          "--calibration-prompts, --calibration-scheme and --calibration-percentile set up "
          "--calibration minmax|percentile; add it or drop them");
    }
    return std::optional<ResolvedCalibration>{};
  }
  ResolvedCalibration c;
  if (f.calibration == "minmax") {
    c.options.method = CalibrationMethod::kMinMax;
  } else if (f.calibration == "percentile") {
    c.options.method = CalibrationMethod::kPercentile;
  } else {
    return user_error(
        fmt::format("--calibration {}: use none, minmax or percentile", f.calibration));
  }
  const std::string scheme = f.calibration_scheme.value_or("asymmetric");
  if (scheme != "asymmetric" && scheme != "symmetric") {
    return user_error(fmt::format("--calibration-scheme {}: use asymmetric or symmetric", scheme));
  }
  c.options.scheme =
      scheme == "symmetric" ? ActivationScheme::kSymmetric : ActivationScheme::kAsymmetric;
  if (f.calibration_percentile) {
    if (c.options.method != CalibrationMethod::kPercentile) {
      return user_error(
          "--calibration-percentile applies to --calibration percentile; use that or drop the "
          "percentile");
    }
    const double p = *f.calibration_percentile;
    if (!(p > 0.5 && p <= 1.0)) {
      return user_error(fmt::format(
          "--calibration-percentile {}: must be in (0.5, 1], e.g. 0.9999 (the range keeps all "
          "but the top and bottom 0.01 %)",
          p));
    }
    c.options.percentile = p;
  }
  c.prompts = f.calibration_prompts.value_or(kDefaultCalibrationPrompts);
  if (c.prompts < 1) {
    return user_error(
        fmt::format("--calibration-prompts {}: calibrate on at least 1 prompt", c.prompts));
  }
  if (quantization != "int8-w8a8") {
    return user_error(
        fmt::format("--calibration {} sets static activation scales of int8 W8A8 weights, not of "
                    "--quantization {}; add --quantization int8-w8a8 or drop --calibration",
                    f.calibration, quantization));
  }
  return std::optional<ResolvedCalibration>{c};
}

void add_calibration_config(nlohmann::json& config, const std::optional<ResolvedCalibration>& c) {
  using nlohmann::json;
  const bool percentile = c && c->options.method == CalibrationMethod::kPercentile;
  config["calibration"] = c ? json(calibration_method_name(c->options.method)) : json(nullptr);
  config["calibration_scheme"] =
      c ? json(activation_scheme_name(c->options.scheme)) : json(nullptr);
  config["calibration_percentile"] = percentile ? json(c->options.percentile) : json(nullptr);
  config["calibration_prompts"] = c ? json(c->prompts) : json(nullptr);
}

std::vector<std::string> calibration_args(const CalibrationFlags& f) {
  if (f.calibration == "none") return {};
  std::vector<std::string> args = {"--calibration", f.calibration};
  if (f.calibration_prompts) {
    args.insert(args.end(), {"--calibration-prompts", std::to_string(*f.calibration_prompts)});
  }
  if (f.calibration_scheme)
    args.insert(args.end(), {"--calibration-scheme", *f.calibration_scheme});
  if (f.calibration_percentile) {
    args.insert(args.end(),
                {"--calibration-percentile", fmt::format("{}", *f.calibration_percentile)});
  }
  return args;
}

}  // namespace ib
