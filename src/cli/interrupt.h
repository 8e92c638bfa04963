// Ctrl-C handling without a signal handler or global state: SIGINT, SIGTERM and SIGUSR1 (what
// srun passes on to the tasks of a step, and what `sbatch --signal=USR1@SECONDS` sends before a
// time limit) are blocked in the constructing thread (and so in every thread it creates later)
// and a watcher thread takes them with sigtimedwait(). The first sets the flag the runner polls;
// a second one exits at once with 130.
//
// Construct it before any other thread exists (engine, sampler, thread pool).
#pragma once

#include <signal.h>

#include <atomic>
#include <thread>

namespace ib {

class InterruptWatcher {
 public:
  InterruptWatcher();
  ~InterruptWatcher();
  InterruptWatcher(const InterruptWatcher&) = delete;
  InterruptWatcher& operator=(const InterruptWatcher&) = delete;

  const std::atomic<bool>& flag() const { return interrupted_; }
  bool interrupted() const { return interrupted_.load(); }

 private:
  void watch();

  sigset_t set_{};
  sigset_t previous_{};
  std::atomic<bool> interrupted_{false};
  std::atomic<bool> done_{false};
  std::thread thread_;
};

}  // namespace ib
