// The live progress line on stderr: shown only when stderr is a terminal and not disabled,
// redrawn at most ten times a second, cleared at the end.
#pragma once

#include <cstdint>

#include "orchestrate/orchestrate.h"
#include "runner/progress.h"

namespace ib {

class ProgressLine {
 public:
  explicit ProgressLine(bool enabled);
  ~ProgressLine();
  void update(const Progress& p);
  void clear();

 private:
  bool enabled_;
  bool drawn_ = false;
  int64_t last_draw_ns_ = 0;
};

// The callbacks orchestrate/ draws a run's progress through; `line` outlives them.
RunProgress progress_callbacks(ProgressLine& line);

}  // namespace ib
