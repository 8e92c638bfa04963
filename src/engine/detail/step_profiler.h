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
  };
  static StepClassProfile finish(const Samples& s);
  Samples decode_, prefill_;
};

}  // namespace ib::detail
