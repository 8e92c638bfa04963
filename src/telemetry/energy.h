// Energy from the timeline: joules per phase from the GPU energy counters (summed over GPUs),
// or, where a counter is missing, from integrated board power (flagged: NVML power is a 1 s
// average on recent GPUs). Tokens per joule per run, overall, and for the time spent in
// prefill-heavy and decode-heavy engine steps.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "telemetry/timeline.h"

namespace ib {

// Cumulative joules at each sample (summed over GPUs) and how they were obtained:
// "energy_counter", "integrated_power", or "" when the timeline has neither.
struct EnergySeries {
  std::string method;
  std::vector<double> cumulative_j;        // (samples)
  std::vector<double> power_cumulative_j;  // (samples) integrated power, when power was read
  int gpus = 0;
};
EnergySeries energy_series(const Timeline& timeline);

// phase_output_tokens: generated tokens of each phase by name ("run 0", "warm-up"). A phase
// shorter than the counter's update period can see the counter not move at all: that phase
// falls back to integrated power, and says so in its "method".
nlohmann::json energy_report(
    const Timeline& timeline, const std::vector<PhaseSpan>& phases,
    const std::vector<StepRecord>& steps,
    const std::vector<std::pair<std::string, int64_t>>& phase_output_tokens);

}  // namespace ib
