// The --calibration flags of `inferbench run` and `inferbench eval`: static int8 W8A8 activation
// scales calibrated on the first prompts of the workload's dataset (engine/calibration.h), instead
// of the dynamic per-token scales. Declared once here and inherited by RunFlags and EvalFlags, as
// EngineFlags is; resolve_calibration is their one validation.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/result.h"
#include "engine/calibration.h"

namespace ib {

// The settings left unset take their defaults (kDefaultCalibrationPrompts, asymmetric, 0.9999);
// unset rather than defaulted so that a setting given without the calibration it belongs to is
// refused instead of silently ignored.
struct CalibrationFlags {
  std::string calibration = "none";  // none, minmax or percentile
  std::optional<int> calibration_prompts;
  std::optional<std::string> calibration_scheme;  // asymmetric or symmetric
  std::optional<double> calibration_percentile;   // in (0.5, 1]
};

// 16 prompts: what the calibration tests measured with (bench/NOTES.md); min/max ranges only
// widen with more, while a percentile's tail is better sampled from more.
inline constexpr int kDefaultCalibrationPrompts = 16;

void add_calibration_flags(CLI::App& app, CalibrationFlags& flags);

// The calibration asked for (nullopt: none) with its prompt count, or a user error naming the
// flag and the fix: an unknown method or scheme, a setting without --calibration, a percentile
// outside (0.5, 1] or without `percentile`, fewer than one prompt, a --quantization other than
// int8-w8a8. Whether the dataset holds the prompts is checked where they are drawn
// (workload/workload.h).
struct ResolvedCalibration {
  CalibrationOptions options;
  int prompts = kDefaultCalibrationPrompts;
};
Result<std::optional<ResolvedCalibration>> resolve_calibration(const CalibrationFlags& flags,
                                                               const std::string& quantization);

// result.json's config keys beside "quantization" (each null without calibration, the
// percentile also without `percentile`): calibration, calibration_scheme, calibration_percentile
// and calibration_prompts, so `run --from` gives the same flags back.
void add_calibration_config(nlohmann::json& config,
                            const std::optional<ResolvedCalibration>& calibration);

// The flags as given (none: empty), for commands that pass them on (the suite's eval step).
std::vector<std::string> calibration_args(const CalibrationFlags& flags);

}  // namespace ib
