// The live progress line (stderr, only when it is a terminal): done/total, tok/s, ETA.
#pragma once

#include <cstdint>
#include <string>

namespace ib {

struct Progress {
  bool warmup = false;
  int run = 0;  // 0-based
  int runs = 0;
  int done = 0;  // requests finished in this phase
  int total = 0;
  int64_t output_tokens = 0;  // in this phase
  int64_t elapsed_ns = 0;     // since this phase started
};

// e.g. "run 2/3  120/200 requests  1534.2 tok/s  ETA 0:07"
std::string format_progress(const Progress& p);

}  // namespace ib
