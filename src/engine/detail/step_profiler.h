// Internal to engine/: accumulates each step's StepStats into the decode / prefill classes of
// EngineProfile (sums, and the per-step samples the medians are taken over).
#pragma once

#include <vector>

#include "engine/engine.h"

namespace ib::detail {

class StepProfiler {
 public:
  void add(const StepStats& s);
  EngineProfile summary() const;

 private:
  struct Samples {
    StepClassProfile sums;
    std::vector<int64_t> wall_ns;       // every step
    std::vector<int64_t> device_ns;     // timed steps
    std::vector<double> host_fraction;  // timed steps
    // StepClassProfile's host phases, per step that ran a batch (between: after a step).
    std::vector<int64_t> schedule_ns, launch_ns, wait_ns, finish_ns, between_ns;
  };
  static StepClassProfile finish(const Samples& s);
  Samples decode_, prefill_;
  int64_t last_end_ns_ = 0;  // the previous step's end (host clock); 0 before the first
};

}  // namespace ib::detail
