#include "cli/progress_line.h"

#include <cstdio>

#include "core/clock.h"

namespace ib {

ProgressLine::ProgressLine(bool enabled) : enabled_(enabled) {}

ProgressLine::~ProgressLine() {
  clear();
}

void ProgressLine::update(const Progress& p) {
  if (!enabled_) return;
  const int64_t now = now_ns();
  if (drawn_ && now - last_draw_ns_ < 100'000'000 && p.done != p.total) return;
  last_draw_ns_ = now;
  std::fprintf(stderr, "\r\033[K%s", format_progress(p).c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressLine::clear() {
  if (!drawn_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  drawn_ = false;
}

RunProgress progress_callbacks(ProgressLine& line) {
  return RunProgress{[&line](const Progress& p) { line.update(p); }, [&line] { line.clear(); }};
}

}  // namespace ib
