// Internal to orchestrate/: the telemetry of one `inferbench run`: the engine hooks (step markers,
// allocation trace), the phases derived from the runner's records, energy, per-layer peaks, and the
// memory outputs of the result directory (memory.csv, steps.csv, allocations.csv, heatmap.svg,
// report.html).
//
// Call order (runner thread): instrument() before the target is made, loaded() when setup()
// returned, finish() after the target was torn down, write_outputs() into the result dir.
#pragma once

#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "orchestrate/orchestrate.h"
#include "report/report.h"
#include "telemetry/telemetry.h"

namespace ib {

class RunTelemetry {
 public:
  RunTelemetry(const RunPlan& plan, int64_t origin_ns);

  bool enabled() const { return enabled_; }
  // The target options with the step and allocation-trace hooks added (unchanged when off).
  TargetOptions instrument(TargetOptions options);
  void loaded(int64_t t_ns) { loaded_ns_ = t_ns; }

  // Phases, labels, derived series, allocation analysis, energy and peaks: into report.memory
  // and report.energy. Call after the target was torn down (the trace arrives at teardown).
  void finish(const Sampler& sampler, const BenchmarkRecords& records, BenchmarkReport& report);
  // memory.csv, steps.csv, allocations.csv, heatmap.svg and report.html (skipped, with one line
  // on stderr, when plotly.js is missing). File names written are returned.
  Result<std::vector<std::string>> write_outputs(const std::filesystem::path& dir,
                                                 const BenchmarkReport& report) const;

 private:
  struct Shared {  // filled from the engine thread
    StepLog steps;
    std::mutex mu;
    std::optional<std::vector<MemoryEvent>> trace;
  };
  const RunPlan& plan_;
  int64_t origin_ns_;
  bool enabled_;
  int64_t loaded_ns_ = 0;
  std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
  std::optional<MemoryRecording> recording_;
  std::vector<StepRecord> steps_;  // finish(): every engine step, relative to the origin
};

// The phases of a benchmark from its records: load [origin, loaded], warm-up and each run from
// the first send to the last token; times relative to origin_ns.
std::vector<PhaseSpan> benchmark_phases(const BenchmarkRecords& records, int64_t origin_ns,
                                        int64_t loaded_ns);

}  // namespace ib
